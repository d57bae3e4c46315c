package gpu

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/sched"
)

// TestCaptureRefusals checks, without a GPU, what a Comm refuses around a
// capture before it reaches the driver: a program while it captures (an
// error that wraps ErrNotCapturable and names the program, and leaves the
// Comm usable), a synchronisation during a capture, a launch of a graph
// during a capture or after its Close, a capture on a Comm without fused
// kernels, a second capture, and an EndCapture without one.
func TestCaptureRefusals(t *testing.T) {
	ctx := context.Background()
	prog := &Call{Algo: "ring", Params: sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 5}, Prog: &sched.Program{Rank: 1}}
	kern := &Call{Algo: "gpu_oneshot", Params: prog.Params, Fused: &fused.Kernel{}}
	g := &Comm{rank: 1, n: 2}
	if err := g.capturable(prog); err != nil {
		t.Errorf("no capture: a program is refused: %v", err)
	}
	g.capture = &capture{}
	err := g.capturable(prog)
	if !errors.Is(err, ErrNotCapturable) || !strings.Contains(err.Error(), `"ring"`) || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("a program during a capture: %v, want an error wrapping ErrNotCapturable that names rank 1 and the program", err)
	}
	if g.err != nil {
		t.Errorf("the refusal failed the Comm: %v", g.err)
	}
	if err := g.capturable(kern); err != nil {
		t.Errorf("a fused kernel during a capture: %v", err)
	}
	if err := g.Synchronize(ctx); !errors.Is(err, ErrNotCapturable) {
		t.Errorf("Synchronize during a capture: %v, want ErrNotCapturable", err)
	}
	gr := &Graph{g: g, exec: 1}
	if _, err := gr.next(); !errors.Is(err, ErrNotCapturable) {
		t.Errorf("a graph launched during a capture: %v, want ErrNotCapturable", err)
	}
	if err := g.BeginCapture(ctx); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("a second capture: %v", err)
	}
	g.capture = nil
	gr.exec = 0
	if _, err := gr.next(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a closed graph launched: %v", err)
	}
	if _, err := g.EndCapture(); err == nil || !strings.Contains(err.Error(), "no capture") {
		t.Errorf("EndCapture without a capture: %v", err)
	}
	g.fusedOff = "a rank could not register its region"
	if err := g.BeginCapture(ctx); !errors.Is(err, ErrNotCapturable) || !strings.Contains(err.Error(), g.fusedOff) {
		t.Errorf("a capture without fused kernels: %v, want ErrNotCapturable and why there are none", err)
	}
}
