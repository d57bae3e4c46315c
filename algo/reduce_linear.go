package algo

import "github.com/braid-ccl/braid/sched"

func init() { Register(linearReduce{base{"linear", sched.Reduce}}) }

// linearReduce has every rank send its vector to the root, which adds them
// into Out one after the other in rank order.
//
// Cost: (n−1)(α + M/β + Mγ) at the root.
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
