package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(reduceBcastAllreduce{base{"reducebcast", sched.Allreduce}}) }

// reduceBcastAllreduce reduces linearly to rank 0 (as reduce "linear") and
// broadcasts the sum along a binomial tree (as bcast "binomial"). The sum is
// computed once, at rank 0. It suits small messages on few ranks.
//
// Cost: (n−1)(α + M/β + Mγ) + ⌈log2 n⌉(α + M/β).
type reduceBcastAllreduce struct{ base }

func (reduceBcastAllreduce) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	in, out := whole(sched.In, p.Count), whole(sched.Out, p.Count)
	reduceToRoot(g, p.NRanks, 0, r, 0, in, out)
	treeBcast(g, p.NRanks, 0, r, 1, out, out)
	return g.program()
}

func (reduceBcastAllreduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	mb := bytesOf(p.Count, es)
	step := m.Flat(p).Time(mb)
	return float64(p.NRanks-1)*(step+mb*m.Gamma) + float64(ceilLog2(p.NRanks))*step
}
