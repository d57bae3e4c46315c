package exec

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
)

// Env is what the executor needs from the communicator.
type Env struct {
	// Conn returns the connection to communicator rank peer.
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
	// Deadline, if not zero, ends the run with context.DeadlineExceeded
	// when it passes (in addition to ctx's own deadline).
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

const (
	notStarted uint8 = iota
	running
	complete
)

// run is the state of one Run, pooled so that a call allocates nothing.
type run struct {
	ctx    context.Context
	prog   *sched.Program
	env    Env
	in     []byte
	out    []byte
	tmp    *[]byte
	es     int
	kernel reduce.Kernel
	bo     transport.Backoff
	polls  int

	stallAt time.Time // when Stall is due; zero before the first slow poll
	stalled bool

	status  []uint8
	reqs    []transport.Request
	stage   []*[]byte
	pending []int32
}

var runPool = sync.Pool{New: func() any { return new(run) }}

// bufPools recycle scratch and staging buffers by size class (bufClass),
// so that a request takes a buffer of about its own size: with one pool
// for every size, a small request could hold on to a huge buffer, and a
// large one, finding a small buffer, allocated anew while the small one
// went back, so that memory grew with the spread of sizes (braid tune
// reached 9 GiB).
var bufPools [4*64 + 1]sync.Pool

// bufClass returns the size class of an n-byte buffer and the size of its
// buffers: 64 bytes and below share class 0; above, each power of two is
// split in quarters (5/8, 6/8, 7/8 and 8/8 of it), so that a buffer is at
// most 25% larger than asked for.
func bufClass(n int) (class, size int) {
	if n <= 64 {
		return 0, 64
	}
	k := bits.Len(uint(n - 1)) // 2^(k-1) < n <= 2^k, k >= 7
	step := 1 << (k - 3)
	q := (n + step - 1) / step // 5..8
	return (k-7)*4 + q - 4, q * step
}

// getBuf returns a buffer of n bytes, aligned for every element type.
func getBuf(n int) *[]byte {
	if n == 0 {
		return nil
	}
	class, size := bufClass(n)
	if p, _ := bufPools[class].Get().(*[]byte); p != nil {
		*p = (*p)[:n]
		return p
	}
	w := make([]uint64, size/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), size)[:n]
	return &b
}

// putBuf returns a buffer from getBuf to its class's pool.
func putBuf(p *[]byte) {
	if p == nil {
		return
	}
	class, size := bufClass(cap(*p))
	if size != cap(*p) {
		return // not from getBuf
	}
	bufPools[class].Put(p)
}

func (r *run) slice(c sched.Chunk) []byte {
	var base []byte
	switch c.Buf {
	case sched.In:
		base = r.in
	case sched.Out:
		base = r.out
	default:
		if r.tmp != nil {
			base = *r.tmp
		}
	}
	lo, hi := c.Off*r.es, (c.Off+c.Len)*r.es
	return base[lo:hi:hi]
}

func (r *run) stepErr(i int, e error) error {
	return &StepError{Rank: r.prog.Rank, Seq: r.env.Tag.Seq, Index: i, Step: r.prog.Steps[i], Err: e}
}

// finish completes step i whose request is done.
func (r *run) finish(i int32) {
	s := &r.prog.Steps[i]
	if s.Kind == sched.KindRecvReduce {
		r.kernel(r.slice(s.Dst), *r.stage[i])
		putBuf(r.stage[i])
		r.stage[i] = nil
	}
	r.status[i] = complete
	r.reqs[i] = nil
}

// progress tests every outstanding request once; it backs off when
// nothing moved.
func (r *run) progress() error {
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
		r.bo.Reset()
		// Progress re-arms the stall: a run that stalled on a slow peer
		// which then moved probes the next peer it waits StallAfter for
		// (the timeout hold learns whether that one waits too).
		r.stalled, r.stallAt = false, time.Time{}
		return nil
	}
	r.polls++
	if r.polls&63 == 0 {
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
				return r.waitErr(context.DeadlineExceeded)
			}
			r.stall(now)
		}
		if r.env.Fail != nil {
			if e := r.env.Fail(); e != nil {
				return r.waitErr(e)
			}
		}
	}
	var ch <-chan struct{}
	if len(r.pending) > 0 {
		ch = r.reqs[r.pending[0]].Done()
	}
	r.bo.Idle(ch)
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
// step. It returns e itself if nothing is pending.
func (r *run) waitErr(e error) error {
	if len(r.pending) == 0 {
		return e
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

// release withdraws the requests still running after a failure (see
// transport.Canceler), so that no transport writes into the caller's
// buffers once Run has returned, and returns the run's memory to the
// pools. A staging buffer of a failed run is left to the garbage
// collector, in case its transport could not withdraw its request.
func (r *run) release(failed bool) {
	if failed {
		for i, st := range r.status {
			if st == running && r.reqs[i] != nil {
				transport.Cancel(r.reqs[i])
			}
		}
	}
	for i := range r.stage {
		if !failed {
			putBuf(r.stage[i])
		}
		r.stage[i] = nil
		r.reqs[i] = nil
	}
	if !failed {
		putBuf(r.tmp)
	}
	r.tmp, r.ctx, r.prog, r.env, r.in, r.out, r.kernel = nil, nil, nil, Env{}, nil, nil, nil
	if !failed {
		runPool.Put(r)
	}
}

// Run executes prog for this rank. It returns when every step has completed
// or at the first failure: a transport error, ctx's end, env.Fail or
// env.Deadline. Errors are *StepError when a step failed.
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
	n := len(prog.Steps)
	r := runPool.Get().(*run)
	r.ctx, r.prog, r.env, r.in, r.out, r.es, r.kernel = ctx, prog, *env, b.In, b.Out, es, kernel
	r.tmp = getBuf(prog.TmpLen * es)
	r.bo = transport.Backoff{Spin: env.Spin}
	r.polls = 0
	r.stallAt, r.stalled = time.Time{}, false
	r.status = resize(r.status, n)
	r.reqs = resize(r.reqs, n)
	r.stage = resize(r.stage, n)
	r.pending = r.pending[:0]
	for i := range r.status {
		r.status[i] = notStarted
	}
	defer func() { r.release(err != nil) }()

	tag := env.Tag
	for i := range prog.Steps {
		s := &prog.Steps[i]
		for _, d := range s.Deps {
			for r.status[d] != complete {
				if e := r.progress(); e != nil {
					return e
				}
			}
		}
		switch s.Kind {
		case sched.KindCopy:
			src, dst := r.slice(s.Src), r.slice(s.Dst)
			if len(dst) > 0 && &src[0] != &dst[0] {
				copy(dst, src)
			}
			r.status[i] = complete
			continue
		case sched.KindReduce:
			kernel(r.slice(s.Dst), r.slice(s.Src))
			r.status[i] = complete
			continue
		}
		c := env.Conn(s.Peer)
		if c == nil {
			return r.stepErr(i, fmt.Errorf("no connection to rank %d", s.Peer))
		}
		tag.Step = uint32(s.Tag)
		var req transport.Request
		var e error
		switch s.Kind {
		case sched.KindSend:
			req, e = c.Isend(tag, r.slice(s.Src))
		case sched.KindRecv:
			req, e = c.Irecv(tag, r.slice(s.Dst))
		case sched.KindRecvReduce:
			r.stage[i] = getBuf(s.Dst.Len * es)
			req, e = c.Irecv(tag, *r.stage[i])
		default:
			e = fmt.Errorf("unknown step kind %v", s.Kind)
		}
		if e != nil {
			return r.stepErr(i, e)
		}
		r.reqs[i] = req
		r.status[i] = running
		// Complete at once what can be: saves a trip through progress.
		done, e := req.Test()
		if e != nil {
			return r.stepErr(i, e)
		}
		if done {
			r.finish(int32(i))
			continue
		}
		r.pending = append(r.pending, int32(i))
	}
	for len(r.pending) > 0 {
		if e := r.progress(); e != nil {
			return e
		}
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

// kernels caches reduce.For per (dtype, op).
var kernels = func() (k [32][16]reduce.Kernel) {
	for _, d := range dtype.All() {
		for _, o := range dtype.AllOps() {
			k[d][o], _ = reduce.For(d, o)
		}
	}
	return k
}()

func kernelFor(d dtype.DType, o dtype.Op) (reduce.Kernel, error) {
	if int(d) < len(kernels) && int(o) < len(kernels[0]) && kernels[d][o] != nil {
		return kernels[d][o], nil
	}
	return reduce.For(d, o)
}

func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}
