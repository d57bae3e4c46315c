package exec

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
)

// Env is what the executor needs from the communicator.
type Env struct {
	// Conn returns the connection to communicator rank peer (Run; Drive's
	// backend moves the data itself).
	Conn func(peer int) transport.Conn
	// Tag is the base tag of this call: Comm, Seq and Sig set; the executor
	// sets Step from each step's Tag.
	Tag transport.Tag
	// Fail, if not nil, reports a failure of the communicator noticed
	// elsewhere (a peer lost, an abort); the run stops with that error.
	Fail func() error
	// Spin is how long a waiting executor polls before it yields (see
	// transport.Backoff).
	Spin time.Duration
	// Wait, if not nil, is the wait policy's parameters in place of
	// transport.Backoff{Spin: Spin}: package gpu's, whose ranks may be
	// goroutines of one process, yields the goroutine and sleeps briefly.
	Wait *transport.Backoff
	// Ahead starts every step whose dependencies have completed, not
	// only the next in program order: for a backend whose started steps
	// need a peer to act on them (package gpu's offers of destinations),
	// so that a step held by its dependencies holds back no later step.
	// Program order alone never deadlocks (sched.Validate proves it).
	Ahead bool
	// Deadline, if not zero, ends the run with transport.ErrTimeout (a
	// context.DeadlineExceeded) when it passes (in addition to ctx's own
	// deadline, which ends it with ctx's error).
	Deadline time.Time
	// Timeout, if not zero and Deadline is zero, sets Deadline to Timeout
	// after the run first has to wait.
	Timeout time.Duration
	// Hook, if not nil, is called once at the end of the run.
	Hook func(prog *sched.Program, err error)
	// Stall, if not nil, is called from the run's goroutine, once per stall,
	// when the run has waited StallAfter with no step completing (counted
	// from its first slow poll since the last step completed): once for
	// each peer the run waits for, with the
	// index of the first step that waits for it (pending receives, or
	// pending sends if no receive is pending), the step, and the run's Tag
	// with Step set to the step's. It must not block.
	Stall      func(index int, s *sched.Step, tag transport.Tag)
	StallAfter time.Duration
}

// Buffers are the memory and element type of one call.
type Buffers struct {
	In, Out []byte
	DType   dtype.DType
	Op      dtype.Op // ignored by collectives that do not reduce
	NRanks  int      // divisor for Op avg
}

// StepError reports the step at which a run failed. A run that ended
// while it waited (its context or deadline ended, or Env.Fail reported a
// failure) names the step it was waiting for: its first pending receive,
// else its first pending send.
type StepError struct {
	Rank  int
	Seq   uint32 // the call's sequence number (Env.Tag.Seq)
	Index int
	Step  sched.Step
	Err   error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("rank %d, call %d, step %d (%v): %v", e.Rank, e.Seq, e.Index, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// Backend carries out the steps of one rank's program for Drive. Drive
// owns the order: it starts a step once the steps it depends on have
// completed, polls the steps under way, waits between empty polls as
// Env.Wait says, ends the run at ctx's end, Env.Deadline, Env.Timeout or
// Env.Fail, reports stalls (Env.Stall), and names the step of a failure
// (StepError). A backend only moves data. Run's steps over transports are
// the executor's own backend, which the loop calls directly (no indirect
// call per step on the host's path); package gpu's steps on a GPU's
// streams, with the notices between ranks, are another.
type Backend interface {
	// Start begins step i, whose dependencies have completed. It returns
	// how many steps it completed: 0 if step i is still under way (Drive
	// then polls it with Test), 1 if step i completed, k > 1 if steps
	// i+1 to i+k-1, which had not started, completed with it (the
	// backend ran them fused: package gpu's reduction kernel does a copy
	// before it and one after it).
	Start(i int) (int, error)
	// Test polls step i, which Start left under way; it returns what
	// Start returns.
	Test(i int) (int, error)
	// Poll is called at the start of every round of polls. It moves what
	// the backend moves apart from steps (package gpu's notices), and
	// reports whether anything moved and whether the backend still has
	// work of the run's, which the run waits for once its steps have
	// completed.
	Poll() (moved, busy bool)
}

const (
	notStarted uint8 = iota
	running
	complete
)

// run is the state of one Run or Drive, pooled so that a call allocates
// nothing.
type run struct {
	ctx   context.Context
	prog  *sched.Program
	env   Env
	be    Backend // nil: the host's steps (host.go)
	bo    transport.Backoff
	polls int

	stallAt time.Time // when Stall is due; zero before the first slow poll
	stalled bool

	status  []uint8
	pending []int32 // steps under way, in the order they started
	next    int     // the step the loop waits to start: steps before it have started

	host // the host's steps' state (Run)
}

var runPool = sync.Pool{New: func() any { return new(run) }}

// get returns a pooled run of prog, every step not started.
func get(ctx context.Context, prog *sched.Program, env *Env, be Backend) *run {
	r := runPool.Get().(*run)
	r.ctx, r.prog, r.env, r.be = ctx, prog, *env, be
	if env.Wait != nil {
		r.bo = *env.Wait
	} else {
		r.bo = transport.Backoff{Spin: env.Spin}
	}
	r.polls, r.next = 0, 0
	r.stallAt, r.stalled = time.Time{}, false
	n := len(prog.Steps)
	r.status = resize(r.status, n)
	clear(r.status)
	r.pending = r.pending[:0]
	return r
}

func (r *run) stepErr(i int, e error) error {
	return &StepError{Rank: r.prog.Rank, Seq: r.env.Tag.Seq, Index: i, Step: r.prog.Steps[i], Err: e}
}

// start starts step i, whose dependencies have completed, on the
// backend (the host's steps start in startHost).
func (r *run) start(i int) error {
	n, e := r.be.Start(i)
	if e != nil {
		return r.stepErr(i, e)
	}
	if n == 0 {
		r.status[i] = running
		r.pending = append(r.pending, int32(i))
		return nil
	}
	return r.completed(i, n)
}

// completed records that n steps from i on completed (Backend.Start).
func (r *run) completed(i, n int) error {
	r.status[i] = complete
	for j := i + 1; j < i+n; j++ {
		if j >= len(r.status) || r.status[j] != notStarted {
			return r.stepErr(i, fmt.Errorf("exec: the backend completed step %d with step %d, which had started or does not exist", j, i))
		}
		r.status[j] = complete
	}
	return nil
}

// drive runs the program's steps: each in program order once its
// dependencies have completed (with Env.Ahead, any step then), until
// every step and the backend's own work have completed.
func (r *run) drive() error {
	steps := r.prog.Steps
	be, kernel := r.be, r.kernel
	for i := range steps {
		s := &steps[i]
		if be != nil && r.status[i] != notStarted {
			continue // completed with the step before it, or started ahead
		}
		for _, d := range s.Deps {
			for r.status[d] != complete {
				r.next = i // it and the steps after it may start ahead (Env.Ahead)
				if e := r.progress(); e != nil {
					return e
				}
			}
		}
		if be == nil {
			// The host's steps: copies and reductions run here, without
			// a call; transfers start in startHost.
			switch s.Kind {
			case sched.KindCopy:
				src, dst := r.slice(s.Src), r.slice(s.Dst)
				if len(dst) > 0 && &src[0] != &dst[0] {
					copySplit(dst, src)
				}
				r.status[i] = complete
			case sched.KindReduce:
				reduceInto(&r.red, kernel, r.es, r.slice(s.Dst), r.slice(s.Src))
				r.status[i] = complete
			default:
				if e := r.startHost(i); e != nil {
					return e
				}
			}
			continue
		}
		if r.status[i] == notStarted { // unless started ahead while it waited
			if e := r.start(i); e != nil {
				return e
			}
		}
	}
	r.next = len(steps)
	for {
		if len(r.pending) == 0 {
			if r.be == nil {
				return nil
			}
			if _, busy := r.be.Poll(); !busy {
				return nil
			}
		}
		if e := r.progress(); e != nil {
			return e
		}
	}
}

// ahead starts, in program order, the steps from r.next on (the step the
// loop waits to start, and those after it) whose dependencies have
// completed (Env.Ahead); it reports whether it started any.
func (r *run) ahead() (bool, error) {
	moved := false
	steps := r.prog.Steps
	for i := r.next; i < len(steps); i++ {
		if r.status[i] != notStarted || !r.depsDone(i) {
			continue
		}
		if e := r.start(i); e != nil {
			return moved, e
		}
		moved = true
	}
	return moved, nil
}

func (r *run) depsDone(i int) bool {
	for _, d := range r.prog.Steps[i].Deps {
		if r.status[d] != complete {
			return false
		}
	}
	return true
}

// progress tests every step under way once (and polls the backend); it
// backs off when nothing moved. The host's requests are tested here, in
// one function with the wait (an empty poll while spinning costs little
// more than its tests); a backend's in progressBackend. Both wait in
// idle.
func (r *run) progress() error {
	if r.be != nil {
		return r.progressBackend()
	}
	moved := false
	keep := r.pending[:0]
	for _, i := range r.pending {
		done, e := r.reqs[i].Test()
		if e != nil {
			return r.stepErr(int(i), e)
		}
		if done {
			r.finish(i)
			moved = true
			continue
		}
		keep = append(keep, i)
	}
	r.pending = keep
	if moved {
		r.moved()
		return nil
	}
	var ch <-chan struct{}
	if len(r.pending) > 0 {
		ch = r.reqs[r.pending[0]].Done()
	}
	return r.idle(ch)
}

// progressBackend is progress over a backend.
func (r *run) progressBackend() error {
	moved, e := r.testBackend()
	if e != nil {
		return e
	}
	if moved {
		r.moved()
		return nil
	}
	return r.idle(nil)
}

// idle is an empty poll: the checks of a slow wait every 64th (check),
// then the backoff, woken early by ch where it is not nil.
func (r *run) idle(ch <-chan struct{}) error {
	r.polls++
	if r.polls&63 == 0 {
		if e := r.check(); e != nil {
			return e
		}
	}
	r.bo.Idle(ch)
	return nil
}

// moved returns the wait to spinning once a poll found progress.
// Progress re-arms the stall too: a run that stalled on a slow peer which
// then moved probes the next peer it waits StallAfter for (the timeout
// hold learns whether that one waits too).
func (r *run) moved() {
	r.bo.Reset()
	r.stalled, r.stallAt = false, time.Time{}
}

// testBackend polls the backend, tests its steps under way once and, with
// Env.Ahead, starts the later steps whose dependencies have completed; it
// reports whether anything moved.
func (r *run) testBackend() (bool, error) {
	moved, _ := r.be.Poll()
	keep := r.pending[:0]
	for _, i := range r.pending {
		if r.status[i] == complete {
			continue // completed with the step before it
		}
		n, e := r.be.Test(int(i))
		if e != nil {
			return false, r.stepErr(int(i), e)
		}
		if n > 0 {
			if e := r.completed(int(i), n); e != nil {
				return false, e
			}
			moved = true
			continue
		}
		keep = append(keep, i)
	}
	r.pending = keep
	if r.env.Ahead {
		started, e := r.ahead()
		if e != nil {
			return false, e
		}
		moved = moved || started
	}
	return moved, nil
}

// check is made every 64th empty poll: it ends the run at ctx's end, the
// deadline or Env.Fail, and calls the stall.
func (r *run) check() error {
	if e := r.ctx.Err(); e != nil {
		return r.waitErr(e)
	}
	if r.env.Timeout > 0 || !r.env.Deadline.IsZero() || r.env.Stall != nil && !r.stalled {
		now := time.Now()
		if r.env.Deadline.IsZero() && r.env.Timeout > 0 {
			// Timeout counts from the first slow poll: a call that
			// completes quickly never reads the clock.
			r.env.Deadline = now.Add(r.env.Timeout)
		}
		if !r.env.Deadline.IsZero() && now.After(r.env.Deadline) {
			return r.waitErr(transport.ErrTimeout)
		}
		r.stall(now)
	}
	if r.env.Fail != nil {
		if e := r.env.Fail(); e != nil {
			return r.waitErr(e)
		}
	}
	return nil
}

// stall calls Env.Stall for the steps the run waits for once it has
// waited Env.StallAfter.
func (r *run) stall(now time.Time) {
	if r.env.Stall == nil || r.stalled {
		return
	}
	if r.stallAt.IsZero() {
		r.stallAt = now.Add(r.env.StallAfter)
		return
	}
	if now.Before(r.stallAt) {
		return
	}
	r.stalled = true
	recv := false
	for _, i := range r.pending {
		recv = recv || r.prog.Steps[i].Kind != sched.KindSend
	}
	for k, i := range r.pending {
		s := &r.prog.Steps[i]
		if recv && s.Kind == sched.KindSend {
			continue
		}
		first := true
		for _, j := range r.pending[:k] {
			t := &r.prog.Steps[j]
			first = first && (t.Peer != s.Peer || recv && t.Kind == sched.KindSend)
		}
		if first {
			tag := r.env.Tag
			tag.Step = uint32(s.Tag)
			r.env.Stall(int(i), s, tag)
		}
	}
}

// waitErr returns e, which ended a wait, as a StepError of the step the
// run was waiting for: its first pending receive, else its first pending
// step, else (a backend's own work, Backend.Poll's busy) its last step.
func (r *run) waitErr(e error) error {
	if len(r.pending) == 0 {
		if len(r.prog.Steps) == 0 {
			return e
		}
		return r.stepErr(len(r.prog.Steps)-1, e)
	}
	w := r.pending[0]
	for _, i := range r.pending {
		if r.prog.Steps[i].Kind != sched.KindSend {
			w = i
			break
		}
	}
	return r.stepErr(int(w), e)
}

// release withdraws the host's requests still running after a failure
// (releaseHost) and returns the run to the pool.
func (r *run) release(failed bool) {
	host := r.be == nil
	if host {
		r.releaseHost(failed)
	}
	r.ctx, r.prog, r.env, r.be = nil, nil, Env{}, nil
	if !failed || !host {
		runPool.Put(r)
	}
}

// Run executes prog for this rank over env's transports. It returns when
// every step has completed or at the first failure: a transport error,
// ctx's end, env.Fail or env.Deadline. Errors are *StepError when a step
// failed.
func Run(ctx context.Context, prog *sched.Program, env *Env, b Buffers) (err error) {
	if env.Hook != nil {
		defer func() { env.Hook(prog, err) }()
	}
	es := b.DType.Size()
	if es == 0 {
		return fmt.Errorf("exec: invalid dtype %v", b.DType)
	}
	var kernel reduce.Kernel
	for i := range prog.Steps {
		if k := prog.Steps[i].Kind; k == sched.KindReduce || k == sched.KindRecvReduce {
			if kernel, err = kernelFor(b.DType, b.Op); err != nil {
				return err
			}
			break
		}
	}
	r := get(ctx, prog, env, nil)
	n := len(prog.Steps)
	r.in, r.out, r.es, r.kernel = b.In, b.Out, es, kernel
	r.tmp = getBuf(prog.TmpLen * es)
	r.reqs = resize(r.reqs, n)
	r.stage = resize(r.stage, n)
	defer func() { r.release(err != nil) }()
	if err := r.drive(); err != nil {
		return err
	}
	if b.Op == dtype.Avg {
		for _, c := range prog.Final {
			if e := reduce.Divide(b.DType, r.slice(c), b.NRanks); e != nil {
				return e
			}
		}
	}
	return nil
}

// Drive runs prog for this rank through be: the loop of Run over another
// backend's steps (package gpu's). It returns when every step and the
// backend's own work (Backend.Poll) have completed, or at the first
// failure: a backend's error, ctx's end, env.Fail or env.Deadline,
// reported as a *StepError (rank prog.Rank, call env.Tag.Seq) naming the
// step that failed or was waited for. env.Conn is not used.
func Drive(ctx context.Context, prog *sched.Program, env *Env, be Backend) (err error) {
	if env.Hook != nil {
		defer func() { env.Hook(prog, err) }()
	}
	r := get(ctx, prog, env, be)
	defer r.release(false)
	return r.drive()
}

func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}
