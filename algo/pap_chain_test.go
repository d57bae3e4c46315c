package algo_test

import (
	"math/rand/v2"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
)

// TestPAPChainTrace validates the arrival-ordered chain's schedule
// (Trace) for every collective it runs, 1–9 and 16 ranks, several counts
// and roots, and random orders of arrival (every order for 4 ranks): the
// executor's dynamic run moves exactly this data for the order it learns.
func TestPAPChainTrace(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Reduce, sched.Allreduce} {
		a := algo.LookupDynamic(coll, "papchain")
		if a == nil {
			t.Fatalf("no dynamic %v algorithm papchain", coll)
		}
		for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16} {
			rng := rand.New(rand.NewPCG(uint64(n), uint64(coll)))
			var orders [][]int
			if n == 4 {
				orders = permutations([]int{0, 1, 2, 3})
			} else {
				for range 6 {
					orders = append(orders, rng.Perm(n))
				}
			}
			roots := []int{0}
			if coll == sched.Reduce {
				roots = []int{0, n - 1, n / 2}
			}
			for _, root := range roots {
				for _, count := range []int{0, 1, 7, 1000} {
					p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root}
					if err := a.Supports(p); err != nil {
						t.Fatal(err)
					}
					for _, order := range orders {
						if err := sched.Validate(p, algo.ArrivalPrograms(a, p, order)); err != nil {
							t.Fatalf("%v n=%d root=%d count=%d order %v: %v", coll, n, root, count, order, err)
						}
					}
				}
			}
		}
	}
}

func permutations(s []int) [][]int {
	if len(s) <= 1 {
		return [][]int{append([]int(nil), s...)}
	}
	var out [][]int
	for i := range s {
		rest := append(append([]int(nil), s[:i]...), s[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]int{s[i]}, p...))
		}
	}
	return out
}

// TestHierPAPTrace validates the hierarchical variant's schedule (Trace)
// over layouts of one host, of several hosts of uneven sizes (leader
// counts that are and are not powers of two), interleaved hosts, and a
// host per rank, for random orders of arrival.
func TestHierPAPTrace(t *testing.T) {
	a := algo.LookupDynamic(sched.Allreduce, "hierpap")
	if a == nil {
		t.Fatal("no dynamic allreduce algorithm hierpap")
	}
	layouts := map[string][]string{
		"one host":    {"a", "a", "a", "a", "a"},
		"uneven":      {"a", "b", "a", "a", "c", "a", "c", "b", "a"},
		"interleaved": {"a", "b", "a", "b", "a", "b", "a", "b"},
		"per rank":    {"a", "b", "c", "d", "e", "f", "g"},
		"3 hosts":     {"a", "a", "b", "b", "c", "c"},
	}
	for name, hosts := range layouts {
		n := len(hosts)
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		for _, count := range []int{0, 1, 7, 1000} {
			p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count, Layout: sched.NewLayout(hosts, nil)}
			if err := a.Supports(p); err != nil {
				t.Fatal(err)
			}
			for range 6 {
				order := rng.Perm(n)
				if err := sched.Validate(p, algo.ArrivalPrograms(a, p, order)); err != nil {
					t.Fatalf("%s count=%d order %v: %v", name, count, order, err)
				}
			}
		}
	}
	p := sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: 5}
	if err := sched.Validate(p, algo.ArrivalPrograms(a, p, []int{2, 0, 1})); err != nil {
		t.Fatalf("no layout: %v", err)
	}
}
