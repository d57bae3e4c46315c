package cuda

import (
	"regexp"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
)

// TestKernelNames checks, without a GPU, that the embedded PTX holds every
// kernel LoadKernels looks up: a kernel renamed or dropped in the kernels'
// source (kernels/reduce.cu and the .cuh files it includes), or a family
// added to the loader before the kernels were regenerated, fails here
// instead of on the first device run.
func TestKernelNames(t *testing.T) {
	ptx, what, err := kernelImage(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]bool{}
	for _, m := range regexp.MustCompile(`\.entry\s+([A-Za-z0-9_]+)`).FindAllSubmatch(ptx, -1) {
		entries[string(m[1])] = true
	}
	want := []string{"braid_bcast_fused", "braid_allgather_fused", "braid_allgather_ll", fusedABI}
	for _, d := range dtype.All() {
		if d.IsFloat() {
			want = append(want, "braid_divide_"+typeSuffix[d])
		}
		for _, op := range dtype.AllOps() {
			if !dtype.Supports(d, op) {
				continue
			}
			for _, f := range kernelFamilies {
				want = append(want, kernelName(f.name, d, op))
			}
		}
	}
	for _, name := range want {
		if !entries[name] {
			t.Errorf("%s has no kernel %s", what, name)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("%s: all %d kernels the loader looks up are there (of %d entries)", what, len(want), len(entries))
}
