package cuda

import (
	"regexp"
	"strings"
	"testing"
	"unsafe"

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
	want := []string{"braid_bcast_fused", "braid_allgather_fused", "braid_allgather_ll", fusedABI, fusedHostABI, fusedOverlapABI, fusedDoneABI}
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

// TestKernelsWaitFirst checks, without a GPU, what fusedOverlapABI
// promises of the embedded PTX: every fused kernel (all but the
// elementwise reductions, the divisions and the resident llserve, which
// are never launched overlapped) executes griddepcontrol.wait, so that a
// kernel LaunchOverlapped starts early waits for the one ahead of it.
func TestKernelsWaitFirst(t *testing.T) {
	ptx, what, err := kernelImage(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bodies := regexp.MustCompile(`\.entry\s+`).Split(string(ptx), -1)[1:]
	fused := 0
	for _, b := range bodies {
		name, _, _ := strings.Cut(b, "(")
		name = strings.TrimSpace(name)
		if !strings.HasPrefix(name, "braid_") || strings.HasPrefix(name, "braid_reduce_") ||
			strings.HasPrefix(name, "braid_divide_") || strings.HasPrefix(name, "braid_llserve_") || strings.HasPrefix(name, "braid_fused_abi_") {
			continue
		}
		fused++
		if !strings.Contains(b, "griddepcontrol.wait") {
			t.Errorf("%s: kernel %s does not wait for the kernel ahead (griddepcontrol.wait)", what, name)
		}
	}
	if fused == 0 {
		t.Fatalf("%s: no fused kernels found", what)
	}
	if t.Failed() {
		return
	}
	t.Logf("%s: %d fused kernels, each with griddepcontrol.wait", what, fused)
}

// TestLaunchConfigLayout holds launchConfig and launchAttr to the layout
// of CUlaunchConfig and CUlaunchAttribute in cuda.h on 64-bit hosts.
func TestLaunchConfigLayout(t *testing.T) {
	var c launchConfig
	var a launchAttr
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(CUlaunchConfig)", unsafe.Sizeof(c), 56},
		{"CUlaunchConfig.sharedMemBytes", unsafe.Offsetof(c.sharedMem), 24},
		{"CUlaunchConfig.hStream", unsafe.Offsetof(c.stream), 32},
		{"CUlaunchConfig.attrs", unsafe.Offsetof(c.attrs), 40},
		{"CUlaunchConfig.numAttrs", unsafe.Offsetof(c.numAttrs), 48},
		{"sizeof(CUlaunchAttribute)", unsafe.Sizeof(a), 72},
		{"CUlaunchAttribute.value", unsafe.Offsetof(a.value), 8},
	} {
		if f.got != f.want {
			t.Errorf("%s: %d, want %d", f.name, f.got, f.want)
		}
	}
}
