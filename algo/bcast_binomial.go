package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(binomialBcast{base{"binomial", sched.Bcast}}) }

// binomialBcast broadcasts along a binomial tree rooted at the root (MPICH's
// short-message broadcast): with v the rank's distance from the root, v
// receives from v − lowbit(v) and sends to v + 2^k for every 2^k below its
// lowest set bit, largest first.
//
// Cost: ⌈log2 n⌉(α + M/β): a rank's sends to its children leave one
// after another, the largest subtree's first, and a chain of ⌈log2 n⌉ of
// them reaches the last rank. It is "knomial" with k = 2.
type binomialBcast struct{ base }

func (binomialBcast) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	in, out := whole(sched.In, p.Count), whole(sched.Out, p.Count)
	treeBcast(g, p.NRanks, p.Root, r, 0, in, out)
	if r == p.Root {
		g.copy(in, out)
	}
	return g.program()
}

// treeBcast appends rank r's part of a binomial-tree broadcast from root
// with tag: the root sends src, the others receive into dst and pass it on.
func treeBcast(g *gen, n, root, r, tag int, src, dst sched.Chunk) {
	v := mod(r-root, n)
	mask := 1
	for ; mask < n; mask <<= 1 {
		if v&mask != 0 {
			g.recv(mod(r-mask, n), tag, dst)
			src = dst
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < n {
			g.send(mod(r+mask, n), tag, src)
		}
	}
}

func (binomialBcast) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	return float64(ceilLog2(p.NRanks)) * m.Flat(p).Time(bytesOf(p.Count, es))
}
