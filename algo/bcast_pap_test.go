package algo_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
)

func papBcast(t *testing.T) algo.DynamicAlgorithm {
	t.Helper()
	a := algo.LookupDynamic(sched.Bcast, "papbcast")
	if a == nil {
		t.Fatal("no dynamic bcast algorithm papbcast")
	}
	if _, ok := a.(algo.PatternAlgorithm); !ok {
		t.Fatal("papbcast gives the simulator no programs for arrival times (algo.PatternAlgorithm)")
	}
	return a
}

// TestPAPBcastTrace checks papbcast's schedule for orders of arrival
// (schedtest.Check: validity and the result in and out of place) on 1–9
// and 16 ranks, three roots, counts of no, one and several segments, and
// random orders (every order on 4 ranks).
func TestPAPBcastTrace(t *testing.T) {
	a := papBcast(t)
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16} {
		rng := rand.New(rand.NewPCG(uint64(n), 17))
		var orders [][]int
		if n == 4 {
			orders = permutations([]int{0, 1, 2, 3})
		} else {
			for range 6 {
				orders = append(orders, rng.Perm(n))
			}
		}
		for _, root := range slices.Compact([]int{0, n / 2, n - 1}) {
			for _, count := range []int{0, 1, 7, 1000, 100003} {
				if count == 100003 && n != 5 {
					continue
				}
				p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: count, Root: root}
				if count == 1000 {
					p.Segment = 64 // 16 segments
				}
				if err := a.Supports(p); err != nil {
					t.Fatal(err)
				}
				for _, order := range orders {
					if err := algo.CheckSched(t, p, algo.ArrivalPrograms(a, p, order)); err != nil {
						t.Fatalf("n=%d root=%d count=%d order %v: %v", n, root, count, order, err)
					}
				}
			}
		}
	}
}

// TestPAPBcastTraceGroups: Trace's groups for an order are the ranks
// before the root, in rank order, then each later rank alone.
func TestPAPBcastTraceGroups(t *testing.T) {
	p := sched.Params{Coll: sched.Bcast, NRanks: 5, Count: 10, Root: 2}
	for _, c := range []struct {
		order []int
		want  [][]int
	}{
		{[]int{4, 0, 2, 3, 1}, [][]int{{0, 4}, {3}, {1}}},
		{[]int{2, 1, 4, 0, 3}, [][]int{{1}, {4}, {0}, {3}}},
		{[]int{3, 1, 4, 0, 2}, [][]int{{0, 1, 3, 4}}},
	} {
		if g := algo.PAPBcastGroups(p, c.order); !reflect.DeepEqual(g, c.want) {
			t.Errorf("order %v: groups %v, want %v", c.order, g, c.want)
		}
	}
}

// TestPAPBcastRun runs papbcast's Run on goroutine ranks over a fake
// executor (messages that complete when their receiver takes them) with
// the ranks arriving late by random delays, the root among the first, the
// last or anywhere, and checks that every rank ends with the root's
// vector; that the root's words form groups that cover every other rank
// once, each in rank order and each member told its neighbours in its
// group's chain; and that every rank moved exactly the data (sends,
// receives and copies, chunk by chunk) of papbcast's program for those
// groups, the schedule the simulator runs.
func TestPAPBcastRun(t *testing.T) {
	a := papBcast(t)
	shapes := map[string]int{} // group counts and sizes seen, for the log
	for _, n := range []int{1, 2, 3, 4, 5, 8, 9} {
		rng := rand.New(rand.NewPCG(uint64(n), 23))
		for _, root := range slices.Compact([]int{0, n / 2, n - 1}) {
			for _, count := range []int{1, 7, 1000} {
				p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: count, Root: root}
				if count == 1000 {
					p.Segment = 64 // 16 segments, more than a window
				}
				for trial := range 4 {
					delay := make([]time.Duration, n)
					for r := range delay {
						delay[r] = time.Duration(rng.IntN(2000)) * time.Microsecond
					}
					switch trial {
					case 0: // the root last
						delay[root] = 4 * time.Millisecond
					case 1: // the root first, the others apart
						for r := range delay {
							delay[r] = time.Duration(mod(r-root, n)) * 2 * time.Millisecond
						}
					}
					what := fmt.Sprintf("n=%d root=%d count=%d delays %v", n, root, count, delay)
					shape, err := checkPAPBcastRun(a, p, delay)
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					shapes[shape]++
				}
			}
		}
	}
	t.Logf("groups seen (sizes: calls): %v", shapes)
}

func mod(i, n int) int { return ((i % n) + n) % n }

// checkPAPBcastRun runs papbcast once (see TestPAPBcastRun) and returns
// the sizes of the groups the root formed.
func checkPAPBcastRun(a algo.DynamicAlgorithm, p sched.Params, delay []time.Duration) (string, error) {
	n, root := p.NRanks, p.Root
	in := make([][]float64, n)
	in[root] = make([]float64, p.Count)
	for i := range in[root] {
		in[root][i] = float64(1000*root + i + 1)
	}
	xs, err := runFake(a, p, in, delay)
	if err != nil {
		return "", err
	}
	for r, x := range xs {
		if !slices.Equal(x.out, in[root]) {
			return "", fmt.Errorf("rank %d holds %v, want the root's %v", r, x.out, in[root])
		}
	}
	// The groups, from the root's words.
	var groups [][]int
	seen := make([]bool, n)
	for _, w := range xs[root].words {
		if w.tag != algo.PAPBcastLine {
			return "", fmt.Errorf("the root sent a word with tag %d", w.tag)
		}
		pred, _ := algo.PAPBcastPlace(w.v)
		if pred == root {
			groups = append(groups, nil)
		} else if len(groups) == 0 || pred != groups[len(groups)-1][len(groups[len(groups)-1])-1] {
			return "", fmt.Errorf("rank %d was told predecessor %d, not the one told before it (groups %v)", w.peer, pred, groups)
		}
		g := &groups[len(groups)-1]
		if len(*g) > 0 && (*g)[len(*g)-1] >= w.peer {
			return "", fmt.Errorf("group %v then rank %d: not in rank order", *g, w.peer)
		}
		*g = append(*g, w.peer)
		if w.peer == root || seen[w.peer] {
			return "", fmt.Errorf("rank %d served twice, or the root served itself (groups %v)", w.peer, groups)
		}
		seen[w.peer] = true
	}
	served := 0
	for _, g := range groups {
		served += len(g)
	}
	if served != n-1 {
		return "", fmt.Errorf("groups %v serve %d ranks, want %d", groups, served, n-1)
	}
	k := 0
	for _, g := range groups {
		for i := range g {
			_, succ := algo.PAPBcastPlace(xs[root].words[k].v)
			want := -1
			if i+1 < len(g) {
				want = g[i+1]
			}
			if succ != want {
				return "", fmt.Errorf("rank %d of group %v told successor %d, want %d", g[i], g, succ, want)
			}
			k++
		}
	}
	for r, x := range xs {
		want := algo.PAPBcastProgram(p, groups, r)
		if got, exp := stepSet(x.steps), stepSet(want.Steps); !slices.Equal(got, exp) {
			return "", fmt.Errorf("groups %v: rank %d moved\n%v\nwant (its program)\n%v", groups, r, got, exp)
		}
	}
	var sizes []int
	for _, g := range groups {
		sizes = append(sizes, len(g))
	}
	return fmt.Sprint(sizes), nil
}

// stepSet returns the steps without their dependencies, as sorted
// strings (a copy of no elements is no data movement, and is left out).
func stepSet(steps []sched.Step) []string {
	var s []string
	for _, st := range steps {
		if st.Kind == sched.KindCopy && st.Dst.Len == 0 {
			continue
		}
		st.Deps = nil
		s = append(s, st.String())
	}
	slices.Sort(s)
	return s
}
