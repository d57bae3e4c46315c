package algo

import (
	"context"
	"math"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
)

// TestCostsAgainstSim checks every Cost of hier_test.go's algorithms
// against the simulator running the schedule on the network that the cost
// model describes, with one port per rank and one network link per host
// (sim.RankPorts, sim.SharedNIC), on one host, on hosts of equal and of
// uneven sizes and across NUMA nodes, for small and large counts and
// segments. The closed forms count those bottlenecks but not every
// interplay of fair sharing, nor additions that overlap waiting for a
// farther peer (so "twostep" on two hosts is 20% above the simulation for
// small vectors with slow reductions): they must agree within 3% on one
// host of one NUMA node and within 25% elsewhere. The worst gap is logged.
func TestCostsAgainstSim(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates large schedules")
	}
	// The simulator has no per-message overhead (cost.Model.Overhead),
	// and its ranks' transfers overlap their additions, as a NIC's do
	// (no cost.Model.SelfCopy): compare without either.
	base := cost.Default()
	base.Overhead, base.SelfCopy = 0, false
	var models []cost.Model
	models = append(models, base)
	slow := base
	slow.Gamma = 2e-9 // reductions slower than the links
	models = append(models, slow)
	lays := []testLayout{layouts[0], layouts[2], layouts[4], layouts[6], layouts[7]}
	worst := 0.0
	for _, m := range models {
		for _, la := range layoutAlgos {
			a := mustLookup(t, la.coll, la.name)
			for _, lay := range lays {
				for _, n := range []int{2, 5, 8} {
					for _, count := range []int{1, 1000, 1 << 16, 1<<20 + 3} {
						for _, seg := range []int{0, 1 << 14} {
							p := sched.Params{Coll: la.coll, NRanks: n, Count: count, Root: n / 2, Segment: seg, Layout: lay.make(n)}
							if !la.coll.Rooted() {
								p.Root = 0
							}
							c, simulated, gap := costGap(t, a, p, m)
							worst = max(worst, math.Abs(gap))
							limit := 0.25
							if p.Layout == nil {
								limit = 0.03
							}
							if math.Abs(gap) > limit {
								t.Errorf("%v %s layout %s n=%d count=%d seg=%d γ=%g: cost %.2f µs, simulated %.2f µs (%+.1f%%)",
									la.coll, la.name, lay.name, n, count, seg, m.Gamma, c*1e6, simulated*1e6, gap*100)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("largest gap between cost and simulation: %.2f%%", worst*100)
}

// costGap runs a's schedule for p in the simulator on the network that m
// describes (one port per rank, one network link per host) and returns
// a's Cost for 4-byte elements, the simulated time, and the gap between
// them relative to the simulation.
func costGap(t *testing.T, a Algorithm, p sched.Params, m cost.Model) (c, simulated, gap float64) {
	t.Helper()
	net, err := sim.FromModel(m, p.Layout, p.NRanks, sim.RankPorts, sim.SharedNIC)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(context.Background(), p, Programs(a, p), net, sim.Config{Gamma: m.Gamma})
	if err != nil {
		t.Fatal(err)
	}
	c = a.(Coster).Cost(p, 4, m)
	return c, res.Time, (c - res.Time) / res.Time
}
