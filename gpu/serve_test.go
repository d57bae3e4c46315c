package gpu

import (
	"testing"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/internal/dtype"
)

// TestServes checks, without a GPU, which calls the resident kernel takes:
// only a low-latency one-shot allreduce of at most its cap, from and to
// 8-byte aligned buffers, while nothing is queued on the stream, outside a
// capture, and not the call that must reset the sequence first.
func TestServes(t *testing.T) {
	g := &Comm{fused: &fusedState{seq: 10, seqLimit: SeqLimit}, res: &resident{max: 4096}}
	call := func(kind fused.Kind, count int, in, out cuda.DevicePtr) *Call {
		return &Call{Fused: &fused.Kernel{Kind: kind, DType: dtype.Float32, Op: dtype.Sum, Count: count}, In: in, Out: out}
	}
	const a = cuda.DevicePtr(0x10000)
	for _, c := range []struct {
		name string
		k    *Call
		want bool
	}{
		{"8 bytes", call(fused.OneShotLL, 2, a, a+0x1000), true},
		{"in place", call(fused.OneShotLL, 2, a, a), true},
		{"at the cap", call(fused.OneShotLL, 1024, a, a), true},
		{"above the cap", call(fused.OneShotLL, 1026, a, a), false},
		{"not whole 8-byte words", call(fused.OneShotLL, 3, a, a), false},
		{"an unaligned buffer", call(fused.OneShotLL, 2, a+4, a), false},
		{"another kernel", call(fused.OneShot, 2, a, a), false},
		{"a program", &Call{In: a, Out: a}, false},
	} {
		if got := g.serves(c.k); got != c.want {
			t.Errorf("%s: serves %v, want %v", c.name, got, c.want)
		}
	}
	k := call(fused.OneShotLL, 2, a, a)
	g.queued = true
	if g.serves(k) {
		t.Error("a call with work queued on the stream: served")
	}
	g.queued = false
	g.capture = &capture{}
	if g.serves(k) {
		t.Error("a call during a capture: served")
	}
	g.capture = nil
	g.fused.seq = SeqLimit // the last number before the reset
	if !g.serves(k) {
		t.Error("the call of number SeqLimit: not served")
	}
	g.fused.seq = SeqLimit + 1
	if g.serves(k) {
		t.Error("the call that resets the sequence: served")
	}
	g.fused.seq = 10
	g.res = nil
	if g.serves(k) {
		t.Error("no resident kernel: served")
	}
}
