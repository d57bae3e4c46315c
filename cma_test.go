package braid_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/braid-ccl/braid"
)

func init() {
	childRoles["cma"] = cmaChild
}

// TestCMAProcs: two processes broadcast and allgather, through the shared
// area, buffers of 16–256 KiB that are not registered: the area's readers
// copy them out of the writer's process (single copy by address,
// process_vm_readv), every byte arrives, and the job read chunks so; with
// BRAID_SHM_CMA=0 none.
func TestCMAProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, off := range []bool{false, true} {
		env := []string{"BRAID_ALGO=shm", "BRAID_TIMEOUT=60s"}
		if off {
			env = append(env, "BRAID_SHM_CMA=0")
		}
		res := procRun(t, 2, "cma", "CMA ", env...)
		var read uint64
		for r := range 2 {
			var p, q uint64
			if len(res[r]) != 1 {
				t.Fatalf("off %v: rank %d reported %q", off, r, res[r])
			}
			if _, err := fmt.Sscanf(res[r][0], "%d published, %d read", &p, &q); err != nil {
				t.Fatalf("off %v: rank %d: %q: %v", off, r, res[r][0], err)
			}
			read += q
		}
		if off != (read == 0) {
			t.Errorf("BRAID_SHM_CMA=0 %v: %d chunks read by address", off, read)
		}
	}
}

// cmaChild is one rank of TestCMAProcs.
func cmaChild() int {
	ctx := context.Background()
	c, fail := childComm(ctx)
	if c == nil {
		return 1
	}
	n, r := c.Size(), c.Rank()
	for k, b := range []int{16 << 10, 64<<10 + 4, 256 << 10} {
		m := b / 4
		for root := range n {
			buf := make([]int32, m)
			if r == root {
				for i := range buf {
					buf[i] = int32(i*31 + k + root)
				}
			}
			if err := c.Bcast(ctx, buf, root); err != nil {
				return fail(err)
			}
			for i, v := range buf {
				if v != int32(i*31+k+root) {
					return fail(fmt.Errorf("bcast of %d B from %d: element %d is %d", b, root, i, v))
				}
			}
		}
		in, out := make([]int32, m), make([]int32, n*m)
		for i := range in {
			in[i] = int32(i*17 + r + k)
		}
		if err := c.Allgather(ctx, in, out); err != nil {
			return fail(err)
		}
		for q := range n {
			for i, v := range out[q*m : (q+1)*m] {
				if v != int32(i*17+q+k) {
					return fail(fmt.Errorf("allgather of %d B a rank: block %d element %d is %d", b, q, i, v))
				}
			}
		}
	}
	p, q := braid.DirectStats(c)
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("CMA %d published, %d read\n", p, q)
	return 0
}
