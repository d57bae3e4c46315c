package exec

import "testing"

// TestBufClass checks the size classes of the staging pools: every size
// gets a buffer at least as large and at most 25% (or 64 bytes) larger,
// the classes grow with the size, a class's size maps back to the class,
// and getBuf and putBuf respect them.
func TestBufClass(t *testing.T) {
	prevClass, prevSize := 0, 64
	for n := 1; n <= 1<<31; n += 1 + n/97 {
		class, size := bufClass(n)
		if size < n || size > n+n/4+64 {
			t.Fatalf("%d bytes: class %d of %d bytes", n, class, size)
		}
		if class < prevClass || class == prevClass && size != prevSize || class > prevClass && size <= prevSize {
			t.Fatalf("%d bytes: class %d (%d bytes) after class %d (%d bytes)", n, class, size, prevClass, prevSize)
		}
		if c2, s2 := bufClass(size); c2 != class || s2 != size {
			t.Fatalf("%d bytes: class %d of %d bytes, but %d bytes are class %d of %d", n, class, size, size, c2, s2)
		}
		if class >= len(bufPools) {
			t.Fatalf("%d bytes: class %d beyond the %d pools", n, class, len(bufPools))
		}
		prevClass, prevSize = class, size
	}
	for _, n := range []int{1, 63, 65, 1000, 4096, 100_000, 1 << 20, 3<<20 + 1} {
		p := getBuf(n)
		if len(*p) != n {
			t.Fatalf("getBuf(%d): %d bytes", n, len(*p))
		}
		if _, size := bufClass(n); cap(*p) != size {
			t.Fatalf("getBuf(%d): capacity %d, want the class's %d", n, cap(*p), size)
		}
		putBuf(p)
	}
	// A buffer of another size is not pooled: it would sit in a class whose
	// requests it cannot serve.
	b := make([]byte, 1000)
	putBuf(&b)
	if q := getBuf(1000); cap(*q) == 1000 {
		t.Errorf("a foreign 1000-byte buffer was pooled")
	}
}
