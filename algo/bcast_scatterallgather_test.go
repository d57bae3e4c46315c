package algo_test

import (
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
)

// TestScatterAllgather runs the scatter-allgather broadcast under the
// reference interpreter on 1–9 ranks, every root, with counts below n,
// counts n does not divide and large ones; and checks that no data moves
// twice: every rank but the root receives each element once, the root
// nothing.
func TestScatterAllgather(t *testing.T) {
	t.Parallel()
	a, err := algo.Lookup(sched.Bcast, "scatterallgather")
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 9; n++ {
		for root := range n {
			for _, count := range []int{0, 1, 2, 3, 5, 7, 8, 9, 1000, 65537} {
				p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: count, Root: root}
				check(t, a, p)
				for r, prog := range algo.Programs(a, p) {
					got := 0
					for _, s := range prog.Steps {
						if s.Kind == sched.KindRecv {
							got += s.Len()
						}
					}
					want := count
					if r == root {
						want = 0
					}
					if got != want {
						t.Errorf("n=%d root=%d count=%d: rank %d receives %d elements, want %d", n, root, count, r, got, want)
					}
				}
			}
		}
	}
}
