package algo_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
	"github.com/braid-ccl/braid/topo"
)

// TestTreepackOnLinksUnitZero checks that TreepackOnLinks without a unit
// is Cost, and with a Segment of 0 Tune's segment.
func TestTreepackOnLinksUnitZero(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, m := range models {
		for _, coll := range treepackColls {
			root := -1
			if coll != sched.Allreduce {
				root = 0
			}
			p := sched.Params{Coll: coll, NRanks: 5, Count: 1 << 18, Trees: randomTrees(rng, 5, 3, root)}
			a := algo.Treepack(coll)
			q, c := algo.TreepackOnLinks(p, 4, m, 0)
			want := a.(algo.Tuner).Tune(p, 4, m)
			if q.Segment != want.Segment {
				t.Errorf("%v: segment %d, Tune's %d", coll, q.Segment, want.Segment)
			}
			if w := a.(algo.Coster).Cost(q, 4, m); !near(c, w) {
				t.Errorf("%v: %g, Cost %g", coll, c, w)
			}
		}
	}
	if _, c := algo.TreepackOnLinks(sched.Params{Coll: sched.Bcast, NRanks: 3, Count: 9}, 4, models[0], 1e9); !math.IsInf(c, 1) {
		t.Errorf("without trees: %g, want +Inf", c)
	}
}

// TestTreepackOnLinksChain checks the links' bound on one chain of weight
// w GB/s whose ranks' ports are ten times faster: the chain's closed form
// (s + n − 2)(α + C/(w·10⁹)), the link's rate and not the port's.
func TestTreepackOnLinksChain(t *testing.T) {
	const w, count, seg = 25.0, 1 << 20, 1 << 14
	m := flatModel(cost.Link{Alpha: 25e-6, Beta: 10 * w * 1e9}, 0)
	for n := 2; n <= 8; n++ {
		parent := make([]int, n)
		for v := range parent {
			parent[v] = v - 1
		}
		p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: count, Segment: seg, Trees: &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: parent, Weight: w}}}}
		want := float64(count/seg+n-2) * (25e-6 + 4*seg/(w*1e9))
		if _, got := algo.TreepackOnLinks(p, 4, m, 1e9); !near(got, want) {
			t.Errorf("n=%d: %g, want %g", n, got, want)
		}
		if got := algo.TreepackBcast.(algo.Coster).Cost(p, 4, m); got >= want {
			t.Errorf("n=%d: Cost %g with the ports alone is not below the links' %g", n, got, want)
		}
	}
}

// TestTreepackOnLinksSim compares TreepackOnLinks with the simulator on
// DGX-1 allocations (sim.FromTopology: the topology's links, NVLink's
// 1 µs a hop), for Blink's NVLink packings, the ranks' ports taken as
// fast as a GPU's copy engines and the segment TreepackOnLinks picks:
// within 20 % of the simulation.
func TestTreepackOnLinksSim(t *testing.T) {
	m := flatModel(cost.Link{Alpha: 1e-6, Beta: 300e9}, 0)
	for _, tc := range []struct {
		tp   *topo.Topology
		gpus []int
	}{
		{topo.DGX1V100(), []int{0, 1, 4}},
		{topo.DGX1V100(), []int{1, 4, 5, 6}},
		{topo.DGX1P100(), []int{0, 1, 2, 3, 4, 6}},
	} {
		for _, coll := range []sched.Collective{sched.Bcast, sched.Allreduce} {
			plan := packed(t, tc.tp, tc.gpus, coll, 0)
			p := sched.Params{Coll: coll, NRanks: len(tc.gpus), Count: 4 << 20, Trees: fromPlan(plan)}
			p, want := algo.TreepackOnLinks(p, 4, m, 1e9)
			a := algo.Treepack(coll)
			net, err := sim.FromTopology(tc.tp, devicesOf(tc.tp, tc.gpus))
			if err != nil {
				t.Fatal(err)
			}
			res, err := sim.Run(context.Background(), p, algo.Programs(a, p), net, sim.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %v %v: seg %d sim %.1f model %.1f", tc.tp.Name, tc.gpus, coll, p.Segment, res.Time*1e6, want*1e6)
			if r := res.Time / want; r < 0.8 || r > 1.2 {
				t.Errorf("%s GPUs %v %v, %d trees, segment %d: simulated %.1f µs, TreepackOnLinks %.1f µs (ratio %.3f)",
					tc.tp.Name, tc.gpus, coll, len(p.Trees.Tree), p.Segment, res.Time*1e6, want*1e6, r)
			}
		}
	}
}
