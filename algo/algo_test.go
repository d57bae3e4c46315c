package algo_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
)

// params returns the calls to test a on: n ranks, the given counts, and for
// rooted collectives roots 0, n/2 and n−1. Algorithms that need trees
// (treepack) get random ones (withTrees).
func params(a algo.Algorithm, n int, counts ...int) []sched.Params {
	c := a.Collective()
	if c == sched.Barrier {
		counts = []int{0}
	}
	roots := []int{0}
	if c.Rooted() {
		roots = slices.Compact([]int{0, n / 2, n - 1})
	}
	var ps []sched.Params
	for _, count := range slices.Compact(counts) {
		for _, root := range roots {
			ps = append(ps, withTrees(a, sched.Params{Coll: c, NRanks: n, Count: count, Root: root}))
		}
	}
	return ps
}

// withTrees returns p with random spanning trees in p.Trees if a rejects p
// without trees but accepts it with them (the tree-packing algorithms),
// else p unchanged. The trees are two, rooted at p.Root (for allreduce at
// random ranks), with random shapes and weights; the same p always gets
// the same trees.
func withTrees(a algo.Algorithm, p sched.Params) sched.Params {
	if p.Trees != nil || p.NRanks < 1 || p.Root < 0 || p.Root >= p.NRanks || a.Supports(p) == nil {
		return p
	}
	root := p.Root
	if p.Coll == sched.Allreduce {
		root = -1
	}
	rng := rand.New(rand.NewPCG(uint64(p.NRanks)<<32|uint64(p.Root), uint64(p.Count)))
	q := p
	q.Trees = randomTrees(rng, p.NRanks, 2, root)
	if a.Supports(q) != nil {
		return p
	}
	return q
}

func check(t *testing.T, a algo.Algorithm, p sched.Params) {
	t.Helper()
	if err := a.Supports(p); err != nil {
		t.Errorf("%+v: %v", p, err)
		return
	}
	if err := algo.CheckSched(t, p, algo.Programs(a, p)); err != nil {
		t.Errorf("%s: %v", a.Name(), err)
	}
}

// TestAlgorithms checks every algorithm on 1–9 ranks with counts that
// divide evenly and that do not, in place and not.
func TestAlgorithms(t *testing.T) {
	for _, a := range algo.All() {
		t.Run(a.Collective().String()+"/"+a.Name(), func(t *testing.T) {
			t.Parallel()
			for n := 1; n <= 9; n++ {
				for _, p := range params(a, n, 0, 1, 7, 1000) {
					check(t, a, p)
				}
			}
			for _, n := range []int{3, 4} {
				for _, p := range params(a, n, 65537) {
					if p.Root == n/2 {
						check(t, a, p)
					}
				}
			}
		})
	}
}

// TestLarge runs two allreduces of 2^20+3 elements. Under the race
// detector it validates them (sched.Validate) without running them: the
// interpreter alone took 17 s of CPU there (TestHierpipeStage2 still runs
// an allreduce of 2^20 under it); scripts/test.sh runs the package again
// without the race detector, where this test runs both.
func TestLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large counts take a while in the interpreter")
	}
	t.Parallel()
	for _, tc := range []struct {
		name string
		n    int
	}{{"ring", 3}, {"rabenseifner", 6}} {
		a, err := algo.Lookup(sched.Allreduce, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := sched.Params{Coll: sched.Allreduce, NRanks: tc.n, Count: 1<<20 + 3}
			if raceEnabled {
				if err := a.Supports(p); err != nil {
					t.Fatalf("%+v: %v", p, err)
				}
				if err := sched.Validate(p, algo.Programs(a, p)); err != nil {
					t.Errorf("%s: %v", a.Name(), err)
				}
				return
			}
			check(t, a, p)
		})
	}
}

func TestRegistry(t *testing.T) {
	want := map[sched.Collective][]string{
		sched.Allreduce:     {"direct", "hier", "hierpipe", "rabenseifner", "recdouble", "reducebcast", "ring", "segring", "treepack", "twostep"},
		sched.Reduce:        {"binomial", "knomial", "linear", "treepack"},
		sched.Bcast:         {"binomial", "chain", "hier", "knomial", "linear", "scatterallgather", "topochain", "treepack"},
		sched.Allgather:     {"bruck", "direct", "recdouble", "ring", "segring"},
		sched.ReduceScatter: {"direct", "ring", "segring"},
		sched.Gather:        {"linear"},
		sched.Scatter:       {"linear"},
		sched.Alltoall:      {"pairwise"},
		sched.Barrier:       {"dissemination"},
	}
	total := 0
	for _, c := range sched.Collectives() {
		var names []string
		for _, a := range algo.ForCollective(c) {
			if a.Collective() != c {
				t.Errorf("ForCollective(%v) returned %s of %v", c, a.Name(), a.Collective())
			}
			names = append(names, a.Name())
			b, err := algo.Lookup(c, a.Name())
			if err != nil || b != a {
				t.Errorf("Lookup(%v, %q) = %v, %v", c, a.Name(), b, err)
			}
		}
		if !slices.Equal(names, want[c]) {
			t.Errorf("%v algorithms: %v, want %v", c, names, want[c])
		}
		total += len(names)
	}
	if got := len(algo.All()); got != total {
		t.Errorf("All returned %d algorithms, ForCollective %d", got, total)
	}
	_, err := algo.Lookup(sched.Allreduce, "nope")
	if err == nil || !strings.Contains(err.Error(), `no allreduce algorithm named "nope" (have direct, hier, hierpipe, rabenseifner, recdouble, reducebcast, ring, segring, treepack, twostep)`) {
		t.Errorf("Lookup of an unknown name: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a name twice did not panic")
		}
	}()
	a, _ := algo.Lookup(sched.Allreduce, "ring")
	algo.Register(a)
}

func TestSupports(t *testing.T) {
	for _, a := range algo.All() {
		other := sched.Allreduce
		if a.Collective() == sched.Allreduce {
			other = sched.Bcast
		}
		for _, p := range []sched.Params{
			{Coll: other, NRanks: 2, Count: 1},
			{Coll: a.Collective(), NRanks: 0},
			{Coll: a.Collective(), NRanks: 2, Count: -1},
		} {
			if err := a.Supports(p); err == nil {
				t.Errorf("%v %s supports %+v", a.Collective(), a.Name(), p)
			}
		}
	}
}

// TestDeterministic checks that generating a program twice gives the same
// program, and that ranks get programs of their own rank.
func TestDeterministic(t *testing.T) {
	for _, a := range algo.All() {
		p := params(a, 7, 100)[0]
		for r := range p.NRanks {
			x, y := a.Program(p, r), a.Program(p, r)
			if !reflect.DeepEqual(x, y) {
				t.Errorf("%v %s rank %d: two calls gave different programs", a.Collective(), a.Name(), r)
			}
			if x.Rank != r {
				t.Errorf("%v %s: rank %d's program says rank %d", a.Collective(), a.Name(), r, x.Rank)
			}
		}
	}
}

// TestBarrierRounds checks that the dissemination barrier sends ⌈log2 n⌉
// empty messages per rank.
func TestBarrierRounds(t *testing.T) {
	a, _ := algo.Lookup(sched.Barrier, "dissemination")
	for n, rounds := range []int{0, 0, 1, 2, 2, 3, 3, 3, 3, 4} {
		if n == 0 {
			continue
		}
		prog := a.Program(sched.Params{Coll: sched.Barrier, NRanks: n}, n-1)
		sends := 0
		for _, s := range prog.Steps {
			if s.Kind == sched.KindSend {
				sends++
				if s.Len() != 0 {
					t.Errorf("n=%d: %v is not empty", n, s)
				}
			}
		}
		if sends != rounds {
			t.Errorf("n=%d: %d sends, want %d", n, sends, rounds)
		}
	}
}

// TestDepsNeeded checks that programs name no more dependencies than their
// memory accesses need (so the executor can overlap everything else): taking
// any one dependency away makes sched.ValidateProgram report a hazard. The
// barrier's dependencies order messages, not memory, and are not checked.
func TestDepsNeeded(t *testing.T) {
	for _, a := range algo.All() {
		if a.Collective() == sched.Barrier {
			continue
		}
		for _, n := range []int{3, 4, 5, 8} {
			for _, p := range params(a, n, 64) {
				for r := range p.NRanks {
					prog := a.Program(p, r)
					for i := range prog.Steps {
						deps := prog.Steps[i].Deps
						for j := range deps {
							prog.Steps[i].Deps = slices.Delete(slices.Clone(deps), j, j+1)
							if sched.ValidateProgram(p, prog) == nil {
								t.Errorf("%v %s, %d ranks, rank %d step %d (%v): dependency on step %d is not needed",
									a.Collective(), a.Name(), n, r, i, prog.Steps[i], deps[j])
							}
						}
						prog.Steps[i].Deps = deps
					}
				}
			}
		}
	}
}

func ExampleLookup() {
	a, err := algo.Lookup(sched.Allreduce, "ring")
	if err != nil {
		panic(err)
	}
	p := sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: 6}
	if err := a.Supports(p); err != nil {
		panic(err)
	}
	prog := a.Program(p, 0)
	fmt.Print(prog.String())
	fmt.Println(sched.Validate(p, algo.Programs(a, p)))
	// Output:
	// rank 0 (tmp 0):
	//     0 send in[0:2] -> r1 tag 0
	//     1 copy in[4:6] -> out[4:6]
	//     2 recvreduce r2 tag 0 -> out[4:6] after [1]
	//     3 send out[4:6] -> r1 tag 1 after [2]
	//     4 copy in[2:4] -> out[2:4]
	//     5 recvreduce r2 tag 1 -> out[2:4] after [4]
	//     6 send out[2:4] -> r1 tag 2 after [5]
	//     7 recv r2 tag 2 -> out[0:2] after [0]
	//     8 send out[0:2] -> r1 tag 3 after [7]
	//     9 recv r2 tag 3 -> out[4:6] after [3]
	// <nil>
}
