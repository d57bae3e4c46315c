package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu/fused"
)

// CUDA graphs of fused calls. Between BeginCapture and EndCapture the
// Comm's stream captures: the fused kernels of the calls made meanwhile
// (Run or Enqueue) are recorded into a graph instead of run, with the
// buffers, shapes and wait bounds of those calls; EndCapture instantiates
// the graph, and Graph.Launch replays all its calls for one launch. A
// replay runs new sequence numbers, since the kernels read theirs from
// the counters in device memory and advance them (fused.Kernel.Seqs), so
// graph launches and calls launched one by one mix in any order, as long
// as every rank makes the same ones in the same order. Programs cannot be
// captured: their steps are issued by the host as the peers' notices
// arrive, and their copies wait on interprocess events.

// ErrNotCapturable is wrapped by the error of a call that a CUDA graph
// cannot hold: a program (not a fused kernel), or anything but a fused
// call while the Comm captures.
var ErrNotCapturable = errors.New("not capturable in a CUDA graph")

// capture is the state of a capture (BeginCapture): what the calls
// captured so far take at every launch of the graph. The worker's
// closures of those calls update it, in order, and EndCapture's closure
// reads it after them.
type capture struct {
	calls  int    // fused calls recorded
	rounds uint64 // the sequence numbers they take
}

// Graph is an instantiated CUDA graph of fused calls captured on a Comm
// (BeginCapture, EndCapture). Its kernels use the buffers of the calls
// captured, which must stay allocated while the Graph is launched; their
// contents are read when the launch runs. Every rank launches its graph of
// the same calls at the same place in its sequence of calls.
type Graph struct {
	g       *Comm
	exec    cuda.GraphExec
	calls   int    // fused calls in the graph
	rounds  uint32 // the sequence numbers a launch takes
	kernels int    // kernel nodes
	nodes   int    // all nodes
}

// Calls is the number of collective calls a launch of gr runs.
func (gr *Graph) Calls() int { return gr.calls }

// Nodes reports the graph's kernel nodes and all its nodes (the others
// are the copies of calls in low-latency lines from unaligned buffers).
func (gr *Graph) Nodes() (kernels, all int) { return gr.kernels, gr.nodes }

// BeginCapture starts capturing the calls made on g into a CUDA graph:
// until EndCapture, a fused call is recorded instead of run (Run returns
// once it is recorded, and nothing waits for it), and any other call
// fails with an error that wraps ErrNotCapturable. Every rank captures
// the same calls. The capture is in thread-local mode on the worker's
// thread, so that other threads' CUDA calls are unaffected.
func (g *Comm) BeginCapture(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = g.asyncErr()
	}
	if g.err != nil {
		return g.err
	}
	if g.capture != nil {
		return fmt.Errorf("gpu: rank %d: a capture is already under way", g.rank)
	}
	if g.fused == nil {
		why := g.fusedOff
		if why == "" {
			why = "not asked for"
		}
		return fmt.Errorf("gpu: rank %d: a CUDA graph holds fused kernels only, and this communicator has none (%s): %w", g.rank, why, ErrNotCapturable)
	}
	f := g.fused
	err := g.w.Do(ctx, func(c *cuda.Ctx) error {
		// What a captured call may need is made now: an allocation
		// cannot be captured.
		if err := f.ensureStage(c); err != nil {
			return err
		}
		return c.BeginCapture(g.s, cuda.CaptureThreadLocal)
	})
	if err != nil {
		return fmt.Errorf("gpu: rank %d: beginning a capture: %w", g.rank, err)
	}
	g.capture = &capture{}
	return nil
}

// Capturing reports whether a capture is under way (BeginCapture).
func (g *Comm) Capturing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.capture != nil
}

// EndCapture ends the capture that BeginCapture began and returns the
// graph of the calls made since, which the caller closes. It waits for
// the calls queued by Enqueue to be recorded; if one of them failed, the
// capture's graph is dropped and that error returned (the Comm has failed
// too, as after any failed call).
func (g *Comm) EndCapture() (*Graph, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cp := g.capture
	if cp == nil {
		return nil, fmt.Errorf("gpu: rank %d: no capture is under way", g.rank)
	}
	g.capture = nil
	gr := &Graph{g: g}
	// Not cancellable: the stream must leave capture mode.
	err := g.w.Do(context.Background(), func(c *cuda.Ctx) error {
		graph, err := c.EndCapture(g.s)
		if err != nil {
			return err
		}
		defer c.DestroyGraph(graph)
		nodes, err := c.GraphNodes(graph)
		if err != nil {
			return err
		}
		gr.nodes = len(nodes)
		for _, n := range nodes {
			if t, err := c.NodeType(n); err == nil && t == cuda.NodeKernel {
				gr.kernels++
			}
		}
		gr.exec, err = c.Instantiate(graph)
		return err
	})
	if err == nil {
		err = g.asyncErr()
	}
	if err == nil && g.err != nil {
		err = g.err
	}
	if err == nil && cp.rounds >= uint64(g.fused.seqLimit) {
		err = fmt.Errorf("gpu: rank %d: the graph's %d calls take %d sequence numbers, above the %d between resets", g.rank, cp.calls, cp.rounds, g.fused.seqLimit)
	}
	if err != nil {
		if gr.exec != 0 {
			g.w.Do(context.Background(), func(c *cuda.Ctx) error { return c.DestroyGraphExec(gr.exec) })
		}
		return nil, fmt.Errorf("gpu: rank %d: ending a capture: %w", g.rank, err)
	}
	gr.calls, gr.rounds = cp.calls, uint32(cp.rounds)
	g.graphs[gr] = struct{}{}
	return gr, nil
}

// notCapturing returns an error that wraps ErrNotCapturable if k, a
// program, would be issued into a capture: this Comm's (cp), or one that
// reached its stream from elsewhere (a caller's stream that captures and
// that the stream waits for). It runs on the worker.
func (g *Comm) notCapturing(c *cuda.Ctx, k *Call, cp *capture) error {
	st := cuda.CaptureActive
	if cp == nil {
		var err error
		if st, err = c.CaptureStatus(g.s); err != nil {
			return nil // a driver without graphs captures nothing
		}
	}
	if st == cuda.CaptureNone {
		return nil
	}
	return g.programCaptureError(k, st)
}

// programCaptureError says why k, a program, cannot be captured.
func (g *Comm) programCaptureError(k *Call, st cuda.CaptureStatus) error {
	return fmt.Errorf("gpu: rank %d: the stream is %v, and %v of %d elements runs the program %q, whose steps the host issues as the peers' notices arrive: a CUDA graph holds fused kernels only: %w",
		g.rank, st, k.Params.Coll, k.Params.Count, k.Algo, ErrNotCapturable)
}

// Launch runs every call of gr once more, in the order captured, and
// returns once the results are in place, as Run does. Every rank
// launches at the same place in its sequence of calls.
func (gr *Graph) Launch(ctx context.Context) error {
	g := gr.g
	g.mu.Lock()
	defer g.mu.Unlock()
	seq, err := gr.next()
	if err != nil {
		return err
	}
	err = g.w.Do(ctx, func(c *cuda.Ctx) error { return gr.launch(ctx, c, seq, false) })
	if err != nil {
		g.err = fmt.Errorf("gpu: rank %d: an earlier call failed: %w", g.rank, err)
	} else {
		g.queued = false // the launch waited for the stream
	}
	return err
}

// Enqueue queues a launch of gr on the Comm's stream and returns at once,
// as Comm.Enqueue does for a call: an error is returned by a later call
// or by Synchronize. The deadline bounds the wait for the peers where the
// launch must first reset the sequence (SeqLimit).
func (gr *Graph) Enqueue(dl time.Time) error {
	g := gr.g
	g.mu.Lock()
	defer g.mu.Unlock()
	seq, err := gr.next()
	if err != nil {
		return err
	}
	g.queued = true
	g.w.Post(func(c *cuda.Ctx) error {
		if err := gr.launch(deadlineCtx{dl}, c, seq, true); err != nil {
			g.aerrMu.Lock()
			if g.aerr == nil {
				g.aerr = fmt.Errorf("gpu: rank %d: an earlier call failed: %w", g.rank, err)
			}
			g.aerrMu.Unlock()
		}
		return nil
	})
	return nil
}

// next checks that gr can be launched and returns the launch's place in
// the Comm's sequence of calls. g.mu is held.
func (gr *Graph) next() (uint32, error) {
	g := gr.g
	switch {
	case gr.exec == 0:
		return 0, fmt.Errorf("gpu: rank %d: the graph is closed", g.rank)
	case g.capture != nil:
		return 0, fmt.Errorf("gpu: rank %d: a graph launched during a capture: %w", g.rank, ErrNotCapturable)
	}
	return g.next(&Call{})
}

// launch queues gr on the stream, on the worker: the launch takes the
// graph's sequence numbers, after a reset where they would pass SeqLimit
// (fusedState.advance), as a call of that many rounds would.
func (gr *Graph) launch(ctx context.Context, c *cuda.Ctx, seq uint32, ordered bool) error {
	g, f := gr.g, gr.g.fused
	if err := f.failed(g.rank); err != nil {
		return err
	}
	if err := f.advance(gr.rounds, func() error { return g.resetFused(ctx, c, seq) }); err != nil {
		return err
	}
	if err := c.GraphLaunch(gr.exec, g.s); err != nil || ordered {
		return err
	}
	if err := c.StreamSynchronize(g.s); err != nil {
		return err
	}
	return f.failed(g.rank)
}

// Close destroys gr once its launches have run. A Graph that is not
// closed is destroyed when its Comm closes.
func (gr *Graph) Close() error {
	g := gr.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if gr.exec == 0 {
		return nil
	}
	if _, ok := g.graphs[gr]; !ok {
		gr.exec = 0
		return nil // destroyed by Close
	}
	delete(g.graphs, gr)
	exec := gr.exec
	gr.exec = 0
	return g.w.Do(context.Background(), func(c *cuda.Ctx) error { return c.DestroyGraphExec(exec) })
}

// FusedSeq returns, for tests and diagnosis, the next fused call's first
// sequence number as the host counts it, and as the kernels' counters in
// device memory hold it (every word), once the stream has drained. Every
// counter equals the host's count when the two are in step.
func (g *Comm) FusedSeq(ctx context.Context) (host uint32, dev []uint32, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fused == nil {
		return 0, nil, errors.New("gpu: no fused kernels")
	}
	if g.capture != nil {
		return 0, nil, fmt.Errorf("gpu: rank %d: reading the counters during a capture: %w", g.rank, ErrNotCapturable)
	}
	f := g.fused
	b := make([]byte, 4*fused.SeqWords)
	err = g.w.Do(ctx, func(c *cuda.Ctx) error {
		if err := c.StreamSynchronize(g.s); err != nil {
			return err
		}
		if err := c.CopyDtoH(b, f.seqs, g.s); err != nil {
			return err
		}
		return c.StreamSynchronize(g.s)
	})
	if err != nil {
		return 0, nil, err
	}
	dev = make([]uint32, fused.SeqWords)
	for i := range dev {
		dev[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	}
	return f.seq, dev, nil
}
