package braid_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/braid-ccl/braid"
)

func init() { childRoles["trees"] = treesChild }

// treesChild is one rank of TestTreesDisagree: every rank runs a
// broadcast and a reduce by tree packing on one machine, but the last rank
// packs its trees on another (BRAID_TEST_TOPO_LAST), so its trees
// differ from the others' (BRAID_TEST_TOPO). It prints the calls' errors and whether the
// data that arrived were right.
func treesChild() int {
	// TestMain clears BRAID_TOPO.
	os.Setenv("BRAID_TOPO", os.Getenv("BRAID_TEST_TOPO"))
	if os.Getenv("BRAID_RANK") == fmt.Sprint(mustAtoi(os.Getenv("BRAID_WORLD_SIZE"))-1) {
		os.Setenv("BRAID_TOPO", os.Getenv("BRAID_TEST_TOPO_LAST"))
	}
	ctx := context.Background()
	c, err := braid.Init(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	const count = 1<<16 + 3
	b := make([]int32, count)
	if c.Rank() == 0 {
		for i := range b {
			b[i] = int32(i)
		}
	}
	e1 := c.Bcast(ctx, b, 0)
	wrong := 0
	for i, v := range b {
		if v != int32(i) {
			wrong++
		}
	}
	in, out := make([]int32, count), make([]int32, count)
	e2 := c.Reduce(ctx, in, out, braid.Sum, 1)
	fmt.Printf("RESULT %d %d %d\n", braid.KindOf(e1), braid.KindOf(e2), wrong)
	fmt.Printf("ERRORS %v | %v\n", e1, e2)
	c.Close()
	return 0
}

func mustAtoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// TestTreesDisagree checks that the packed trees enter the calls'
// signature: ranks that pack their trees on different topologies (a
// DGX-1 with V100s and one with P100s, whose NVLinks differ) run
// different schedules, and every rank must get Mismatch from the
// broadcast or the reduce after it, never a wrong result.
func TestTreesDisagree(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			const n = 4
			res := procRun(t, n, "trees", "", "BRAID_TRANSPORT="+tr, "BRAID_TIMEOUT=10s", "BRAID_TEST_TOPO=dgx1-v100",
				"BRAID_TEST_TOPO_LAST=dgx1-p100", "BRAID_ALGO=bcast=treepack:seg=16K,reduce=treepack:seg=16K")
			for r := range n {
				var k1, k2, wrong int
				var errs string
				for _, l := range res[r] {
					if s, ok := strings.CutPrefix(l, "RESULT "); ok {
						fmt.Sscanf(s, "%d %d %d", &k1, &k2, &wrong)
					}
					if s, ok := strings.CutPrefix(l, "ERRORS "); ok {
						errs = s
					}
				}
				ok := braid.ErrorKind(k1) == braid.Mismatch || k1 == 0 && braid.ErrorKind(k2) == braid.Mismatch
				if !ok || k1 == 0 && wrong > 0 {
					t.Errorf("rank %d: bcast %v (%d elements wrong), reduce %v: %s", r, braid.ErrorKind(k1), wrong, braid.ErrorKind(k2), errs)
				}
			}
		})
	}
}
