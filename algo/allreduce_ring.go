package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(ringAllreduce{base{"ring", sched.Allreduce}}) }

// ringAllreduce is the ring allreduce (Patarasuk and Yuan; NCCL's ring): a
// ring reduce-scatter, after which rank r holds the sum of block r+1, then a
// ring allgather of the sums. Count is split into n blocks as evenly as
// possible; blocks may be empty (then nothing is sent for them). Each sum is
// computed once, by the rank that ends up holding it, so every rank gets the
// same bits.
//
// Cost: 2(n−1)(α + M/(nβ)) + (n−1)·M/n·γ for M bytes, n ranks.
type ringAllreduce struct{ base }

func (ringAllreduce) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	blk := func(buf sched.Buf, i int) sched.Chunk {
		i = mod(i, n)
		return blocks(buf, c, n, i, i+1)
	}
	if n == 1 {
		g.copy(whole(sched.In, c), whole(sched.Out, c))
		return g.program()
	}
	next, prev := mod(r+1, n), mod(r-1, n)
	// Reduce-scatter. Block r leaves from In; every other block is copied to
	// Out just before the partial sum from prev is added to it.
	for s := range n - 1 {
		src := blk(sched.Out, r-s)
		if s == 0 {
			src = blk(sched.In, r)
		}
		g.send(next, s, src)
		g.copy(blk(sched.In, r-s-1), blk(sched.Out, r-s-1))
		g.recvReduce(prev, s, blk(sched.Out, r-s-1))
	}
	// Allgather: rank r starts with the sum of block r+1.
	for s := range n - 1 {
		g.send(next, n-1+s, blk(sched.Out, r+1-s))
		g.recv(prev, n-1+s, blk(sched.Out, r-s))
	}
	return g.program()
}

func (ringAllreduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	n, b := float64(p.NRanks), bytesOf(p.Count, es)/float64(p.NRanks)
	return 2*(n-1)*m.Flat(p).Time(b) + (n-1)*b*m.Gamma
}
