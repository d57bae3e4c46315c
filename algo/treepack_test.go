package algo_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
	"github.com/braid-ccl/braid/topo"
)

// randomTrees returns k random spanning trees over n ranks, each rooted
// at root (or, with root -1, at a random rank), with weights in [0.5, 3).
// Every rank after the root in a random order picks a random parent among
// those before it, so shapes range from chains to stars.
func randomTrees(rng *rand.Rand, n, k, root int) *sched.Trees {
	ts := &sched.Trees{}
	for range k {
		order := rng.Perm(n)
		r := root
		if r < 0 {
			r = order[0]
		}
		for i, v := range order {
			if v == r {
				order[0], order[i] = order[i], order[0]
			}
		}
		t := sched.Tree{Root: r, Parent: make([]int, n), Weight: 0.5 + 2.5*rng.Float64()}
		t.Parent[r] = -1
		for i := 1; i < n; i++ {
			t.Parent[order[i]] = order[rng.IntN(i)]
		}
		ts.Tree = append(ts.Tree, t)
	}
	return ts
}

// fromPlan converts a packing into sched.Trees, as the planner does.
func fromPlan(p *pack.Plan) *sched.Trees {
	ts := &sched.Trees{}
	for _, t := range p.Trees {
		ts.Tree = append(ts.Tree, sched.Tree{Root: t.Root, Parent: t.Parent, Weight: t.Weight})
	}
	return ts
}

var treepackColls = []sched.Collective{sched.Bcast, sched.Reduce, sched.Allreduce}

// TestTreepackRandom checks the tree-packing schedules with random trees on
// 1-9 ranks: valid, and right in place and not, with the same bits on
// every rank (schedtest.Check), for counts that split evenly and that do
// not, and segments from one element up.
func TestTreepackRandom(t *testing.T) {
	for _, coll := range treepackColls {
		a := algo.Treepack(coll)
		t.Run(coll.String(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(coll), 5))
			for n := 1; n <= 9; n++ {
				for _, k := range []int{1, 2, 4} {
					for _, count := range []int{0, 1, 7, 1000, 65537} {
						segs := []int{0, 3, 100}
						if count == 65537 {
							if n%3 != 0 || k == 2 {
								continue // large counts on a few shapes only
							}
							segs = []int{0, 4096}
						}
						for _, seg := range segs {
							root := 0
							if coll != sched.Allreduce {
								root = rng.IntN(n)
							}
							treeRoot := root
							if coll == sched.Allreduce {
								treeRoot = -1
							}
							p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root, Segment: seg,
								Trees: randomTrees(rng, n, k, treeRoot)}
							checkTreepack(t, a, p)
						}
					}
				}
			}
		})
	}
}

func checkTreepack(t *testing.T, a algo.Algorithm, p sched.Params) {
	t.Helper()
	if err := a.Supports(p); err != nil {
		t.Fatalf("%v on %d ranks: %v", p.Coll, p.NRanks, err)
	}
	if err := algo.CheckSched(t, p, algo.Programs(a, p)); err != nil {
		t.Fatalf("segment %d, trees\n%v: %v", p.Segment, p.Trees, err)
	}
}

// dgx1Allocations are allocations of Blink (MLSys 2020; Figure 1's GPU
// numbers): fully NVLinked groups, the 6-GPU case of Figure 4, the
// irregular 1,4,5,6 of §5.2.1 that no NVLink ring spans, 2,3,6,7 (one
// ring), and the whole machine.
var dgx1Allocations = [][]int{{0, 1, 4}, {0, 1, 2, 3}, {1, 4, 5, 6}, {2, 3, 6, 7}, {0, 1, 2, 4, 5}, {0, 1, 2, 3, 4, 6}, {0, 1, 2, 3, 4, 5, 6}, {0, 1, 2, 3, 4, 5, 6, 7}}

func devicesOf(tp *topo.Topology, gpus []int) []int {
	all := tp.GPUs()
	out := make([]int, len(gpus))
	for i, g := range gpus {
		out[i] = all[g]
	}
	return out
}

// packed returns the packing of coll over the NVLinks of an allocation:
// broadcast and reduce trees from root, allreduce trees at their centres.
func packed(t *testing.T, tp *topo.Topology, gpus []int, coll sched.Collective, root int) *pack.Plan {
	t.Helper()
	g, err := pack.FromTopology(tp, devicesOf(tp, gpus), pack.Select{Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		t.Fatal(err)
	}
	var p *pack.Plan
	if coll == sched.Allreduce {
		p, err = pack.AllReduce(g, -1, pack.Options{})
	} else {
		p, err = pack.Broadcast(g, root, pack.Options{})
	}
	if err != nil {
		t.Fatalf("%s GPUs %v: %v", tp.Name, gpus, err)
	}
	return p
}

// TestTreepackDGX1 checks the schedules of Blink's packings on DGX-1
// allocations (Blink, MLSys 2020, §5.2) for every count of the matrix.
func TestTreepackDGX1(t *testing.T) {
	for _, tp := range []*topo.Topology{topo.DGX1P100(), topo.DGX1V100()} {
		for _, coll := range treepackColls {
			a := algo.Treepack(coll)
			t.Run(tp.Name+"/"+coll.String(), func(t *testing.T) {
				t.Parallel()
				for _, gpus := range dgx1Allocations {
					n := len(gpus)
					roots := []int{0}
					if coll != sched.Allreduce {
						roots = []int{0, n - 1}
					}
					for _, root := range roots {
						trees := fromPlan(packed(t, tp, gpus, coll, root))
						for _, count := range []int{0, 1, 7, 1000, 65537} {
							for _, seg := range []int{0, 997} {
								if seg != 0 && count < 1000 {
									continue
								}
								checkTreepack(t, a, sched.Params{Coll: coll, NRanks: n, Count: count, Root: root, Segment: seg, Trees: trees})
							}
						}
					}
				}
			})
		}
	}
}

// TestTreepackSupports checks the errors for missing and bad trees.
func TestTreepackSupports(t *testing.T) {
	chain := &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: []int{-1, 0, 1}, Weight: 1}}}
	for _, tc := range []struct {
		coll  sched.Collective
		trees *sched.Trees
		root  int
		want  string // "" for no error
	}{
		{sched.Bcast, nil, 0, "needs Params.Trees"},
		{sched.Allreduce, &sched.Trees{}, 0, "no trees"},
		{sched.Bcast, chain, 0, ""},
		{sched.Bcast, chain, 1, "rooted at rank 0, not at the root 1"},
		{sched.Reduce, chain, 2, "not at the root 2"},
		{sched.Allreduce, chain, 0, ""},
		{sched.Allreduce, &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: []int{-1, 2, 1}, Weight: 1}}}, 0, "cycle"},
		{sched.Allreduce, &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: []int{-1, 0}, Weight: 1}}}, 0, "2 parents for 3 ranks"},
		{sched.Allreduce, &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: []int{-1, 0, 0}, Weight: 0}}}, 0, "weight 0"},
		{sched.Allreduce, &sched.Trees{Tree: []sched.Tree{{Root: 1, Parent: []int{-1, 0, 0}, Weight: 1}}}, 0, "root 1 has parent 0"},
		{sched.Allreduce, &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: []int{-1, 3, 0}, Weight: 1}}}, 0, "rank 1 has parent 3"},
	} {
		p := sched.Params{Coll: tc.coll, NRanks: 3, Count: 10, Root: tc.root, Trees: tc.trees}
		err := algo.Treepack(tc.coll).Supports(p)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v root %d trees %v: %v", tc.coll, tc.root, tc.trees, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v root %d trees %v: error %v, want one with %q", tc.coll, tc.root, tc.trees, err, tc.want)
		}
	}
	if algo.Treepack(sched.Allgather) != nil {
		t.Error("Treepack(Allgather) is not nil")
	}
	for _, coll := range treepackColls {
		if a, err := algo.Lookup(coll, "treepack"); err != nil || a != algo.Treepack(coll) {
			t.Errorf("Lookup(%v, treepack) = %v, %v; want the registered Treepack(%v)", coll, a, err, coll)
		}
	}
}

// TestTreepackChannels checks the channels of the trees' links: trees of
// equal weights each get their own channel on a link they share; where
// the weights differ, trees that cross a link at the same depth share its
// channel (stream reuse, Blink, MLSys 2020, §4.2.2, Figure 13), while a
// tree that crosses it at another depth gets its own; relayed edges go on
// channels from sched.RelayedChannel up.
func TestTreepackChannels(t *testing.T) {
	shape := func(w1 float64, relayed []bool) *sched.Trees {
		return &sched.Trees{Tree: []sched.Tree{
			{Root: 0, Parent: []int{-1, 0, 1, 2}, Weight: 1},                   // 0→1→2→3
			{Root: 0, Parent: []int{-1, 0, 1, 1}, Weight: w1},                  // 0→1, 1→2, 1→3
			{Root: 0, Parent: []int{-1, 2, 0, 1}, Weight: 1, Relayed: relayed}, // 0→2→1→3
		}}
	}
	for _, tc := range []struct {
		name  string
		trees *sched.Trees
		want  map[string]int
	}{
		{"equal", shape(1, nil), map[string]int{"0->1": 2, "1->2": 2, "1->3": 2, "2->1": 1, "0->2": 1, "2->3": 1}},
		{"unequal", shape(2, nil), map[string]int{"0->1": 1, "1->2": 1, "1->3": 2, "2->1": 1, "0->2": 1, "2->3": 1}},
		// Tree 2's edge 1→3 relayed: it no longer shares 1→3's direct
		// channel with tree 1, and takes a relayed one.
		{"relayed", shape(2, []bool{false, false, false, true}), map[string]int{"0->1": 1, "1->2": 1, "1->3": 2, "2->1": 1, "0->2": 1, "2->3": 1}},
	} {
		p := sched.Params{Coll: sched.Bcast, NRanks: 4, Count: 300, Trees: tc.trees}
		channels := map[string]map[uint8]bool{}
		for _, prog := range algo.Programs(algo.TreepackBcast, p) {
			for _, s := range prog.Steps {
				if s.Kind == sched.KindSend {
					k := fmt.Sprintf("%d->%d", prog.Rank, s.Peer)
					if channels[k] == nil {
						channels[k] = map[uint8]bool{}
					}
					channels[k][s.Channel] = true
					relayed := prog.Rank == 1 && s.Peer == 3 && tc.trees.Tree[2].IsRelayed(3) && s.Tag%3 == 2
					if relayed != (s.Channel >= sched.RelayedChannel) {
						t.Errorf("%s: send %d->%d tag %d on channel %d, relayed %v", tc.name, prog.Rank, s.Peer, s.Tag, s.Channel, relayed)
					}
				}
			}
		}
		for link, want := range tc.want {
			if got := len(channels[link]); got != want {
				t.Errorf("%s: link %s uses %d channels %v, want %d", tc.name, link, got, channels[link], want)
			}
		}
	}
}

// TestTreepackCostChain checks Cost on one chain, a pipelined chain
// broadcast: T = (s + n − 2)(α + C/β), the chain's closed form (eq. 5 of
// Xin, Xie and Li, Computer Systems & Applications 2020), for segments that
// divide the count.
func TestTreepackCostChain(t *testing.T) {
	for _, m := range models {
		l := m.Links[cost.Intra]
		for n := 2; n <= 8; n++ {
			parent := make([]int, n)
			for v := range parent {
				parent[v] = v - 1
			}
			trees := &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: parent, Weight: 3}}}
			const count, seg = 1 << 16, 1 << 12
			p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: count, Segment: seg, Trees: trees}
			want := float64(count/seg+n-2) * (l.Alpha + 4*seg/l.Beta)
			if got := algo.TreepackBcast.(algo.Coster).Cost(p, 4, m); !near(got, want) {
				t.Errorf("n=%d: Cost %g, want %g", n, got, want)
			}
		}
	}
}

// TestTreepackCostSim compares Cost with the simulator on the one-port
// network the model assumes (sim.RankPorts) for random trees, at the
// segment Tune picks. Cost takes additions to overlap the next round's
// transfers; the simulated executor holds its issue while it adds, which
// costs up to a fifth more where γ is close to 1/β, hence the margin.
func TestTreepackCostSim(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	m := models[0]
	for _, coll := range treepackColls {
		for _, n := range []int{3, 5, 8} {
			root := -1
			if coll != sched.Allreduce {
				root = 0
			}
			p := sched.Params{Coll: coll, NRanks: n, Count: 1 << 20, Trees: randomTrees(rng, n, 3, root)}
			a := algo.Treepack(coll)
			p = a.(algo.Tuner).Tune(p, 4, m)
			want := a.(algo.Coster).Cost(p, 4, m)
			net, err := sim.FromModel(m, nil, n, sim.RankPorts)
			if err != nil {
				t.Fatal(err)
			}
			res, err := sim.Run(context.Background(), p, algo.Programs(a, p), net, sim.Config{Gamma: m.Gamma})
			if err != nil {
				t.Fatal(err)
			}
			if r := res.Time / want; r < 0.85 || r > 1.25 {
				t.Errorf("%v n=%d segment %d: simulated %.1f µs, Cost %.1f µs (ratio %.3f)\n%v", coll, n, p.Segment, res.Time*1e6, want*1e6, r, p.Trees)
			}
		}
	}
}

// TestTreepackTune checks that Tune's segment is no worse under Cost than
// its neighbours and the default.
func TestTreepackTune(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, m := range models {
		for _, count := range []int{1, 1000, 1 << 20} {
			p := sched.Params{Coll: sched.Allreduce, NRanks: 6, Count: count, Trees: randomTrees(rng, 6, 3, -1)}
			a := algo.TreepackAllreduce
			q := a.(algo.Tuner).Tune(p, 4, m)
			if q.Segment < 1 || a.Supports(q) != nil {
				t.Fatalf("Tune gave segment %d", q.Segment)
			}
			best := a.(algo.Coster).Cost(q, 4, m)
			for _, seg := range []int{q.Segment - 1, q.Segment + 1, 2 * q.Segment, 0} {
				if seg < 0 {
					continue
				}
				r := p
				r.Segment = seg
				if c := a.(algo.Coster).Cost(r, 4, m); c < best*(1-1e-9) {
					t.Errorf("count %d: segment %d costs %g, below Tune's %d at %g", count, seg, c, q.Segment, best)
				}
			}
		}
	}
}

// TestTreepackRate runs Blink's packings on the simulated DGX-1 (links of
// the topology, sim.FromTopology) and checks the schedules against two
// bounds: no faster than the packing's rate allows (M/rate: the packing is
// optimal), and no slower than 10 % over the trees run as independent
// pipelines (pipeModel), which adds the pipeline's fill and a latency per
// piece to M/rate.
func TestTreepackRate(t *testing.T) {
	if testing.Short() {
		t.Skip("large simulations")
	}
	const count = 64 << 20 // float32: 256 MiB
	for _, tc := range []struct {
		tp   *topo.Topology
		gpus []int
	}{
		{topo.DGX1V100(), []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{topo.DGX1V100(), []int{1, 4, 5, 6}},
		{topo.DGX1P100(), []int{0, 1, 2, 3, 4, 6}},
	} {
		for _, coll := range []sched.Collective{sched.Bcast, sched.Allreduce} {
			plan := packed(t, tc.tp, tc.gpus, coll, 0)
			p := sched.Params{Coll: coll, NRanks: len(tc.gpus), Count: count, Segment: 256 << 10, Trees: fromPlan(plan)}
			a := algo.Treepack(coll)
			net, err := sim.FromTopology(tc.tp, devicesOf(tc.tp, tc.gpus))
			if err != nil {
				t.Fatal(err)
			}
			res, err := sim.Run(context.Background(), p, algo.Programs(a, p), net, sim.Config{})
			if err != nil {
				t.Fatal(err)
			}
			ideal := 4 * count / (plan.Rate * 1e9)
			model := pipeModel(p, 1e-6) // NVLink: 1 µs a hop
			if res.Time < ideal || res.Time > 1.1*model {
				t.Errorf("%s GPUs %v %v: %d trees of rate %.4g GB/s: %.3f ms simulated; %.3f ms at the rate, %.3f ms as pipelines",
					tc.tp.Name, tc.gpus, coll, len(plan.Trees), plan.Rate, res.Time*1e3, ideal*1e3, model*1e3)
			}
		}
	}
}

// TestTreepackNoTreesCost checks Cost without trees: +Inf, never a figure
// that could make a planner choose it.
func TestTreepackNoTreesCost(t *testing.T) {
	p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 100}
	if c := algo.TreepackAllreduce.(algo.Coster).Cost(p, 4, models[0]); !math.IsInf(c, 1) {
		t.Errorf("Cost without trees = %g", c)
	}
}

// pipeModel is the time of p's trees run as independent pipelines, tree i
// at rate w_i GB/s, with latency alpha per piece: the slowest of
// (s + D_i − 1)(α + c_i/w_i), D_i the hops a piece takes (twice the
// tree's height for allreduce), s the pieces per tree, c_i their bytes.
func pipeModel(p sched.Params, alpha float64) float64 {
	ranges := p.Trees.Split(p.Count)
	maxLen := 0
	for _, r := range ranges {
		maxLen = max(maxLen, r[1]-r[0])
	}
	seg := p.Segment
	s := (maxLen + seg - 1) / seg
	worst := 0.0
	for i, tr := range p.Trees.Tree {
		d := tr.Height()
		if p.Coll == sched.Allreduce {
			d *= 2
		}
		c := 4 * float64((ranges[i][1]-ranges[i][0]+s-1)/s)
		worst = max(worst, float64(s+d-1)*(alpha+c/(tr.Weight*1e9)))
	}
	return worst
}
