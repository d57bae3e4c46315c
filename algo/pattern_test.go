package algo_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
)

// msgModel is a MsgTime of two tiers: ranks r and q share a node if
// r/per == q/per; α 2 µs and 100 GB/s within a node, 5 µs and 12.5 GB/s
// between nodes, 4-byte elements.
func msgModel(per int) algo.MsgTime {
	return func(a, b, count int) float64 {
		if a/per == b/per {
			return 2e-6 + float64(4*count)/100e9
		}
		return 5e-6 + float64(4*count)/12.5e9
	}
}

// bandwidthModel is a MsgTime without latency (12.5 GB/s, 4-byte
// elements), where the pre-reduced ring keeps a ring for any count.
func bandwidthModel(a, b, count int) float64 { return float64(4*count) / 12.5e9 }

// arrivalPatterns returns arrival patterns for n ranks: balanced, one late
// rank, reversed, ties, and random spreads from tight to wide (in units
// of about one message), so that every number of groups and pre-steps
// occurs.
func arrivalPatterns(rng *rand.Rand, n int) [][]float64 {
	ps := [][]float64{make([]float64, n)}
	late := make([]float64, n)
	late[n/2] = 1e-3
	rev := make([]float64, n)
	ties := make([]float64, n)
	for r := range n {
		rev[r] = float64(n-r) * 1e-5
		ties[r] = float64(r%3) * 2e-5
	}
	ps = append(ps, late, rev, ties)
	for _, spread := range []float64{1e-6, 1e-5, 1e-4, 1e-3, 1e-2} {
		p := make([]float64, n)
		for r := range p {
			p[r] = rng.Float64() * spread
		}
		ps = append(ps, p)
	}
	return ps
}

// TestPatternAlgorithms checks the schedule of every pattern algorithm
// (schedtest.Check: validity, the results in and out of place, the same
// bits on every rank) on 1–9 and 16 ranks, several counts and roots, for
// arrival patterns that make them choose differently, with three models of
// the machine (two latency-bound ones, where the pre-reduced ring
// pre-reduces most ranks, and one without latency, where it keeps more of
// the ring).
func TestPatternAlgorithms(t *testing.T) {
	var all []algo.PatternAlgorithm
	for _, c := range sched.Collectives() {
		all = append(all, algo.Patterns(c)...)
		// Dynamic algorithms that give the simulator programs for
		// arrival times (papbcast).
		for _, d := range algo.Dynamics(c) {
			if pa, ok := d.(algo.PatternAlgorithm); ok {
				all = append(all, pa)
			}
		}
	}
	if len(all) < 3 {
		t.Fatalf("pattern algorithms: %d, want prr, papbcast and papscatter", len(all))
	}
	for _, a := range all {
		t.Run(a.Collective().String()+"/"+a.Name(), func(t *testing.T) {
			t.Parallel()
			for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16} {
				rng := rand.New(rand.NewPCG(uint64(n), 11))
				roots := []int{0}
				if a.Collective().Rooted() {
					roots = slices.Compact([]int{0, n / 2, n - 1})
				}
				for _, root := range roots {
					for _, count := range []int{0, 1, 7, 1000, 100003} {
						if count == 100003 && n != 5 {
							continue
						}
						p := sched.Params{Coll: a.Collective(), NRanks: n, Count: count, Root: root}
						if _, ok := a.(algo.Tuner); ok && count == 1000 {
							p.Segment = 64 // several segments
						}
						if err := a.Supports(p); err != nil {
							t.Fatal(err)
						}
						for mi, msg := range []algo.MsgTime{msgModel(1), msgModel(4), bandwidthModel} {
							for k, est := range arrivalPatterns(rng, n) {
								what := fmt.Sprintf("n=%d root=%d count=%d model %d pattern %d %v", n, root, count, mi, k, est)
								if err := algo.CheckSched(t, p, a.PatternPrograms(p, est, msg)); err != nil {
									t.Fatalf("%s: %v", what, err)
								}
							}
						}
					}
				}
			}
		})
	}
}

// TestPatternRegistry: the pattern algorithms' names are their own, and
// none is a schedule's or a dynamic algorithm's.
func TestPatternRegistry(t *testing.T) {
	want := map[sched.Collective][]string{sched.Allreduce: {"prr"}, sched.Bcast: {"papscatter"}}
	for _, c := range sched.Collectives() {
		var names []string
		for _, a := range algo.Patterns(c) {
			names = append(names, a.Name())
			if algo.LookupPattern(c, a.Name()) != a {
				t.Errorf("LookupPattern(%v, %q) did not return it", c, a.Name())
			}
			if _, err := algo.Lookup(c, a.Name()); err == nil || algo.LookupDynamic(c, a.Name()) != nil {
				t.Errorf("%v pattern algorithm %q has another algorithm's name", c, a.Name())
			}
		}
		if !slices.Equal(names, want[c]) {
			t.Errorf("%v pattern algorithms %v, want %v", c, names, want[c])
		}
	}
	if algo.LookupPattern(sched.Allreduce, "ring") != nil {
		t.Error("LookupPattern found a schedule")
	}
}

// TestPRRSteps checks the pre-reduced ring's choice of pre-steps against
// the predicted ends worked out by hand for 8 ranks on separate nodes
// (5 µs and 12.5 GB/s a message): a balanced call of one element is
// latency-bound and pre-reduces all the way (the chain's 7 hops and a
// broadcast of depth 3, 50 µs, against the ring's 14 steps, 70 µs); a
// balanced call of 100 Mi elements keeps the ring (2·7 steps of 1/8 of
// the vector, 56 ms, against 118 ms with one pre-step); with one rank 1 ms
// late, the early ranks have time to pre-reduce the small vector.
func TestPRRSteps(t *testing.T) {
	msg := msgModel(1)
	p := sched.Params{Coll: sched.Allreduce, NRanks: 8, Count: 1}
	if k := algo.PRRSteps(p, make([]float64, 8), msg); k != 7 {
		t.Errorf("balanced, 1 element: %d pre-steps, want 7", k)
	}
	p.Count = 100 << 20
	if k := algo.PRRSteps(p, make([]float64, 8), msg); k != 0 {
		t.Errorf("balanced, 100 Mi elements: %d pre-steps, want 0", k)
	}
	late := make([]float64, 8)
	late[3] = 1e-3
	p.Count = 1
	if k := algo.PRRSteps(p, late, msg); k != 7 {
		t.Errorf("rank 3 late, 1 element: %d pre-steps, want 7", k)
	}
	// 1 Mi elements (4 MiB, 340 µs a whole message), rank 3 late by 1
	// ms: pre-steps would save ring steps, but the broadcast back costs a
	// whole message per level: the plain ring ends at 1000 + 14 × 47 =
	// 1657 µs, one pre-step at 1000 + 12 × 53 + 340 = 1976 µs.
	p.Count = 1 << 20
	if k := algo.PRRSteps(p, late, msg); k != 0 {
		t.Errorf("rank 3 late, 1 Mi elements: %d pre-steps, want 0", k)
	}
}

// TestArrivalGroups checks the groups of the arrival-aware broadcasts:
// balanced, the root serves everyone at once; with ranks arriving one by
// one far apart, one at a time in order of arrival; the scatter variant
// keeps the root busy longer per group, so later ranks gather into larger
// groups.
func TestArrivalGroups(t *testing.T) {
	msg := msgModel(1)
	p := sched.Params{Coll: sched.Bcast, NRanks: 5, Count: 1 << 10, Root: 2}
	for _, name := range []string{"papbcast", "papscatter"} {
		if g := algo.ArrivalGroups(name, p, make([]float64, 5), msg); !reflect.DeepEqual(g, [][]int{{0, 1, 3, 4}}) {
			t.Errorf("%s balanced: groups %v, want one of every rank but the root", name, g)
		}
		spread := []float64{4e-3, 1e-3, 0, 3e-3, 2e-3}
		if g := algo.ArrivalGroups(name, p, spread, msg); !reflect.DeepEqual(g, [][]int{{1}, {4}, {3}, {0}}) {
			t.Errorf("%s one by one: groups %v, want [[1] [4] [3] [0]]", name, g)
		}
	}
	// Ranks 0, 1 and 3 arrive with the root, 4 and 5 at 2 and 7 µs (their
	// notices reach the root 5 µs later). The chain's root is free after
	// one whole message (5.33 µs), then serves 4 alone (free at 12.66 µs)
	// and then 5; the scatter's is free after three thirds (15.33 µs),
	// when both have arrived.
	p.NRanks = 6
	est := []float64{0, 0, 0, 0, 2e-6, 7e-6}
	if g := algo.ArrivalGroups("papbcast", p, est, msg); !reflect.DeepEqual(g, [][]int{{0, 1, 3}, {4}, {5}}) {
		t.Errorf("papbcast: groups %v, want [[0 1 3] [4] [5]]", g)
	}
	if g := algo.ArrivalGroups("papscatter", p, est, msg); !reflect.DeepEqual(g, [][]int{{0, 1, 3}, {4, 5}}) {
		t.Errorf("papscatter: groups %v, want [[0 1 3] [4 5]]", g)
	}
}
