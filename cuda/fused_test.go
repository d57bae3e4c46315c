package cuda

import "testing"

// TestFusedSlots checks the slot sizes the fused kernels need, which the
// region must hold and LaunchOneShot checks: a two-shot call needs two
// chunks of ⌈count/n⌉ elements, each rounded up to 16 bytes (the kernel's
// vector width); the others need their block.
func TestFusedSlots(t *testing.T) {
	for _, c := range []struct {
		kind         FusedKind
		count, es, n int
		want         int
	}{
		{FusedOneShot, 1000, 4, 4, 4000},
		{FusedBcast, 3, 2, 8, 6},
		{FusedAllgather, 7, 8, 3, 56},
		{FusedReduceScatter, 5, 4, 2, 20},
		{FusedTwoShot, 1000, 4, 4, 2 * 252 * 4},       // ⌈1000/4⌉ = 250, rounded up to 252 (4 per 16 bytes)
		{FusedTwoShot, 1001, 4, 4, 2 * 252 * 4},       // ⌈1001/4⌉ = 251, rounded up to 252
		{FusedTwoShot, 1, 8, 8, 2 * 2 * 8},            // one element in a 16-byte chunk
		{FusedTwoShot, 1 << 20, 2, 3, 2 * 349528 * 2}, // ⌈1048576/3⌉ = 349526, rounded up to 8
	} {
		if got := c.kind.Slot(c.count, c.es, c.n); got != c.want {
			t.Errorf("kind %d, %d elements of %d bytes on %d ranks: slot %d, want %d", c.kind, c.count, c.es, c.n, got, c.want)
		}
	}
	// A slot sized for the largest two-shot call in bytes, plus 32 (each
	// chunk may round up by 16 more for wider elements; gpu adds 64), holds
	// every call up to that many bytes, whatever the element size.
	for _, n := range []int{2, 3, 5, 8} {
		for _, es := range []int{1, 2, 4, 8} {
			max := TwoShotSlot(1<<20, 1, n)
			for count := (1 << 20) / es; count > (1<<20)/es-40; count-- {
				if got := TwoShotSlot(count, es, n); got > max+32 {
					t.Errorf("n %d: %d elements of %d bytes need %d, more than %d+32", n, count, es, got, max)
				}
			}
		}
	}
	if OneShotBlocks(1) != 1 || OneShotBlocks(4097) != 2 || OneShotBlocks(1<<30) != OneShotMaxBlocks {
		t.Errorf("OneShotBlocks: %d %d %d", OneShotBlocks(1), OneShotBlocks(4097), OneShotBlocks(1<<30))
	}
}
