package algo_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// dump prints every rank's program of a for p, with its Final chunks.
func dump(a algo.Algorithm, p sched.Params) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %v %s: %d ranks, count %d\n", p.Coll, a.Name(), p.NRanks, p.Count)
	for _, prog := range algo.Programs(a, p) {
		b.WriteString(prog.String())
		fmt.Fprintf(&b, "  final %v\n", prog.Final)
	}
	return b.String()
}

// TestGolden compares printed schedules with testdata; go test -update
// rewrites them.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		coll sched.Collective
		name string
		n    int
		c    int
	}{
		{"ring_allreduce_5.txt", sched.Allreduce, "ring", 5, 10},
	} {
		a, err := algo.Lookup(tc.coll, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		got := dump(a, sched.Params{Coll: tc.coll, NRanks: tc.n, Count: tc.c})
		path := filepath.Join("testdata", tc.file)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update to create it)", err)
		}
		if got != string(want) {
			t.Errorf("%s differs from the schedule generated now (run go test -update if the change is intended):\n%s", path, got)
		}
	}
}
