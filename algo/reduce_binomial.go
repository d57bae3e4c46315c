package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(binomialReduce{base{"binomial", sched.Reduce}}) }

// binomialReduce reduces along a binomial tree rooted at the root: with v
// the rank's distance from the root, v receives and adds the partial sums of
// v+1, v+2, v+4, … (while below its lowest set bit and n) and then sends its
// own to v − lowbit(v). Inner ranks other than the root add into Tmp.
//
// Cost: ⌈log2 n⌉(α + M/β + Mγ).
type binomialReduce struct{ base }

func (binomialReduce) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	v := mod(r-p.Root, n)
	actual := func(v int) int { return mod(v+p.Root, n) }
	acc := whole(sched.Tmp, c)
	if r == p.Root {
		acc = whole(sched.Out, c)
	}
	cur := whole(sched.In, c)
	for mask := 1; mask < n; mask <<= 1 {
		if v&mask != 0 {
			g.send(actual(v-mask), 0, cur)
			return g.program()
		}
		if v+mask < n {
			if cur != acc {
				g.copy(cur, acc)
				cur = acc
			}
			g.recvReduce(actual(v+mask), 0, acc)
		}
	}
	if cur != acc { // the root of a tree of one
		g.copy(cur, acc)
	}
	return g.program()
}

func (binomialReduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	mb := bytesOf(p.Count, es)
	return float64(ceilLog2(p.NRanks)) * (m.Flat(p).Time(mb) + mb*m.Gamma)
}
