package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(disseminationBarrier{base{"dissemination", sched.Barrier}}) }

// disseminationBarrier is the dissemination barrier (Hensgen, Finkel and
// Manber 1988): in round k rank r sends an empty message to r+2^k and
// receives one from r−2^k; each send waits for the previous round's send and
// receive, so after ⌈log2 n⌉ rounds every rank has heard, directly or not,
// from every other.
//
// Cost: ⌈log2 n⌉α.
type disseminationBarrier struct{ base }

func (disseminationBarrier) Program(p sched.Params, r int) sched.Program {
	n := p.NRanks
	b := sched.NewBuilder(r)
	none := sched.Chunk{Buf: sched.Out}
	send, recv := sched.None, sched.None
	k := int32(0)
	for d := 1; d < n; d *= 2 {
		send = b.Send(mod(r+d, n), k, none, send, recv)
		recv = b.Recv(mod(r-d, n), k, none)
		k++
	}
	return b.P
}

func (disseminationBarrier) Cost(p sched.Params, _ int, m cost.Model) float64 {
	return float64(ceilLog2(p.NRanks)) * m.Flat(p).Alpha
}
