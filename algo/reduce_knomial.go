package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(knomialReduce{base{"knomial", sched.Reduce}}) }

// knomialReduce reduces along the k-nomial tree of knomialBcast, k =
// Params.Radix (KnomialRadix when 0), the other way: rank v (its distance
// from the root) adds the partial sums of its children level by level,
// the lowest level first, and sends its own to its parent. On each level
// it receives from all its children at once, the first one added on
// arrival, the others into Tmp slots and added after, in order of j. So
// the order of the additions is fixed by n, k and the root alone, and
// every run gives the same bits. k = 2 is "binomial". Inner ranks other
// than the root add into Tmp; a rank needs k−2 slots of Count elements
// more.
//
// Cost, for M bytes on n ranks, with L levels and D root children as for
// knomialBcast:
//
//	T = L·α + D·(M/β + Mγ)
//
// the receives of a level overlap their latencies; their bytes and the
// additions come one after another.
type knomialReduce struct{ base }

func (knomialReduce) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, k, c := p.NRanks, knomialRadix(p), p.Count
	v := mod(r-p.Root, n)
	actual := func(u int) int { return mod(u+p.Root, n) }
	parent, mask := knomialUp(n, k, v)
	acc, slots := whole(sched.Out, c), 0 // slots start at Tmp[slots]
	if parent >= 0 {
		acc, slots = whole(sched.Tmp, c), c
	}
	slot := func(i int) sched.Chunk { return span(sched.Tmp, slots+i*c, c) }
	cur := whole(sched.In, c)
	for m := 1; m < mask && v+m < n; m *= k {
		if cur != acc {
			g.copy(cur, acc)
			cur = acc
		}
		g.recvReduce(actual(v+m), 0, acc)
		d := 1
		for ; d+1 < k && v+(d+1)*m < n; d++ {
			g.recv(actual(v+(d+1)*m), 0, slot(d-1))
		}
		for i := range d - 1 {
			g.reduce(slot(i), acc)
		}
	}
	if parent >= 0 {
		g.send(actual(parent), 0, cur)
	} else if cur != acc { // the root of a tree of one
		g.copy(cur, acc)
	}
	return g.program()
}

func (knomialReduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	l := m.Flat(p)
	mb := bytesOf(p.Count, es)
	levels, children := knomialShape(p.NRanks, knomialRadix(p))
	return float64(levels)*l.Alpha + float64(children)*(mb/l.Beta+mb*m.Gamma+m.Overhead)
}

// Tune sets Params.Radix, if 0, to the k that minimises Cost.
func (knomialReduce) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	if p.Radix != 0 {
		return p
	}
	l := m.Flat(p)
	mb := bytesOf(p.Count, es)
	p.Radix = tuneRadix(p.NRanks, l.Alpha, mb/l.Beta+mb*m.Gamma+m.Overhead)
	return p
}
