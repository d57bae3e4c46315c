package bench

import (
	"os"
	"testing"
	"unsafe"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/sched"
	"golang.org/x/sys/unix"
)

// TestAllocTouchesBuffers checks that a row's Go buffers have their pages
// in memory before the row is timed: an out-of-place input that no call
// writes would otherwise read the kernel's zero page (alloc).
func TestAllocTouchesBuffers(t *testing.T) {
	const bytes = 16 << 20
	p := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: bytes / 4}
	b, err := alloc(nil, Config{Coll: sched.Allreduce, DType: braid.Float32}, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, buf := range []struct {
		name string
		b    []byte
	}{{"input", b.in}, {"output", b.out}} {
		if in, all := resident(t, buf.b); in < all {
			t.Errorf("%s: %d of its %d pages in memory, want all", buf.name, in, all)
		}
	}
}

// resident counts the pages of b that are in memory (mincore), and all
// of its pages.
func resident(t *testing.T, b []byte) (in, all int) {
	page := os.Getpagesize()
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % uintptr(page))
	n := off + len(b)
	start := unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), -off)
	vec := make([]byte, (n+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(start), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	for _, v := range vec {
		in += int(v & 1)
	}
	return in, len(vec)
}
