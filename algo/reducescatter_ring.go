package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(ringReduceScatter{base{"ring", sched.ReduceScatter}}) }

// ringReduceScatter is the first half of the ring allreduce, shifted so that
// rank r ends with block r: in step s rank r sends the partial sum of block
// r−s−1 to r+1 and adds its own block r−s−2 to the partial sum it receives
// from r−1. Partial sums wait in two alternating Tmp blocks; the last one is
// added straight into Out.
//
// Cost: (n−1)(α + M/β + Mγ) for M bytes of output per rank. Memory
// traffic (Mover): each step copies the rank's own block into the partial
// sum's place, receives and adds, 3(n−1)·M, and M more per step where the
// block is small enough to go through the transport's ring.
type ringReduceScatter struct{ base }

func (ringReduceScatter) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	blk := func(i int) sched.Chunk { return span(sched.In, mod(i, n)*c, c) }
	slot := func(s int) sched.Chunk { return span(sched.Tmp, s%2*c, c) }
	out := whole(sched.Out, c)
	if n == 1 {
		g.copy(blk(r), out)
		return g.program()
	}
	for s := range n - 1 {
		src := blk(r - 1)
		if s > 0 {
			src = slot(s - 1)
		}
		g.send(mod(r+1, n), s, src)
		dst := slot(s)
		if s == n-2 {
			dst = out
		}
		g.copy(blk(r-s-2), dst)
		g.recvReduce(mod(r-1, n), s, dst)
	}
	return g.program()
}

func (ringReduceScatter) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	mb := bytesOf(p.Count, es)
	return float64(p.NRanks-1) * (m.Flat(p).Time(mb) + mb*m.Gamma)
}

// Moved implements Mover.
func (ringReduceScatter) Moved(p sched.Params, es int, m cost.Model) float64 {
	n, mb := p.NRanks, bytesOf(p.Count, es)
	if n == 1 || p.Count == 0 {
		return mb
	}
	return float64(n-1) * (3*mb + eagerBytes(p.Count, p.Count, es, m.Eager))
}
