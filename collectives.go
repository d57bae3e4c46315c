package braid

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/braid-ccl/braid/sched"
)

// Buffers are Go slices of a numeric type ([]float32, []float64, []Half,
// []BF16, []int8, []uint8, []int32, []uint32, []int64, []uint64) or a Raw.
// The send and receive buffers of a call have the same element type. For an
// in-place call pass the same slice as both (allreduce, reduce at the root,
// alltoall), or the rank's own block of the larger one (allgather and gather:
// send is recv[rank*n:(rank+1)*n]; reducescatter and scatter: recv is
// send[rank*n:(rank+1)*n]).

// Allreduce combines send across all ranks with op and writes the result to
// recv on every rank. len(recv) == len(send).
func (c *Comm) Allreduce(ctx context.Context, send, recv any, op Op) error {
	return c.collective(ctx, "allreduce", sched.Allreduce, send, recv, op, 0)
}

// Reduce combines send across all ranks with op into recv at root. recv is
// ignored (and may be nil) on the other ranks.
func (c *Comm) Reduce(ctx context.Context, send, recv any, op Op, root int) error {
	return c.collective(ctx, "reduce", sched.Reduce, send, recv, op, root)
}

// Bcast copies buf at root to buf on every other rank.
func (c *Comm) Bcast(ctx context.Context, buf any, root int) error {
	return c.collective(ctx, "bcast", sched.Bcast, nil, buf, 0, root)
}

// Allgather concatenates every rank's send, in rank order, into recv on
// every rank. len(recv) == Size()*len(send).
func (c *Comm) Allgather(ctx context.Context, send, recv any) error {
	return c.collective(ctx, "allgather", sched.Allgather, send, recv, 0, 0)
}

// ReduceScatter combines send across ranks with op and leaves block r of
// the result (len(recv) elements) in recv on rank r. len(send) ==
// Size()*len(recv).
func (c *Comm) ReduceScatter(ctx context.Context, send, recv any, op Op) error {
	return c.collective(ctx, "reducescatter", sched.ReduceScatter, send, recv, op, 0)
}

// Gather concatenates every rank's send, in rank order, into recv at root.
func (c *Comm) Gather(ctx context.Context, send, recv any, root int) error {
	return c.collective(ctx, "gather", sched.Gather, send, recv, 0, root)
}

// Scatter sends block r of send at root (len(recv) elements each) to recv on
// rank r. send is ignored on the other ranks.
func (c *Comm) Scatter(ctx context.Context, send, recv any, root int) error {
	return c.collective(ctx, "scatter", sched.Scatter, send, recv, 0, root)
}

// Alltoall sends block j of send to rank j, which stores it as block r of
// its recv (r being the sender's rank). Blocks are len(send)/Size()
// elements.
func (c *Comm) Alltoall(ctx context.Context, send, recv any) error {
	return c.collective(ctx, "alltoall", sched.Alltoall, send, recv, 0, 0)
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.collective(ctx, "barrier", sched.Barrier, nil, nil, 0, 0)
}

func (c *Comm) collective(ctx context.Context, name string, coll sched.Collective, send, recv any, op Op, root int) (err error) {
	var k call
	if p := c.w.prof; p != nil {
		defer c.profCollective(p, &k, p.Begin(), &err)
	}
	// GPU buffers take the device path (device.go); host buffers go on
	// to the host planner after two type checks, without entering it.
	if _, dev := send.(Device); dev {
		return c.deviceCall(ctx, name, coll, send, recv, op, root)
	}
	if _, dev := recv.(Device); dev {
		return c.deviceCall(ctx, name, coll, send, recv, op, root)
	}
	if err = c.prepare(&k, name, coll, send, recv, op, root); err != nil {
		return err
	}
	return c.runCall(ctx, &k)
}

// Request is a non-blocking call in flight.
//
// A call runs on a goroutine of its own, started when it is issued, or on
// the goroutine that waits for it: a Wait that finds the call not begun
// yet runs it itself (see Wait), which spares the two thread hand-offs of
// a call that its caller waits for at once (the C API's braid_wait, a
// framework's work object).
type Request struct {
	done chan struct{}
	err  error
	once sync.Once
	prof *profOp // the profiler's record of the call; nil when off

	body  func() error // the call; nil once it failed to issue
	taken atomic.Bool  // body has begun, on some goroutine
}

func newRequest() *Request { return &Request{done: make(chan struct{})} }

func (r *Request) finish(err error) {
	r.once.Do(func() {
		if r.prof != nil {
			r.prof.done(err)
		}
		r.err = err
		close(r.done)
	})
}

// start runs body in the background, unless a Wait takes it first.
func (r *Request) start(body func() error) {
	r.body = body
	go r.run()
}

// run runs the call's body and finishes the request, unless another
// goroutine has begun it.
func (r *Request) run() {
	if r.body != nil && r.taken.CompareAndSwap(false, true) {
		r.finish(r.body())
	}
}

// Wait blocks until the call completes and returns its error. A ctx that
// ends first makes Wait return ctx's error; the call itself goes on until
// its own deadline. With a ctx that never ends (context.Background), a
// Wait that finds the call not begun yet runs it on its own goroutine, as
// the blocking call would; a call's other outstanding calls go on in the
// background meanwhile, so that the order of Waits does not matter.
func (r *Request) Wait(ctx context.Context) error {
	if o := r.prof; o != nil {
		defer o.waited(r, o.rec.Now())
	}
	if ctx.Done() == nil {
		r.run()
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Test reports whether the call has completed, and its error if so.
func (r *Request) Test() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// icollective checks the arguments now, takes the call's place in the
// communicator's order now, and runs it in the background.
func (c *Comm) icollective(ctx context.Context, name string, coll sched.Collective, send, recv any, op Op, root int) *Request {
	r := c.newRequest(name)
	var k call
	if err := c.prepare(&k, name, coll, send, recv, op, root); err != nil {
		r.finish(err)
		return r
	}
	k.arrive = c.w.clock.now()
	if err := c.usable(name); err != nil {
		r.finish(err)
		return r
	}
	// The sequence number and program are taken here, in call order, so
	// that several outstanding calls match up across ranks.
	run, err := c.issue(&k, false)
	if err != nil {
		e := err.(*Error)
		c.w.fail(e)
		r.finish(e)
		return r
	}
	r.prof.issued(&k)
	r.start(func() error { return c.runIssued(ctx, &k, run) })
	return r
}

// IAllreduce is the non-blocking Allreduce.
func (c *Comm) IAllreduce(ctx context.Context, send, recv any, op Op) *Request {
	return c.icollective(ctx, "allreduce", sched.Allreduce, send, recv, op, 0)
}

// IReduce is the non-blocking Reduce.
func (c *Comm) IReduce(ctx context.Context, send, recv any, op Op, root int) *Request {
	return c.icollective(ctx, "reduce", sched.Reduce, send, recv, op, root)
}

// IBcast is the non-blocking Bcast.
func (c *Comm) IBcast(ctx context.Context, buf any, root int) *Request {
	return c.icollective(ctx, "bcast", sched.Bcast, nil, buf, 0, root)
}

// IAllgather is the non-blocking Allgather.
func (c *Comm) IAllgather(ctx context.Context, send, recv any) *Request {
	return c.icollective(ctx, "allgather", sched.Allgather, send, recv, 0, 0)
}

// IReduceScatter is the non-blocking ReduceScatter.
func (c *Comm) IReduceScatter(ctx context.Context, send, recv any, op Op) *Request {
	return c.icollective(ctx, "reducescatter", sched.ReduceScatter, send, recv, op, 0)
}

// IGather is the non-blocking Gather.
func (c *Comm) IGather(ctx context.Context, send, recv any, root int) *Request {
	return c.icollective(ctx, "gather", sched.Gather, send, recv, 0, root)
}

// IScatter is the non-blocking Scatter.
func (c *Comm) IScatter(ctx context.Context, send, recv any, root int) *Request {
	return c.icollective(ctx, "scatter", sched.Scatter, send, recv, 0, root)
}

// IAlltoall is the non-blocking Alltoall.
func (c *Comm) IAlltoall(ctx context.Context, send, recv any) *Request {
	return c.icollective(ctx, "alltoall", sched.Alltoall, send, recv, 0, 0)
}

// IBarrier is the non-blocking Barrier.
func (c *Comm) IBarrier(ctx context.Context) *Request {
	return c.icollective(ctx, "barrier", sched.Barrier, nil, nil, 0, 0)
}
