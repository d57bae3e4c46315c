package ddp

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid"
)

// The defaults, Horovod's until v0.21 (its later defaults are 128 MiB and
// 1 ms).
const (
	DefaultFusionThreshold = 64 << 20
	DefaultCycleTime       = 5 * time.Millisecond
)

// Options tunes a Reducer. The zero value (or nil) gives the defaults.
type Options struct {
	// FusionThreshold is the most bytes packed into one fused allreduce
	// (Horovod's HOROVOD_FUSION_THRESHOLD). 0 means
	// DefaultFusionThreshold; a negative value turns fusion off, so that
	// each gradient is reduced by itself.
	FusionThreshold int
	// CycleTime is the time between the starts of two negotiation cycles
	// (Horovod's HOROVOD_CYCLE_TIME). 0 means DefaultCycleTime; a negative
	// value starts a cycle as soon as a gradient is ready.
	CycleTime time.Duration
	// Sum makes the Reducer add the gradients instead of averaging them.
	Sum bool
}

// Stats counts what a Reducer did, over every step so far.
type Stats struct {
	Steps        int           // completed steps (calls to Wait that succeeded)
	Cycles       int           // negotiation cycles (allreduces of the ready mask)
	Allreduces   int           // allreduces of gradients (one per bucket)
	Fused        int           // allreduces of more than one gradient
	Bytes        int64         // gradient bytes reduced
	WaitTime     time.Duration // time spent in Wait: the communication not hidden behind computation
	LastWaitTime time.Duration // the last step's share of WaitTime
}

// grad is one registered gradient buffer.
type grad struct {
	b []byte
	d braid.DType
}

// Reducer averages registered gradient buffers across the ranks of a
// communicator, step after step. Ready and Wait may be called from
// different goroutines, but one step at a time: Ready for the gradients
// of a step, then Wait, then the next step.
type Reducer struct {
	ctx    context.Context // the Reducer's lifetime; its calls use it
	cancel context.CancelFunc
	comm   *braid.Comm // split from the caller's: the Reducer's calls only
	grads  []grad
	words  int // 64-bit words of a ready mask
	thresh int // bytes; < 0: no fusion
	cycle  time.Duration
	op     braid.Op

	mu     sync.Mutex
	wake   chan struct{} // a gradient became ready (capacity 1)
	ready  []uint64      // gradients ready here this step
	nready int
	step   *step // the step in flight, nil between steps
	failed error // set once; every later call returns it
	stats  Stats
	pool   [][]byte // fusion buffers, reused from step to step
}

// step is one step's background work.
type step struct {
	done chan struct{}
	err  error
}

// New registers the gradient buffers of a model for data-parallel
// averaging over c's ranks. Every rank must call it with the same number
// of buffers, of the same lengths and element types in the same order.
// It is collective: it splits a communicator of its own from c, which
// Close releases. ctx bounds the Reducer's life: its background calls
// use it. The buffers must stay valid until Close; the Reducer writes
// the averages into them.
func New(ctx context.Context, c *braid.Comm, grads []any, opts *Options) (*Reducer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.FusionThreshold == 0 {
		o.FusionThreshold = DefaultFusionThreshold
	}
	if o.CycleTime == 0 {
		o.CycleTime = DefaultCycleTime
	}
	op := braid.Avg
	if o.Sum {
		op = braid.Sum
	}
	gs := make([]grad, len(grads))
	for i, g := range grads {
		b, d, err := view(g)
		if err != nil {
			return nil, fmt.Errorf("ddp: rank %d: gradient %d: %w", c.Rank(), i, err)
		}
		if !d.IsFloat() {
			return nil, fmt.Errorf("ddp: rank %d: gradient %d: element type %v: gradients must be floating point", c.Rank(), i, d)
		}
		gs[i] = grad{b: b, d: d}
	}
	own, err := c.Split(ctx, 0, c.Rank())
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	words := (len(gs) + 63) / 64
	return &Reducer{
		ctx:    rctx,
		cancel: cancel,
		comm:   own,
		grads:  gs,
		words:  words,
		thresh: o.FusionThreshold,
		cycle:  o.CycleTime,
		op:     op,
		wake:   make(chan struct{}, 1),
		ready:  make([]uint64, words),
	}, nil
}

// Ready says that gradient i of this step is written: the Reducer may
// start reducing it (with others) from now on, and the caller must not
// write it again before Wait returns. Marking a gradient twice in a step
// is an error.
func (r *Reducer) Ready(i int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed != nil {
		return r.failed
	}
	if i < 0 || i >= len(r.grads) {
		return fmt.Errorf("ddp: rank %d: Ready(%d): gradients are numbered 0 to %d", r.comm.Rank(), i, len(r.grads)-1)
	}
	w, bit := i/64, uint64(1)<<(i%64)
	if r.ready[w]&bit != 0 {
		return fmt.Errorf("ddp: rank %d: Ready(%d): gradient %d is already marked ready in this step", r.comm.Rank(), i, i)
	}
	r.ready[w] |= bit
	r.nready++
	r.startLocked()
	return nil
}

// Wait marks every gradient not yet marked ready as ready, and returns
// when every gradient holds the average (or the sum, with Options.Sum)
// of its values on all ranks. An error of a collective (a dead peer, a
// timeout, a disagreement) is returned here, and by every later call. A
// ctx that ends first makes Wait return its error, and the Reducer
// unusable, since the step's calls go on without it.
func (r *Reducer) Wait(ctx context.Context) error {
	start := time.Now()
	r.mu.Lock()
	if r.failed != nil {
		r.mu.Unlock()
		return r.failed
	}
	for i := range r.grads {
		r.ready[i/64] |= uint64(1) << (i % 64)
	}
	r.nready = len(r.grads)
	r.startLocked()
	s := r.step
	r.mu.Unlock()

	select {
	case <-s.done:
	case <-ctx.Done():
		r.mu.Lock()
		if r.failed == nil {
			r.failed = fmt.Errorf("ddp: rank %d: a Wait gave up (%w) while its step was in flight", r.comm.Rank(), ctx.Err())
		}
		r.mu.Unlock()
		return ctx.Err()
	}
	d := time.Since(start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.step = nil
	clear(r.ready)
	r.nready = 0
	if s.err != nil {
		if r.failed == nil {
			r.failed = s.err
		}
		return s.err
	}
	r.stats.Steps++
	r.stats.WaitTime += d
	r.stats.LastWaitTime = d
	return nil
}

// Stats returns what the Reducer did so far.
func (r *Reducer) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Close stops the Reducer and releases its communicator. A step in
// flight fails.
func (r *Reducer) Close() error {
	r.cancel()
	r.mu.Lock()
	s := r.step
	if r.failed == nil {
		r.failed = errors.New("ddp: the Reducer is closed")
	}
	r.mu.Unlock()
	if s != nil {
		<-s.done
	}
	return r.comm.Close()
}

// startLocked starts the step's background loop if it is not running,
// and wakes it.
func (r *Reducer) startLocked() {
	if r.step == nil {
		r.step = &step{done: make(chan struct{})}
		go r.run(r.step)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// pending is a started allreduce and where its result goes.
type pending struct {
	req   *braid.Request
	buf   []byte // the fusion buffer; nil when reduced in place
	parts []int  // the gradients packed into buf, in order
}

// run is one step's background loop: negotiation cycles, each followed by
// the allreduces of what became ready everywhere, then the completion of
// every allreduce.
func (r *Reducer) run(s *step) {
	defer close(s.done)
	n := len(r.grads)
	if r.comm.Size() == 1 || n == 0 {
		// Nothing to exchange: the average of one rank's gradient is itself.
		s.err = r.waitAllReady()
		return
	}
	var (
		issued  = make([]uint64, r.words)
		mask    = make([]uint64, r.words)
		nIssued int
		started []pending
		last    = time.Now()
	)
	for nIssued < n {
		if err := r.waitCycle(issued, last); err != nil {
			s.err = err
			break
		}
		r.mu.Lock()
		copy(mask, r.ready)
		r.mu.Unlock()
		if err := r.comm.Allreduce(r.ctx, mask, mask, braid.BAnd); err != nil {
			s.err = err
			break
		}
		last = time.Now()
		var agreed []int
		for w := range mask {
			m := mask[w] &^ issued[w]
			issued[w] |= m
			for m != 0 {
				agreed = append(agreed, w*64+bits.TrailingZeros64(m))
				m &= m - 1
			}
		}
		nIssued += len(agreed)
		ps, nfused, bytes := r.issue(agreed)
		started = append(started, ps...)
		r.mu.Lock()
		r.stats.Cycles++
		r.stats.Allreduces += len(ps)
		r.stats.Fused += nfused
		r.stats.Bytes += bytes
		r.mu.Unlock()
	}
	// Finish what started, even after an error, so that no allreduce
	// writes into a buffer after the step ends.
	for _, p := range started {
		err := p.req.Wait(context.Background())
		if err != nil {
			if s.err == nil {
				s.err = err
			}
			continue
		}
		if p.buf != nil {
			off := 0
			for _, i := range p.parts {
				off += copy(r.grads[i].b, p.buf[off:])
			}
			r.pool = append(r.pool, p.buf)
		}
	}
}

// waitAllReady waits until every gradient of the step is marked ready.
func (r *Reducer) waitAllReady() error {
	for {
		r.mu.Lock()
		all := r.nready == len(r.grads)
		r.mu.Unlock()
		if all {
			return nil
		}
		select {
		case <-r.wake:
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
}

// waitCycle waits until a gradient not yet issued is ready here and
// either the cycle time since the last cycle has passed or every
// gradient is ready here.
func (r *Reducer) waitCycle(issued []uint64, last time.Time) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r.mu.Lock()
		all := r.nready == len(r.grads)
		some := false
		for w, m := range r.ready {
			if m&^issued[w] != 0 {
				some = true
				break
			}
		}
		r.mu.Unlock()
		if some {
			left := time.Until(last.Add(r.cycle))
			if all || left <= 0 {
				return nil
			}
			if timer == nil {
				timer = time.NewTimer(left)
			}
		}
		var tick <-chan time.Time
		if timer != nil {
			tick = timer.C
		}
		select {
		case <-r.wake:
		case <-tick:
			timer = nil
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
}

// issue packs the agreed gradients (in ascending order, the same on every
// rank) into buckets of one element type and at most the fusion
// threshold, and starts an allreduce on each. It returns the started
// allreduces, how many fused more than one gradient, and the bytes.
func (r *Reducer) issue(agreed []int) (ps []pending, nfused int, bytes int64) {
	type bucket struct {
		parts []int
		size  int
	}
	open := map[braid.DType]*bucket{}
	var order []braid.DType // element types in order of first appearance
	flush := func(d braid.DType) {
		b := open[d]
		if b == nil || len(b.parts) == 0 {
			return
		}
		delete(open, d)
		if len(b.parts) == 1 {
			g := r.grads[b.parts[0]]
			ps = append(ps, pending{req: r.comm.IAllreduce(r.ctx, braid.Raw{Bytes: g.b, Type: d}, braid.Raw{Bytes: g.b, Type: d}, r.op)})
			return
		}
		buf := r.buffer(b.size)
		off := 0
		for _, i := range b.parts {
			off += copy(buf[off:], r.grads[i].b)
		}
		nfused++
		ps = append(ps, pending{req: r.comm.IAllreduce(r.ctx, braid.Raw{Bytes: buf, Type: d}, braid.Raw{Bytes: buf, Type: d}, r.op), buf: buf, parts: b.parts})
	}
	for _, i := range agreed {
		g := r.grads[i]
		if len(g.b) == 0 {
			continue
		}
		bytes += int64(len(g.b))
		b := open[g.d]
		if b != nil && (r.thresh < 0 || b.size+len(g.b) > r.thresh) {
			flush(g.d)
			b = nil
		}
		if b == nil {
			b = &bucket{}
			open[g.d] = b
			order = append(order, g.d)
		}
		b.parts = append(b.parts, i)
		b.size += len(g.b)
	}
	for _, d := range order {
		flush(d)
	}
	return ps, nfused, bytes
}

// buffer returns a fusion buffer of n bytes, reusing a free one.
func (r *Reducer) buffer(n int) []byte {
	for k, b := range r.pool {
		if cap(b) >= n {
			r.pool[k] = r.pool[len(r.pool)-1]
			r.pool = r.pool[:len(r.pool)-1]
			return b[:n]
		}
	}
	return make([]byte, n)
}

// view returns the bytes and element type of a gradient or parameter
// buffer.
func view(buf any) ([]byte, braid.DType, error) {
	switch v := buf.(type) {
	case []float32:
		return bytesOf(v), braid.Float32, nil
	case []float64:
		return bytesOf(v), braid.Float64, nil
	case []braid.Half:
		return bytesOf(v), braid.Float16, nil
	case []braid.BF16:
		return bytesOf(v), braid.BFloat16, nil
	case braid.Raw:
		if !v.Type.Valid() {
			return nil, 0, fmt.Errorf("braid.Raw of unknown element type %v", v.Type)
		}
		if len(v.Bytes)%v.Type.Size() != 0 {
			return nil, 0, fmt.Errorf("braid.Raw of %d bytes is not a whole number of %v elements", len(v.Bytes), v.Type)
		}
		return v.Bytes, v.Type, nil
	case nil:
		return nil, 0, errors.New("nil buffer")
	}
	return nil, 0, fmt.Errorf("unsupported buffer type %T (want []float32, []float64, []braid.Half, []braid.BF16 or braid.Raw)", buf)
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}
