package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(linearReduce{base{"linear", sched.Reduce}}) }

// linearReduce has every rank send its vector to the root, which adds them
// into Out one after the other in rank order.
//
// Cost: (n−1)(α + M/β + Mγ) at the root, which receives each vector into
// Out only after adding the previous one.
type linearReduce struct{ base }

func (linearReduce) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	reduceToRoot(g, p.NRanks, p.Root, r, 0, whole(sched.In, p.Count), whole(sched.Out, p.Count))
	return g.program()
}

// reduceToRoot appends rank r's part of a linear reduce of src (every
// rank's) into acc (the root's) with tag.
func reduceToRoot(g *gen, n, root, r, tag int, src, acc sched.Chunk) {
	if r != root {
		g.send(root, tag, src)
		return
	}
	g.copy(src, acc)
	for j := range n {
		if j != root {
			g.recvReduce(j, tag, acc)
		}
	}
}

func (linearReduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	mb := bytesOf(p.Count, es)
	return float64(p.NRanks-1) * (m.Flat(p).Time(mb) + mb*m.Gamma)
}
