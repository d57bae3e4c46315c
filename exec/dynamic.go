package exec

import (
	"context"
	"fmt"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
)

// RunDynamic runs rank's part of a dynamic algorithm (sched.Dynamic) for
// p: the algorithm calls the executor's primitives (sched.Exec) as it
// decides, and RunDynamic gives them the same environment as Run gives a
// program's steps: env's connections and tag, its timeout, deadline and
// failure checks, and StepError on failure, whose Step is the request
// that failed or was waited for (Index: the request's handle). For Op avg
// it divides the output once the algorithm returns.
func RunDynamic(ctx context.Context, d sched.Dynamic, p sched.Params, rank int, env *Env, b Buffers) (err error) {
	es := b.DType.Size()
	if es == 0 {
		return fmt.Errorf("exec: invalid dtype %v", b.DType)
	}
	x := &dynExec{ctx: ctx, env: *env, rank: rank, in: b.In, out: b.Out, es: es, bo: transport.Backoff{Spin: env.Spin}}
	if p.Coll.Reduces() {
		if x.kernel, err = kernelFor(b.DType, b.Op); err != nil {
			return err
		}
	}
	x.tmp = getBuf(d.TmpLen(p, rank) * es)
	defer func() { x.release(err != nil) }()
	if err := d.Run(p, rank, x); err != nil {
		return err
	}
	if x.err != nil {
		return x.err
	}
	// Every request must have completed: one the algorithm left behind
	// would write into memory the caller owns again.
	for h := range x.reqs {
		if err := x.Wait(sched.Handle(h)); err != nil {
			return err
		}
	}
	if b.Op == dtype.Avg && (p.Coll != sched.Reduce || rank == p.Root) {
		if err := reduce.Divide(b.DType, b.Out[:p.OutLen(rank)*es], b.NRanks); err != nil {
			return err
		}
	}
	return nil
}

// dynExec is the sched.Exec of one RunDynamic.
type dynExec struct {
	ctx    context.Context
	env    Env
	rank   int
	in     []byte
	out    []byte
	tmp    *[]byte
	es     int
	kernel reduce.Kernel
	red    reduceTask // scratch of reduceInto
	bo     transport.Backoff
	polls  int
	reqs   []dynReq
	err    error // the first failure; every later call returns it

	stallAt time.Time // when Env.Stall is due; zero before the first slow poll
	stalled bool
}

// dynReq is one request.
type dynReq struct {
	step  sched.Step // what it does, for the reduction and for errors
	req   transport.Request
	stage *[]byte // RecvReduce's staging buffer, or a word's
	done  bool
	err   error
	word  uint64
}

func (x *dynExec) slice(c sched.Chunk) []byte {
	var base []byte
	switch c.Buf {
	case sched.In:
		base = x.in
	case sched.Out:
		base = x.out
	default:
		if x.tmp != nil {
			base = *x.tmp
		}
	}
	lo, hi := c.Off*x.es, (c.Off+c.Len)*x.es
	return base[lo:hi:hi]
}

// start begins a request of step s on buf.
func (x *dynExec) start(s sched.Step, buf []byte, stage *[]byte) sched.Handle {
	h := sched.Handle(len(x.reqs))
	x.reqs = append(x.reqs, dynReq{step: s, stage: stage})
	r := &x.reqs[h]
	if x.err != nil {
		r.done, r.err = true, x.err
		return h
	}
	c := x.env.Conn(s.Peer)
	if c == nil {
		r.done, r.err = true, x.fail(h, fmt.Errorf("no connection to rank %d", s.Peer))
		return h
	}
	tag := x.env.Tag
	tag.Step = uint32(s.Tag)
	var e error
	if s.Kind == sched.KindSend {
		r.req, e = c.Isend(tag, buf)
	} else {
		r.req, e = c.Irecv(tag, buf)
	}
	if e != nil {
		r.done, r.err = true, x.fail(h, e)
	}
	return h
}

// fail records the first failure, as a StepError of request h.
func (x *dynExec) fail(h sched.Handle, e error) error {
	if x.err == nil {
		x.err = &StepError{Rank: x.rank, Seq: x.env.Tag.Seq, Index: int(h), Step: x.reqs[h].step, Err: e}
	}
	return x.err
}

func (x *dynExec) Send(peer int, tag int32, src sched.Chunk) sched.Handle {
	return x.start(sched.Step{Kind: sched.KindSend, Peer: peer, Tag: tag, Src: src}, x.slice(src), nil)
}

func (x *dynExec) Recv(peer int, tag int32, dst sched.Chunk) sched.Handle {
	return x.start(sched.Step{Kind: sched.KindRecv, Peer: peer, Tag: tag, Dst: dst}, x.slice(dst), nil)
}

func (x *dynExec) RecvReduce(peer int, tag int32, dst sched.Chunk) sched.Handle {
	st := getBuf(dst.Len * x.es)
	var b []byte
	if st != nil {
		b = *st
	}
	return x.start(sched.Step{Kind: sched.KindRecvReduce, Peer: peer, Tag: tag, Dst: dst}, b, st)
}

func (x *dynExec) SendWord(peer int, tag int32, v uint64) sched.Handle {
	st := getBuf(8)
	putWord(*st, v)
	return x.start(sched.Step{Kind: sched.KindSend, Peer: peer, Tag: tag}, *st, st)
}

func (x *dynExec) RecvWord(peer int, tag int32) sched.Handle {
	st := getBuf(8)
	return x.start(sched.Step{Kind: sched.KindRecv, Peer: peer, Tag: tag}, *st, st)
}

func (x *dynExec) Word(h sched.Handle) uint64 { return x.reqs[h].word }

func putWord(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func getWord(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// test completes request h if its transfer is done.
func (x *dynExec) test(h sched.Handle) (bool, error) {
	r := &x.reqs[h]
	if r.done {
		return true, r.err
	}
	done, e := r.req.Test()
	if e != nil {
		r.done, r.err = true, x.fail(h, e)
		return true, r.err
	}
	if !done {
		return false, nil
	}
	r.done, r.req = true, nil
	s := &r.step
	switch {
	case s.Kind == sched.KindRecvReduce:
		if r.stage != nil {
			reduceInto(&x.red, x.kernel, x.es, x.slice(s.Dst), *r.stage)
			putBuf(r.stage)
			r.stage = nil
		}
	case r.stage != nil: // a word
		if s.Kind == sched.KindRecv {
			r.word = getWord(*r.stage)
		}
		putBuf(r.stage)
		r.stage = nil
	}
	return true, nil
}

func (x *dynExec) Test(h sched.Handle) (bool, error) { return x.test(h) }

func (x *dynExec) Wait(h sched.Handle) error {
	_, err := x.WaitAny([]sched.Handle{h})
	return err
}

func (x *dynExec) WaitAny(hs []sched.Handle) (int, error) {
	for {
		for i, h := range hs {
			if done, err := x.test(h); done {
				if err == nil {
					x.bo.Reset()
					x.polls = 0
					// Progress re-arms the stall, as in Run.
					x.stalled, x.stallAt = false, time.Time{}
				}
				return i, err
			}
		}
		if err := x.idle(hs); err != nil {
			return -1, err
		}
	}
}

// idle is one empty poll of a wait for hs: it checks the context, the
// deadline and env.Fail now and then, and backs off.
func (x *dynExec) idle(hs []sched.Handle) error {
	x.polls++
	if x.polls&63 == 0 {
		var e error
		if e = x.ctx.Err(); e == nil && (x.env.Timeout > 0 || !x.env.Deadline.IsZero()) {
			now := time.Now()
			if x.env.Deadline.IsZero() {
				x.env.Deadline = now.Add(x.env.Timeout)
			}
			if now.After(x.env.Deadline) {
				e = transport.ErrTimeout
			}
		}
		if e == nil && x.env.Fail != nil {
			e = x.env.Fail()
		}
		if e == nil && x.env.Stall != nil && !x.stalled {
			x.stall(hs)
		}
		if e != nil {
			// Name the first receive waited for, else the first request.
			w := hs[0]
			for _, h := range hs {
				if x.reqs[h].step.Kind != sched.KindSend {
					w = h
					break
				}
			}
			return x.fail(w, e)
		}
	}
	x.bo.Idle(x.reqs[hs[0]].req.Done())
	return nil
}

// stall calls Env.Stall, once a stall, for each peer of hs (their receives,
// else their sends) once the wait has lasted Env.StallAfter, as Run does
// for a program's pending steps.
func (x *dynExec) stall(hs []sched.Handle) {
	now := time.Now()
	if x.stallAt.IsZero() {
		x.stallAt = now.Add(x.env.StallAfter)
		return
	}
	if now.Before(x.stallAt) {
		return
	}
	x.stalled = true
	recv := false
	for _, h := range hs {
		recv = recv || x.reqs[h].step.Kind != sched.KindSend
	}
	seen := map[int]bool{}
	for _, h := range hs {
		s := &x.reqs[h].step
		if recv && s.Kind == sched.KindSend || seen[s.Peer] {
			continue
		}
		seen[s.Peer] = true
		tag := x.env.Tag
		tag.Step = uint32(s.Tag)
		x.env.Stall(int(h), s, tag)
	}
}

func (x *dynExec) Copy(src, dst sched.Chunk) {
	s, d := x.slice(src), x.slice(dst)
	if len(d) > 0 && &s[0] != &d[0] {
		copySplit(d, s)
	}
}

func (x *dynExec) Reduce(src, dst sched.Chunk) {
	reduceInto(&x.red, x.kernel, x.es, x.slice(dst), x.slice(src))
}

// release withdraws the requests that did not complete (see
// transport.Canceler), so that no transport writes into the caller's
// buffers after the run, and returns the buffers to the pools; after a
// failure a transport that cannot withdraw its requests may still write
// into staging buffers, which are left to the garbage collector.
func (x *dynExec) release(failed bool) {
	for i := range x.reqs {
		if r := &x.reqs[i]; r.req != nil && !r.done {
			transport.Cancel(r.req)
		}
	}
	if failed {
		return
	}
	for i := range x.reqs {
		putBuf(x.reqs[i].stage)
	}
	putBuf(x.tmp)
}
