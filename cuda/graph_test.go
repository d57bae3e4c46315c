package cuda

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
)

// TestGraphCallMissing checks, without a GPU, what a graph call does
// where the driver lacks the function: an error that wraps
// ErrNotSupported and names the function.
func TestGraphCallMissing(t *testing.T) {
	err := graphCall("cuStreamBeginCapture_v2", 0, 1, 2)
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("graphCall of a missing function = %v, want an error wrapping ErrNotSupported", err)
	}
	if got := err.Error(); !strings.Contains(got, "cuStreamBeginCapture_v2") || !strings.Contains(got, "CUDA 11.4") {
		t.Errorf("error %q does not name the function and the driver it needs", got)
	}
	for s, want := range map[CaptureStatus]string{CaptureNone: "not capturing", CaptureActive: "capturing",
		CaptureInvalidated: "capture invalidated", 7: "capture status 7"} {
		if s.String() != want {
			t.Errorf("CaptureStatus(%d) = %q, want %q", int32(s), s.String(), want)
		}
	}
}

// TestGraph captures a memset and a reduction on a stream, checks that
// nothing ran during the capture and what the graph holds, then launches
// it three times, each launch adding b to a once more; and checks that a
// synchronisation during a capture invalidates it instead of running.
func TestGraph(t *testing.T) {
	needDevices(t, 1)
	w := newWorker(t, 0)
	s := stream(t, w)
	const n = 1 << 20
	a, b := alloc(t, w, 4*n), alloc(t, w, 4*n)
	do(t, w, func(c *Ctx) error {
		if err := c.LoadKernels(); err != nil {
			return err
		}
		if err := c.Memset32(a, 5, n, s); err != nil {
			return err
		}
		return c.StreamSynchronize(s)
	})
	var exec GraphExec
	do(t, w, func(c *Ctx) error {
		if st, err := c.CaptureStatus(s); err != nil || st != CaptureNone {
			t.Errorf("before the capture: %v, %v", st, err)
		}
		if err := c.BeginCapture(s, CaptureThreadLocal); err != nil {
			return err
		}
		if st, err := c.CaptureStatus(s); err != nil || st != CaptureActive {
			t.Errorf("during the capture: %v, %v", st, err)
		}
		// b = 3, a += b, every launch.
		if err := c.Memset32(b, 3, n, s); err != nil {
			return err
		}
		if err := c.Reduce(s, Reduction{DType: dtype.Int32, Op: dtype.Sum, Dst: a, A: a, B: b, Count: n}); err != nil {
			return err
		}
		g, err := c.EndCapture(s)
		if err != nil {
			return err
		}
		defer c.DestroyGraph(g)
		nodes, err := c.GraphNodes(g)
		if err != nil {
			return err
		}
		kinds := map[GraphNodeType]int{}
		for _, nd := range nodes {
			k, err := c.NodeType(nd)
			if err != nil {
				return err
			}
			kinds[k]++
		}
		if len(nodes) != 2 || kinds[NodeMemset] != 1 || kinds[NodeKernel] != 1 {
			t.Errorf("the graph has %d nodes of kinds %v, want a memset and a kernel", len(nodes), kinds)
		}
		exec, err = c.Instantiate(g)
		return err
	})
	defer w.Do(testCtx(t), func(c *Ctx) error { return c.DestroyGraphExec(exec) })
	word := func() uint32 { return binary.LittleEndian.Uint32(download(t, w, s, a.Add(4*(n-1)), 4)) }
	if v := word(); v != 5 {
		t.Fatalf("after the capture a holds %d: the captured work ran", v)
	}
	for i := 1; i <= 3; i++ {
		do(t, w, func(c *Ctx) error { return c.GraphLaunch(exec, s) })
		if v := word(); v != uint32(5+3*i) {
			t.Fatalf("after launch %d a holds %d, want %d", i, v, 5+3*i)
		}
	}
	// A synchronisation cannot be captured: it fails and invalidates the
	// capture, which then ends without a graph.
	do(t, w, func(c *Ctx) error {
		if err := c.BeginCapture(s, CaptureThreadLocal); err != nil {
			return err
		}
		if err := c.StreamSynchronize(s); !errors.Is(err, ErrStreamCaptureUnsupported) && !errors.Is(err, ErrStreamCaptureInvalidated) {
			t.Errorf("StreamSynchronize during a capture = %v, want ErrStreamCaptureUnsupported", err)
		}
		if st, err := c.CaptureStatus(s); err != nil || st != CaptureInvalidated {
			t.Errorf("after the synchronisation: %v, %v; want capture invalidated", st, err)
		}
		g, err := c.EndCapture(s)
		if err == nil || g != 0 {
			t.Errorf("EndCapture of an invalidated capture = %v, %v; want no graph and an error (ErrStreamCaptureInvalidated)", g, err)
		}
		if st, err := c.CaptureStatus(s); err != nil || st != CaptureNone {
			t.Errorf("after EndCapture: %v, %v", st, err)
		}
		return nil
	})
}
