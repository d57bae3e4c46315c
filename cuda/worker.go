package cuda

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/internal/wait"
)

// Context is a handle to a CUDA context (CUcontext). A Worker owns its
// device's primary context; the handle is a plain value that other workers
// pass to peer copies and peer-access calls.
type Context uintptr

// WorkerOptions tunes a Worker. The zero value lets the package choose.
type WorkerOptions struct {
	// Spin is how long the worker keeps polling for the next closure (and
	// for pending events) before it sleeps, and how long a caller of Do,
	// WaitEvent or Sync polls for its answer before it sleeps. Waking a
	// sleeping thread costs several microseconds, more inside a virtual
	// machine; polling costs a CPU core while it lasts. Zero means 50µs; a
	// negative value means never poll: both sides sleep at once.
	Spin time.Duration
}

const defaultSpin = 50 * time.Microsecond

// waitYield is how long the worker yields its thread, rather than sleeping,
// while events that callers wait for are pending.
const waitYield = 20 * time.Millisecond

// workerSleep is how long the worker sleeps between polls of pending
// events once it has yielded for waitYield (a new closure wakes it
// earlier).
const workerSleep = 50 * time.Microsecond

// backoff returns the worker's wait policy (internal/wait.Backoff, the
// host executor's): spin for the worker's spin time (OverSpinPolls polls
// where it is negative), then, while events are pending, yield the
// goroutine for waitYield, then sleep workerSleep at a time; with no
// event pending it blocks until a closure comes instead of sleeping.
func (w *Worker) backoff() wait.Backoff {
	return wait.Backoff{Spin: w.spin, Yield: waitYield, Sleep: workerSleep, Goroutines: true}
}

// Worker runs closures on one OS thread that holds one device's primary
// context current. CUDA contexts are bound to OS threads, and Go moves
// goroutines between threads, so every CUDA call of this package that needs
// a context is a method of *Ctx, and a *Ctx exists only inside a closure
// that a Worker runs.
//
// The worker runs closures one at a time, in the order their Do or Go calls
// reached it; calls from one goroutine are therefore run in program order.
// Between closures it polls the events that WaitEvent and Sync wait for, so
// waiting for the GPU never blocks the worker.
//
// All methods of Worker are safe for concurrent use. Streams, events,
// device memory and modules created through a Worker's Ctx belong to its
// device's primary context; they stay valid until destroyed or until the
// last Worker of that device is closed, which releases the context and with
// it everything allocated in it.
type Worker struct {
	dev  Device
	ctx  Context
	tid  int // the worker's OS thread
	spin time.Duration

	// The queue of jobs. pending mirrors len(queue)-head so that the worker
	// and spinning callers can look without the lock; sleeping tells
	// submitters that the worker waits on wake.
	mu       sync.Mutex
	queue    []*job
	head     int
	closed   bool
	pending  atomic.Int32
	sleeping atomic.Bool
	stopping atomic.Bool
	// inFn is set while a closure runs: only then can a caller of Do,
	// WaitEvent or Sync be that closure, and only then does onWorker ask
	// the kernel for the caller's thread.
	inFn atomic.Bool
	wake chan struct{} // capacity 1

	done      chan struct{} // closed when the loop has returned
	closeOnce sync.Once
	closeErr  error

	// Owned by the worker goroutine.
	c       Ctx
	waits   []*waitReq
	evPool  []Event
	kernels *reduceKernels
	sms     int
	params  launchParams
}

// Job states: a queued job is run only if the worker moves it from queued
// to running; a caller whose context ends first moves it to cancelled.
const (
	jobQueued int32 = iota
	jobRunning
	jobCancelled
)

type job struct {
	fn    func(*Ctx) error
	cctx  context.Context // nil: no cancellation
	state atomic.Int32
	reply chan error // capacity 1
	wait  *waitReq   // set for WaitEvent, fn nil
	post  bool       // from Post: no one waits; the worker pools it after the run
}

// waitReq is a pending WaitEvent: the worker polls ev and sends the outcome
// on reply, unless cancelled was set first.
type waitReq struct {
	ev        Event
	reply     chan error // capacity 1
	cancelled atomic.Bool
}

var jobPool = sync.Pool{New: func() any { return &job{reply: make(chan error, 1)} }}

// NewWorker starts a worker for dev: a goroutine locked to its OS thread
// that retains the device's primary context and makes it current. Several
// Workers of one device share its primary context.
func NewWorker(dev Device, opts WorkerOptions) (*Worker, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	w := &Worker{
		dev:  dev,
		spin: opts.Spin,
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	if w.spin == 0 {
		w.spin = defaultSpin
	}
	w.c.w = w
	ready := make(chan error, 1)
	go w.loop(ready)
	if err := <-ready; err != nil {
		<-w.done
		return nil, err
	}
	return w, nil
}

// Device returns the worker's device.
func (w *Worker) Device() Device { return w.dev }

// Context returns the handle of the worker's context.
func (w *Worker) Context() Context { return w.ctx }

// SMs returns the number of multiprocessors of the worker's device.
func (w *Worker) SMs() int { return w.sms }

// submit queues j, or reports that the worker is closed.
func (w *Worker) submit(j *job) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrWorkerClosed
	}
	w.queue = append(w.queue, j)
	w.pending.Add(1)
	w.mu.Unlock()
	// The worker sets sleeping before its last look at pending, and this
	// load comes after the increment: one of the two sees the other.
	if w.sleeping.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// pop takes the next job, or returns nil.
func (w *Worker) pop() *job {
	if w.pending.Load() == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head == len(w.queue) {
		return nil
	}
	j := w.queue[w.head]
	w.queue[w.head] = nil
	w.head++
	if w.head == len(w.queue) {
		w.queue, w.head = w.queue[:0], 0
	}
	w.pending.Add(-1)
	return j
}

// await waits for a reply on ch: it polls for the worker's spin time, then
// sleeps. If ctx ends first and cancel succeeds, it returns ctx's error and
// false; if cancel fails (the work has started), it keeps waiting.
func (w *Worker) await(ctx context.Context, ch chan error, cancel func() bool) (error, bool) {
	if w.spin > 0 {
		// The caller blocks on ch after the spin: no yield phase.
		for bo := w.backoff(); len(ch) == 0 && bo.Step(false) == 0; {
		}
	}
	select {
	case err := <-ch:
		return err, true
	default:
	}
	select {
	case err := <-ch:
		return err, true
	case <-ctx.Done():
		if cancel() {
			return ctx.Err(), false
		}
		return <-ch, true
	}
}

// Do runs fn on the worker and returns its error. If ctx is done before fn
// starts, fn is not run and Do returns ctx.Err(); once fn has started, Do
// waits for it, since fn may use the caller's memory. fn must not call Do,
// Sync or WaitEvent of its own worker (that would wait for itself; Do
// returns an error instead), must not keep the *Ctx after it returns, and
// should not block for long: other closures and event waits of the device
// queue behind it. A panic in fn is recovered and returned as an error.
func (w *Worker) Do(ctx context.Context, fn func(*Ctx) error) error {
	if w.onWorker() {
		return fmt.Errorf("cuda: device %d: Do called from a closure running on the same worker", int(w.dev))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	j := jobPool.Get().(*job)
	j.fn, j.cctx = fn, ctx
	j.state.Store(jobQueued)
	if err := w.submit(j); err != nil {
		j.fn, j.cctx = nil, nil
		jobPool.Put(j)
		return err
	}
	err, answered := w.await(ctx, j.reply, func() bool { return j.state.CompareAndSwap(jobQueued, jobCancelled) })
	if answered {
		// A cancelled job stays out of the pool: the queue still holds it.
		j.fn, j.cctx = nil, nil
		jobPool.Put(j)
	}
	return err
}

// Go queues fn to run on the worker and returns at once; the returned
// channel receives fn's error (or ErrWorkerClosed if the worker closes
// first) and may be ignored. The rules for fn are those of Do; fn must not
// use memory that the caller may change before fn has run.
func (w *Worker) Go(fn func(*Ctx) error) <-chan error {
	j := &job{fn: fn, reply: make(chan error, 1)}
	if err := w.submit(j); err != nil {
		j.reply <- err
	}
	return j.reply
}

// Post queues fn to run on the worker, as Go does, for a caller that does
// not want its error: fn reports failures its own way. It allocates
// nothing of its own (the job comes from a pool), which matters to a
// caller that posts a kernel launch per collective. If the worker is
// closed, fn is not run.
func (w *Worker) Post(fn func(*Ctx) error) {
	j := jobPool.Get().(*job)
	j.fn, j.cctx, j.post = fn, nil, true
	j.state.Store(jobQueued)
	if w.submit(j) != nil {
		j.fn, j.post = nil, false
		jobPool.Put(j)
	}
}

// WaitEvent blocks until the work recorded in ev has completed on the GPU,
// ctx is done, or the worker closes. The worker polls ev between closures.
// ev must stay valid until WaitEvent returns. An error of the GPU work
// (an illegal address in a kernel, say) is returned.
func (w *Worker) WaitEvent(ctx context.Context, ev Event) error {
	if w.onWorker() {
		return fmt.Errorf("cuda: device %d: WaitEvent called from a closure running on the same worker", int(w.dev))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	req := &waitReq{ev: ev, reply: make(chan error, 1)}
	if err := w.submit(&job{wait: req}); err != nil {
		return err
	}
	// The worker checks cancelled before every poll, and closures (the only
	// place ev can be destroyed) run between polls, so once it is set the
	// worker never touches ev again.
	err, _ := w.await(ctx, req.reply, func() bool { req.cancelled.Store(true); return true })
	return err
}

// Sync waits until all work queued on s so far has completed, without
// holding the worker: it records an event on s and waits for it.
func (w *Worker) Sync(ctx context.Context, s Stream) error {
	var ev Event
	if err := w.Do(ctx, func(c *Ctx) error {
		var err error
		if ev, err = c.pooledEvent(); err != nil {
			return err
		}
		return c.Record(ev, s)
	}); err != nil {
		return err
	}
	err := w.WaitEvent(ctx, ev)
	if err != nil && ctx.Err() != nil {
		// A cancelled wait leaves the event pending; destroy it instead of
		// pooling it, once the worker gets to it.
		w.Post(func(c *Ctx) error { return c.DestroyEvent(ev) })
		return err
	}
	w.Post(func(c *Ctx) error { c.w.evPool = append(c.w.evPool, ev); return nil })
	return err
}

// Close stops the worker after the closure it is running, answers queued
// closures and pending waits with ErrWorkerClosed without running them,
// and releases its retain of the primary context (the last release destroys
// the context and frees everything in it). Close is idempotent and returns
// the same error every time.
func (w *Worker) Close() error {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		w.stopping.Store(true)
		select {
		case w.wake <- struct{}{}:
		default:
		}
		<-w.done
	})
	return w.closeErr
}

// loop is the worker goroutine.
func (w *Worker) loop(ready chan<- error) {
	defer close(w.done)
	// The goroutine never unlocks: when it returns, its thread, which may
	// still have the context current, exits with it.
	runtime.LockOSThread()
	w.tid = gettid()
	if err := w.start(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	bo := w.backoff() // reset when work or a completed event is seen
	for !w.stopping.Load() {
		if j := w.pop(); j != nil {
			w.run(j)
			bo.Reset()
			continue
		}
		if len(w.waits) > 0 && w.poll() {
			bo.Reset()
			continue
		}
		// While an event someone waits for is pending, the backoff yields
		// after the spin rather than sleeping, since a sleep of under a
		// millisecond may last a millisecond, longer than many copies.
		d := bo.Step(len(w.waits) > 0)
		if d == 0 {
			continue
		}
		w.sleeping.Store(true)
		if w.pending.Load() > 0 || w.stopping.Load() {
			w.sleeping.Store(false)
			continue
		}
		if len(w.waits) > 0 {
			timer.Reset(d)
			select {
			case <-w.wake:
			case <-timer.C:
			}
			timer.Stop()
		} else {
			<-w.wake
		}
		w.sleeping.Store(false)
	}
	w.stop()
}

// start retains the primary context and makes it current on this thread.
func (w *Worker) start() error {
	h, err := w.dev.handle()
	if err != nil {
		return err
	}
	var ctx Context
	if r := Result(ccall(api.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&ctx)), uintptr(h))); r != Success {
		return fmt.Errorf("cuda: device %d: %w", int(w.dev), &Error{Func: "cuDevicePrimaryCtxRetain", Code: r})
	}
	if r := Result(ccall(api.cuCtxSetCurrent, uintptr(ctx))); r != Success {
		ccall(api.cuDevicePrimaryCtxRelease, uintptr(h))
		return fmt.Errorf("cuda: device %d: %w", int(w.dev), &Error{Func: "cuCtxSetCurrent", Code: r})
	}
	w.ctx = ctx
	sms, err := w.dev.Attribute(AttrMultiprocessorCount)
	if err != nil {
		ccall(api.cuCtxSetCurrent, 0)
		ccall(api.cuDevicePrimaryCtxRelease, uintptr(h))
		return err
	}
	w.sms = sms
	return nil
}

// stop answers queued jobs and pending waits with ErrWorkerClosed, frees
// pooled events and the kernels, and releases the context.
func (w *Worker) stop() {
	w.mu.Lock()
	queued := w.queue[w.head:]
	w.queue, w.head = nil, 0
	w.mu.Unlock()
	for _, j := range queued {
		if j.post {
			continue // no one waits for it
		}
		if j.wait != nil {
			j.wait.reply <- ErrWorkerClosed
		} else {
			j.reply <- ErrWorkerClosed
		}
	}
	for _, r := range w.waits {
		r.reply <- ErrWorkerClosed
	}
	w.waits = nil
	var errs []error
	for _, ev := range w.evPool {
		errs = append(errs, check("cuEventDestroy_v2", Result(ccall(api.cuEventDestroy, uintptr(ev)))))
	}
	w.evPool = nil
	if w.kernels != nil {
		errs = append(errs, check("cuModuleUnload", Result(ccall(api.cuModuleUnload, uintptr(w.kernels.mod)))))
		w.kernels = nil
	}
	ccall(api.cuCtxSetCurrent, 0)
	h, err := w.dev.handle()
	if err == nil {
		err = check("cuDevicePrimaryCtxRelease_v2", Result(ccall(api.cuDevicePrimaryCtxRelease, uintptr(h))))
	}
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		w.closeErr = fmt.Errorf("cuda: closing worker of device %d: %w", int(w.dev), err)
	}
}

// run runs one job on the worker thread.
func (w *Worker) run(j *job) {
	if j.wait != nil {
		w.waits = append(w.waits, j.wait)
		return
	}
	if j.post {
		w.call(j.fn)
		j.fn, j.post = nil, false
		jobPool.Put(j)
		return
	}
	if !j.state.CompareAndSwap(jobQueued, jobRunning) {
		return // cancelled by its caller, who no longer waits
	}
	if j.cctx != nil {
		if err := j.cctx.Err(); err != nil {
			j.reply <- err
			return
		}
	}
	j.reply <- w.call(j.fn)
}

// onWorker reports whether the caller is a closure running on the worker.
// The worker's thread sets inFn before it calls a closure, so a closure
// calling back sees it set; any other caller that sees it set pays for a
// gettid(2), which a synchronous device call would otherwise pay every
// time (a system call each, on a machine where they are dear).
func (w *Worker) onWorker() bool { return w.inFn.Load() && gettid() == w.tid }

// call runs fn, turning a panic into an error.
func (w *Worker) call(fn func(*Ctx) error) (err error) {
	w.inFn.Store(true)
	defer func() {
		w.inFn.Store(false)
		if p := recover(); p != nil {
			err = fmt.Errorf("cuda: device %d: closure panicked: %v\n%s", int(w.dev), p, debug.Stack())
		}
	}()
	return fn(&w.c)
}

// poll queries every pending event once, answers those that completed or
// failed, and reports whether any did.
func (w *Worker) poll() bool {
	progressed := false
	kept := w.waits[:0]
	for _, r := range w.waits {
		if r.cancelled.Load() {
			progressed = true
			continue
		}
		res := Result(ccall(api.cuEventQuery, uintptr(r.ev)))
		if res == ErrNotReady {
			kept = append(kept, r)
			continue
		}
		r.reply <- check("cuEventQuery", res)
		progressed = true
	}
	for i := len(kept); i < len(w.waits); i++ {
		w.waits[i] = nil
	}
	w.waits = kept
	return progressed
}

// EnablePeers enables peer access between every ordered pair of the given
// workers' devices that the hardware allows (Device.CanAccessPeer), so that
// kernels and copies on one may use the others' memory directly. Pairs that
// cannot access each other are left out without error; pairs already
// enabled are fine.
func EnablePeers(ctx context.Context, workers ...*Worker) error {
	for _, a := range workers {
		for _, b := range workers {
			if a == b || a.dev == b.dev {
				continue
			}
			ok, err := a.dev.CanAccessPeer(b.dev)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			peer := b.ctx
			if err := a.Do(ctx, func(c *Ctx) error { return c.EnablePeerAccess(peer) }); err != nil {
				return err
			}
		}
	}
	return nil
}
