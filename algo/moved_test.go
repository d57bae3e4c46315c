package algo_test

import (
	"math"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// programMoved counts what rank r's program moves through memory, as
// cost.Model.Shared counts it: Copy, Recv and Reduce steps their
// destination, RecvReduce twice its destination, and Send steps of at most
// eager bytes their source.
func programMoved(prog sched.Program, es int, eager float64) float64 {
	var b float64
	for _, s := range prog.Steps {
		switch s.Kind {
		case sched.KindCopy, sched.KindRecv, sched.KindReduce:
			b += float64(s.Dst.Len * es)
		case sched.KindRecvReduce:
			b += 2 * float64(s.Dst.Len*es)
		case sched.KindSend:
			if float64(s.Src.Len*es) <= eager {
				b += float64(s.Src.Len * es)
			}
		}
	}
	return b
}

// TestMovedMatchesPrograms checks every Mover's closed form against the
// busiest rank's program, for 1–9 ranks, counts that do and do not divide
// into segments, segments around the eager limit, and no eager limit.
func TestMovedMatchesPrograms(t *testing.T) {
	movers := 0
	for _, a := range algo.All() {
		mv, ok := a.(algo.Mover)
		if !ok {
			continue
		}
		movers++
		for n := 1; n <= 9; n++ {
			for _, count := range []int{0, 1, 7, 1000, 4096, 20000, 40000} {
				for _, seg := range []int{0, 512, 4096, 5000} {
					p := sched.Params{Coll: a.Collective(), NRanks: n, Count: count, Segment: seg}
					if a.Supports(p) != nil {
						continue
					}
					for _, eager := range []float64{0, 16 << 10, 64 << 10} {
						m := cost.Default()
						m.Eager = eager
						want := 0.0
						for r := range n {
							want = max(want, programMoved(a.Program(p, r), 4, eager))
						}
						if got := mv.Moved(p, 4, m); got != want {
							t.Errorf("%v %s n=%d count=%d seg=%d eager=%g: Moved = %g, the programs move %g",
								a.Collective(), a.Name(), n, count, seg, eager, got, want)
						}
					}
				}
			}
		}
	}
	if movers == 0 {
		t.Fatal("no algorithm implements Mover")
	}
}

// TestCostOf checks that CostOf is Cost without memory limits or for an
// algorithm that states no traffic, and is at least Cost, at least the
// shared memory's time and at least one thread's time with them.
func TestCostOf(t *testing.T) {
	for _, a := range algo.ForCollective(sched.ReduceScatter) {
		if _, ok := a.(algo.Coster); !ok {
			continue
		}
		p := sched.Params{Coll: sched.ReduceScatter, NRanks: 16, Count: 1 << 18}
		if a.Supports(p) != nil {
			continue
		}
		m := cost.Default()
		base := a.(algo.Coster).Cost(p, 4, m)
		got := algo.CostOf(a, p, 4, m)
		if got < base {
			t.Errorf("%s: CostOf %g < Cost %g", a.Name(), got, base)
		}
		if mv, ok := a.(algo.Mover); ok {
			if floor := m.Shared(nil, 16, mv.Moved(p, 4, m)); got < floor {
				t.Errorf("%s: CostOf %g below the memory's %g", a.Name(), got, floor)
			}
		}
		// 2 ranks of 4 MiB each: one thread is the tighter limit.
		two := sched.Params{Coll: sched.ReduceScatter, NRanks: 2, Count: 1 << 20}
		if mv, ok := a.(algo.Mover); ok && a.Supports(two) == nil {
			got := algo.CostOf(a, two, 4, m)
			if floor := m.Own(mv.Moved(two, 4, m), 1); floor <= m.Shared(nil, 2, mv.Moved(two, 4, m)) || got < floor {
				t.Errorf("%s on 2 ranks: CostOf %g, one thread's time %g (want it above the shared memory's %g, and CostOf at least it)",
					a.Name(), got, floor, m.Shared(nil, 2, mv.Moved(two, 4, m)))
			}
		}
		// Without memory limits, nor the extra time of written data,
		// CostOf is Cost.
		m.Memory, m.Core, m.Written = 0, 0, 0
		if got := algo.CostOf(a, p, 4, m); got != base {
			t.Errorf("%s: CostOf without memory limits = %g, Cost %g", a.Name(), got, base)
		}
	}
	if c := algo.CostOf(noCost{}, sched.Params{}, 4, cost.Default()); !math.IsNaN(c) {
		t.Errorf("CostOf of an algorithm without a cost = %g, want NaN", c)
	}
}

// noCost is an algorithm without a cost model.
type noCost struct{ algo.Algorithm }
