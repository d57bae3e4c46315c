package braid

import (
	"context"
	"errors"
	"fmt"

	"github.com/braid-ccl/braid/gpu"
)

// DeviceGraph is a CUDA graph of device collectives, captured once by
// DeviceComm.Capture and launched as many times as wanted: a launch runs
// every captured call again, in order, for the host's cost of one launch,
// as NCCL's calls captured in a CUDA graph do. Only calls that run as
// fused kernels can be captured (the planner's decision for the call;
// BRAID_DEBUG=info shows it): a schedule's steps are issued by the host
// as the peers' notices arrive, which a graph cannot hold.
//
// A launch reads the captured calls' buffers as they are when it runs, so
// their contents may change between launches, but the buffers must stay
// allocated until the graph is closed. Launches and calls made one by one
// mix in any order, as long as every rank makes the same ones in the same
// order: the kernels number their rounds from counters in device memory
// that launches of either kind advance. A captured call's waits for its
// peers are bounded, at every launch, by the time its capture had left
// before its deadline (the communicator's timeout, unless the context
// passed to the call set one).
type DeviceGraph struct {
	d *DeviceComm
	g *gpu.Graph
}

// Capture records the device collectives that fn makes on d into a CUDA
// graph and returns it, instead of running them: while fn runs, d's
// stream captures, each call of d returns once it is recorded, and
// nothing runs on the GPU. Every rank captures the same calls. A call
// that does not run as a fused kernel fails with an *Error of kind
// Unsupported that says so, and so does Capture (fn should return such
// errors); so do Synchronize and a DeviceGraph's Launch while fn runs.
// Calls of d made by other goroutines meanwhile are captured too. fn must
// not run other work on d's Worker meanwhile: the capture is bound to its
// thread, where a synchronisation or an allocation would end it in
// failure. The caller closes the graph (DeviceGraph.Close) or leaves it to
// Close.
func (d *DeviceComm) Capture(ctx context.Context, fn func() error) (*DeviceGraph, error) {
	const call = "capture"
	if err := d.c.usable(call); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, &Error{Kind: Aborted, Rank: d.c.rank, Call: call, Peer: -1, Err: errors.New("device communicator is closed")}
	}
	if d.capturing {
		d.mu.Unlock()
		return nil, &Error{Kind: InvalidArgument, Rank: d.c.rank, Call: call, Peer: -1, Err: errors.New("a capture is already under way")}
	}
	err := d.g.BeginCapture(ctx)
	if err == nil {
		d.capturing = true
	}
	d.mu.Unlock()
	if err != nil {
		return nil, deviceError(d.c.rank, call, err)
	}
	ended := false
	end := func() (*gpu.Graph, error) {
		ended = true
		d.mu.Lock()
		defer d.mu.Unlock()
		d.capturing = false
		return d.g.EndCapture()
	}
	defer func() {
		if !ended { // fn panicked: the stream leaves capture mode all the same
			if g, err := end(); err == nil {
				g.Close()
			}
		}
	}()
	ferr := fn()
	g, err := end()
	if ferr != nil {
		if g != nil {
			g.Close()
		}
		return nil, ferr
	}
	if err != nil {
		return nil, deviceError(d.c.rank, call, err)
	}
	if k, all := g.Nodes(); d.c.rank == 0 {
		d.c.w.debugf("info", "device graph: %d calls captured, %d kernels (%d nodes)", g.Calls(), k, all)
	}
	return &DeviceGraph{d: d, g: g}, nil
}

// capturingError is the error of a call that Capture cannot record: what
// the planner decided for it, and why a graph cannot hold it. d.mu is
// held.
func (d *DeviceComm) capturingError(name string, p *devPlan, count int) error {
	return &Error{Kind: Unsupported, Rank: d.c.rank, Call: name, Peer: -1,
		Err: fmt.Errorf("%s of %d elements runs the schedule %q, whose steps the host issues as the peers' notices arrive, which a CUDA graph cannot hold: "+
			"only calls that run as fused kernels can be captured (BRAID_DEBUG=info shows the decision; DeviceOptions.Algo can force gpu_oneshot or direct for allreduces, fused for the others)",
			name, count, p.algo)}
}

// Calls is the number of collective calls a launch of dg runs.
func (dg *DeviceGraph) Calls() int { return dg.g.Calls() }

// Launch runs every call captured in dg once more, in order. Like a call
// of its DeviceComm, it returns once the results are in place, or, with
// DeviceOptions.StreamOrdered, once the launch is queued on Stream(): an
// error is then returned by a later call or by Synchronize. Every rank
// launches its graph of the same calls at the same place in its sequence
// of calls.
func (dg *DeviceGraph) Launch(ctx context.Context) error {
	const call = "graph launch"
	d := dg.d
	c := d.c
	if err := c.usable(call); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return &Error{Kind: Aborted, Rank: c.rank, Call: call, Peer: -1, Err: errors.New("device communicator is closed")}
	}
	if err := d.submit(ctx, dg.g.Enqueue, dg.g.Launch); err != nil {
		return deviceError(c.rank, call, err)
	}
	return nil
}

// Close destroys dg once its launches have run. Graphs not closed are
// destroyed when their DeviceComm closes.
func (dg *DeviceGraph) Close() error {
	if err := dg.g.Close(); err != nil {
		return deviceError(dg.d.c.rank, "graph close", err)
	}
	return nil
}
