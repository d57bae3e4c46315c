// Package exec runs one rank's schedule program over transports. It is the
// single point every collective passes through: it issues the program's
// steps in order, lets sends and receives complete out of order, combines
// received data with the host reduction kernels, and waits the Braid way
// (spin, yield, block) without ever waiting forever.
//
// Example:
//
//	err := exec.Run(ctx, &prog, &exec.Env{Conn: conns, Tag: base, Fail: comm.failed},
//		exec.Buffers{In: in, Out: out, DType: dtype.Float32, Op: dtype.Sum, NRanks: n})
package exec

import (
	"context"
	"fmt"
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
	// Hook, if not nil, is called once at the end of the run.
	Hook func(prog *sched.Program, err error)
}

// Buffers are the memory and element type of one call.
type Buffers struct {
	In, Out []byte
	DType   dtype.DType
	Op      dtype.Op // ignored by collectives that do not reduce
	NRanks  int      // divisor for Op avg
}

// StepError reports the step at which a run failed.
type StepError struct {
	Rank  int
	Index int
	Step  sched.Step
	Err   error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("rank %d, step %d (%v): %v", e.Rank, e.Index, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

const (
	notStarted uint8 = iota
	running
	complete
)

type state struct {
	status  []uint8
	reqs    []transport.Request
	stage   [][]byte
	pending []int32
}

var statePool = sync.Pool{New: func() any { return new(state) }}

// tmpPool recycles scratch and staging buffers.
var tmpPool sync.Pool

func getBuf(n int) []byte {
	if n == 0 {
		return nil
	}
	if p, _ := tmpPool.Get().(*[]byte); p != nil && cap(*p) >= n {
		return (*p)[:n]
	}
	// Allocate as uint64 so every element type is aligned.
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

func putBuf(b []byte) {
	if cap(b) == 0 {
		return
	}
	tmpPool.Put(&b)
}

// Run executes prog for this rank. It returns when every step has completed
// or at the first failure: a transport error, ctx's end, or env.Fail.
// Errors are *StepError when a step failed.
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
			if kernel, err = reduce.For(b.DType, b.Op); err != nil {
				return err
			}
			break
		}
	}
	tmp := getBuf(prog.TmpLen * es)
	defer func() {
		// After a failure a transport may still write into scratch it was
		// given; leave such memory to the garbage collector.
		if err == nil {
			putBuf(tmp)
		}
	}()

	slice := func(c sched.Chunk) []byte {
		var base []byte
		switch c.Buf {
		case sched.In:
			base = b.In
		case sched.Out:
			base = b.Out
		default:
			base = tmp
		}
		return base[c.Off*es : (c.Off+c.Len)*es : (c.Off+c.Len)*es]
	}

	n := len(prog.Steps)
	st := statePool.Get().(*state)
	defer func() {
		for i := range st.stage {
			st.stage[i] = nil
			st.reqs[i] = nil
		}
		if err == nil {
			statePool.Put(st)
		}
	}()
	st.status = resize(st.status, n)
	st.reqs = resize(st.reqs, n)
	st.stage = resize(st.stage, n)
	st.pending = st.pending[:0]
	for i := range st.status {
		st.status[i] = notStarted
	}

	stepErr := func(i int, e error) error {
		return &StepError{Rank: prog.Rank, Index: i, Step: prog.Steps[i], Err: e}
	}

	// finish completes step i whose request is done.
	finish := func(i int32) {
		s := &prog.Steps[i]
		if s.Kind == sched.KindRecvReduce {
			kernel(slice(s.Dst), st.stage[i])
			putBuf(st.stage[i])
			st.stage[i] = nil
		}
		st.status[i] = complete
		st.reqs[i] = nil
	}

	bo := transport.Backoff{Spin: env.Spin}
	polls := 0
	// progress tests every outstanding request once; it backs off when
	// nothing moved.
	progress := func() error {
		moved := false
		keep := st.pending[:0]
		for _, i := range st.pending {
			done, e := st.reqs[i].Test()
			if e != nil {
				return stepErr(int(i), e)
			}
			if done {
				finish(i)
				moved = true
				continue
			}
			keep = append(keep, i)
		}
		st.pending = keep
		if moved {
			bo.Reset()
			return nil
		}
		polls++
		if polls&63 == 0 {
			if e := ctx.Err(); e != nil {
				return e
			}
			if !env.Deadline.IsZero() && time.Now().After(env.Deadline) {
				return context.DeadlineExceeded
			}
			if env.Fail != nil {
				if e := env.Fail(); e != nil {
					return e
				}
			}
		}
		var ch <-chan struct{}
		if len(st.pending) > 0 {
			ch = st.reqs[st.pending[0]].Done()
		}
		bo.Idle(ch)
		return nil
	}

	tag := env.Tag
	for i := range prog.Steps {
		s := &prog.Steps[i]
		for _, d := range s.Deps {
			for st.status[d] != complete {
				if e := progress(); e != nil {
					return e
				}
			}
		}
		switch s.Kind {
		case sched.KindCopy:
			src, dst := slice(s.Src), slice(s.Dst)
			if len(dst) > 0 && &src[0] != &dst[0] {
				copy(dst, src)
			}
			st.status[i] = complete
			continue
		case sched.KindReduce:
			kernel(slice(s.Dst), slice(s.Src))
			st.status[i] = complete
			continue
		}
		c := env.Conn(s.Peer)
		if c == nil {
			return stepErr(i, fmt.Errorf("no connection to rank %d", s.Peer))
		}
		tag.Step = uint32(s.Tag)
		var req transport.Request
		var e error
		switch s.Kind {
		case sched.KindSend:
			req, e = c.Isend(tag, slice(s.Src))
		case sched.KindRecv:
			req, e = c.Irecv(tag, slice(s.Dst))
		case sched.KindRecvReduce:
			st.stage[i] = getBuf(s.Dst.Len * es)
			req, e = c.Irecv(tag, st.stage[i])
		default:
			e = fmt.Errorf("unknown step kind %v", s.Kind)
		}
		if e != nil {
			return stepErr(i, e)
		}
		st.reqs[i] = req
		st.status[i] = running
		// Complete at once what can be: saves a trip through progress.
		done, e := req.Test()
		if e != nil {
			return stepErr(i, e)
		}
		if done {
			finish(int32(i))
			continue
		}
		st.pending = append(st.pending, int32(i))
	}
	for len(st.pending) > 0 {
		if e := progress(); e != nil {
			return e
		}
	}
	if b.Op == dtype.Avg {
		for _, c := range prog.Final {
			if e := reduce.Divide(b.DType, slice(c), b.NRanks); e != nil {
				return e
			}
		}
	}
	return nil
}

func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}
