package exec_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/inproc"
)

// hang bounds every wait of these tests: a run that has not returned by
// then is a hang, not a slow machine.
const hang = 20 * time.Second

var baseTag = transport.Tag{Comm: 7, Seq: 1, Sig: 0xabc}

func f32(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func floats(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func envFor(m *inproc.Mesh) *exec.Env {
	return &exec.Env{
		Conn: func(peer int) transport.Conn { return m.Conn(peer) },
		Tag:  baseTag,
	}
}

// runAll runs progs[r] on rank r of a fresh inproc world, each rank in its
// own goroutine (after delay[r], if given), and returns every rank's error.
func runAll(t *testing.T, progs []sched.Program, bufs []exec.Buffers, delay []time.Duration) []error {
	t.Helper()
	n := len(progs)
	meshes := inproc.NewWorld(n, nil)
	t.Cleanup(func() {
		for _, m := range meshes {
			m.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if delay != nil {
				time.Sleep(delay[r])
			}
			errs[r] = exec.Run(ctx, &progs[r], envFor(meshes[r]), bufs[r])
		}()
	}
	wg.Wait()
	return errs
}

// exchange is the 2-rank allreduce: copy In to Out, send In to the peer,
// add the peer's In into Out.
func exchange(r int) sched.Program {
	b := sched.NewBuilder(r)
	in, out := sched.Chunk{Buf: sched.In, Len: 4}, sched.Chunk{Buf: sched.Out, Len: 4}
	cp := b.Copy(in, out)
	b.Send(1-r, 0, in)
	b.RecvReduce(1-r, 0, out, cp)
	b.P.Final = []sched.Chunk{out}
	return b.P
}

func TestExchangeRecvReduce(t *testing.T) {
	progs := []sched.Program{exchange(0), exchange(1)}
	bufs := []exec.Buffers{
		{In: f32(1, 2, 3, 4), Out: make([]byte, 16), DType: dtype.Float32, Op: dtype.Sum, NRanks: 2},
		{In: f32(10, 20, 30, 40), Out: make([]byte, 16), DType: dtype.Float32, Op: dtype.Sum, NRanks: 2},
	}
	for r, err := range runAll(t, progs, bufs, nil) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	want := []float32{11, 22, 33, 44}
	for r := range 2 {
		if got := floats(bufs[r].Out); !equal(got, want) {
			t.Errorf("rank %d: out %v, want %v", r, got, want)
		}
	}
	if got := floats(bufs[0].In); !equal(got, []float32{1, 2, 3, 4}) {
		t.Errorf("rank 0: input changed to %v", got)
	}
}

func TestMaxOpAndLocalReduce(t *testing.T) {
	// Rank 0 receives rank 1's vector into Tmp and combines it into Out
	// with a local Reduce step; rank 1 only sends.
	b := sched.NewBuilder(0)
	in, out, tmp := sched.Chunk{Buf: sched.In, Len: 3}, sched.Chunk{Buf: sched.Out, Len: 3}, sched.Chunk{Buf: sched.Tmp, Len: 3}
	cp := b.Copy(in, out)
	rv := b.Recv(1, 5, tmp)
	b.Reduce(tmp, out, cp, rv)
	b.P.TmpLen = 3
	s := sched.NewBuilder(1)
	s.Send(0, 5, in)
	progs := []sched.Program{b.P, s.P}
	bufs := []exec.Buffers{
		{In: f32(1, 9, 3), Out: make([]byte, 12), DType: dtype.Float32, Op: dtype.Max, NRanks: 2},
		{In: f32(4, 2, 6), DType: dtype.Float32, Op: dtype.Max, NRanks: 2},
	}
	for r, err := range runAll(t, progs, bufs, nil) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if got, want := floats(bufs[0].Out), []float32{4, 9, 6}; !equal(got, want) {
		t.Errorf("out %v, want %v", got, want)
	}
}

func TestDepsOrdering(t *testing.T) {
	// Rank 0 receives into Tmp, copies Tmp to Out only after the receive
	// (Deps), and sends Out back only after the copy. Rank 1 starts late,
	// so a copy that ignored its Deps would copy zeros.
	r0 := sched.NewBuilder(0)
	tmp, out := sched.Chunk{Buf: sched.Tmp, Len: 4}, sched.Chunk{Buf: sched.Out, Len: 4}
	rv := r0.Recv(1, 0, tmp)
	cp := r0.Copy(tmp, out, rv)
	r0.Send(1, 1, out, cp)
	r0.P.TmpLen = 4

	r1 := sched.NewBuilder(1)
	r1.Send(0, 0, sched.Chunk{Buf: sched.In, Len: 4})
	r1.Recv(0, 1, sched.Chunk{Buf: sched.Out, Len: 4})

	progs := []sched.Program{r0.P, r1.P}
	bufs := []exec.Buffers{
		{Out: make([]byte, 16), DType: dtype.Float32, NRanks: 2},
		{In: f32(5, 6, 7, 8), Out: make([]byte, 16), DType: dtype.Float32, NRanks: 2},
	}
	errs := runAll(t, progs, bufs, []time.Duration{0, 30 * time.Millisecond})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	want := []float32{5, 6, 7, 8}
	for r := range 2 {
		if got := floats(bufs[r].Out); !equal(got, want) {
			t.Errorf("rank %d: out %v, want %v", r, got, want)
		}
	}
}

func TestInPlaceCopySkipped(t *testing.T) {
	// In and Out are the same memory: the leading Copy In -> Out is a no-op
	// and the exchange still gives the sum.
	progs := []sched.Program{exchange(0), exchange(1)}
	b0, b1 := f32(1, 2, 3, 4), f32(5, 6, 7, 8)
	bufs := []exec.Buffers{
		{In: b0, Out: b0, DType: dtype.Float32, Op: dtype.Sum, NRanks: 2},
		{In: b1, Out: b1, DType: dtype.Float32, Op: dtype.Sum, NRanks: 2},
	}
	for r, err := range runAll(t, progs, bufs, nil) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	want := []float32{6, 8, 10, 12}
	for r, b := range [][]byte{b0, b1} {
		if got := floats(b); !equal(got, want) {
			t.Errorf("rank %d: %v, want %v", r, got, want)
		}
	}
}

func TestCopyEdgeCases(t *testing.T) {
	// A Copy of a chunk onto itself leaves it alone; a zero-length Copy
	// of nil buffers does nothing; a plain Copy copies.
	b := sched.NewBuilder(0)
	b.Copy(sched.Chunk{Buf: sched.Out, Off: 1, Len: 2}, sched.Chunk{Buf: sched.Out, Off: 1, Len: 2})
	b.Copy(sched.Chunk{Buf: sched.In}, sched.Chunk{Buf: sched.Tmp})
	b.Copy(sched.Chunk{Buf: sched.In, Off: 2, Len: 1}, sched.Chunk{Buf: sched.Out, Off: 0, Len: 1})
	out := f32(1, 2, 3, 4)
	err := exec.Run(context.Background(), &b.P, &exec.Env{}, exec.Buffers{
		In: f32(7, 8, 9), Out: out, DType: dtype.Float32, NRanks: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := floats(out), []float32{9, 2, 3, 4}; !equal(got, want) {
		t.Errorf("out %v, want %v", got, want)
	}
	// An empty program on nil buffers succeeds.
	if err := exec.Run(context.Background(), &sched.Program{}, &exec.Env{}, exec.Buffers{DType: dtype.Int8}); err != nil {
		t.Errorf("empty program: %v", err)
	}
}

func TestAvgDividesFinal(t *testing.T) {
	// Final names only Out[0:2]: those are divided by NRanks, Out[2:4]
	// keeps the sum.
	progs := []sched.Program{exchange(0), exchange(1)}
	for r := range progs {
		progs[r].Final = []sched.Chunk{{Buf: sched.Out, Off: 0, Len: 2}}
	}
	bufs := []exec.Buffers{
		{In: f32(1, 2, 3, 4), Out: make([]byte, 16), DType: dtype.Float32, Op: dtype.Avg, NRanks: 2},
		{In: f32(3, 6, 9, 12), Out: make([]byte, 16), DType: dtype.Float32, Op: dtype.Avg, NRanks: 2},
	}
	for r, err := range runAll(t, progs, bufs, nil) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	want := []float32{2, 4, 12, 16}
	for r := range 2 {
		if got := floats(bufs[r].Out); !equal(got, want) {
			t.Errorf("rank %d: out %v, want %v", r, got, want)
		}
	}

	// NRanks is the divisor, whatever the program did: a lone rank with
	// NRanks 4 divides its copy by 4.
	b := sched.NewBuilder(0)
	b.Copy(sched.Chunk{Buf: sched.In, Len: 2}, sched.Chunk{Buf: sched.Out, Len: 2})
	b.P.Final = []sched.Chunk{{Buf: sched.Out, Len: 2}}
	out := make([]byte, 8)
	if err := exec.Run(context.Background(), &b.P, &exec.Env{}, exec.Buffers{In: f32(8, 2), Out: out, DType: dtype.Float32, Op: dtype.Avg, NRanks: 4}); err != nil {
		t.Fatal(err)
	}
	if got, want := floats(out), []float32{2, 0.5}; !equal(got, want) {
		t.Errorf("lone rank: out %v, want %v", got, want)
	}
	// Sum does not divide.
	out = make([]byte, 8)
	if err := exec.Run(context.Background(), &b.P, &exec.Env{}, exec.Buffers{In: f32(8, 2), Out: out, DType: dtype.Float32, Op: dtype.Sum, NRanks: 4}); err != nil {
		t.Fatal(err)
	}
	if got, want := floats(out), []float32{8, 2}; !equal(got, want) {
		t.Errorf("sum: out %v, want %v", got, want)
	}
}

func TestStepErrorMismatch(t *testing.T) {
	// Rank 0 sends 4 elements; rank 1 expects 3 at its step 1.
	s := sched.NewBuilder(0)
	s.Send(1, 3, sched.Chunk{Buf: sched.In, Len: 4})
	rv := sched.NewBuilder(1)
	rv.Copy(sched.Chunk{Buf: sched.In, Len: 3}, sched.Chunk{Buf: sched.Out, Len: 3})
	rv.Recv(0, 3, sched.Chunk{Buf: sched.Out, Len: 3})
	progs := []sched.Program{s.P, rv.P}
	bufs := []exec.Buffers{
		{In: f32(1, 2, 3, 4), DType: dtype.Float32, NRanks: 2},
		{In: f32(1, 2, 3), Out: make([]byte, 12), DType: dtype.Float32, NRanks: 2},
	}
	errs := runAll(t, progs, bufs, nil)
	err := errs[1]
	if err == nil {
		t.Fatal("receiver: no error for a message of the wrong length")
	}
	var se *exec.StepError
	if !errors.As(err, &se) {
		t.Fatalf("receiver: %T %v is not a *exec.StepError", err, err)
	}
	if se.Rank != 1 || se.Index != 1 || se.Step.Kind != sched.KindRecv || se.Step.Peer != 0 {
		t.Errorf("StepError %+v: want rank 1, step 1, a recv from rank 0", se)
	}
	if !errors.Is(err, transport.ErrMismatch) {
		t.Errorf("%v does not wrap transport.ErrMismatch", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "rank 1") || !strings.Contains(msg, "step 1") {
		t.Errorf("message %q does not name the rank and step", msg)
	}
}

func TestStepErrorNoConn(t *testing.T) {
	b := sched.NewBuilder(2)
	b.Copy(sched.Chunk{Buf: sched.In, Len: 1}, sched.Chunk{Buf: sched.Out, Len: 1})
	b.Send(5, 0, sched.Chunk{Buf: sched.In, Len: 1})
	env := &exec.Env{Conn: func(int) transport.Conn { return nil }}
	err := exec.Run(context.Background(), &b.P, env, exec.Buffers{In: f32(1), Out: f32(0), DType: dtype.Float32})
	var se *exec.StepError
	if !errors.As(err, &se) || se.Rank != 2 || se.Index != 1 {
		t.Fatalf("got %v, want a StepError at rank 2 step 1", err)
	}
	if !strings.Contains(err.Error(), "rank 5") {
		t.Errorf("%q does not name the missing peer", err)
	}
}

func TestUnknownStepKind(t *testing.T) {
	m := inproc.NewWorld(2, nil)
	defer m[0].Close()
	defer m[1].Close()
	prog := sched.Program{Steps: []sched.Step{{Kind: sched.Kind(99), Peer: 1}}}
	err := exec.Run(context.Background(), &prog, envFor(m[0]), exec.Buffers{DType: dtype.Float32})
	var se *exec.StepError
	if !errors.As(err, &se) || se.Index != 0 {
		t.Fatalf("got %v, want a StepError at step 0", err)
	}
}

// waitForever is a rank-0 program whose receive nothing will match.
func waitForever() sched.Program {
	b := sched.NewBuilder(0)
	b.Recv(1, 0, sched.Chunk{Buf: sched.Out, Len: 1})
	return b.P
}

// runStuck runs waitForever with env changed by mod and returns its error,
// failing the test if it does not return.
func runStuck(t *testing.T, ctx context.Context, mod func(*exec.Env)) error {
	t.Helper()
	meshes := inproc.NewWorld(2, nil)
	defer meshes[0].Close()
	defer meshes[1].Close()
	env := envFor(meshes[0])
	mod(env)
	prog := waitForever()
	done := make(chan error, 1)
	go func() {
		done <- exec.Run(ctx, &prog, env, exec.Buffers{Out: make([]byte, 4), DType: dtype.Float32})
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(hang):
		t.Fatal("Run did not return")
		return nil
	}
}

func TestCancelStopsRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	err := runStuck(t, ctx, func(*exec.Env) {})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestCtxDeadlineStopsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := runStuck(t, ctx, func(*exec.Env) {})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
}

func TestFailStopsRun(t *testing.T) {
	boom := errors.New("peer 3 lost")
	var failed atomic.Bool
	time.AfterFunc(20*time.Millisecond, func() { failed.Store(true) })
	err := runStuck(t, context.Background(), func(e *exec.Env) {
		e.Fail = func() error {
			if failed.Load() {
				return boom
			}
			return nil
		}
	})
	if !errors.Is(err, boom) {
		t.Errorf("got %v, want the Fail error", err)
	}
}

func TestEnvDeadlineStopsRun(t *testing.T) {
	err := runStuck(t, context.Background(), func(e *exec.Env) {
		e.Deadline = time.Now().Add(20 * time.Millisecond)
		e.Spin = 10 * time.Microsecond
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
}

func TestAbortStopsRun(t *testing.T) {
	// The peer aborting fails the pending receive with a StepError that
	// wraps ErrAborted.
	meshes := inproc.NewWorld(2, nil)
	defer meshes[0].Close()
	time.AfterFunc(20*time.Millisecond, func() { meshes[1].Abort(errors.New("bye")) })
	prog := waitForever()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	err := exec.Run(ctx, &prog, envFor(meshes[0]), exec.Buffers{Out: make([]byte, 4), DType: dtype.Float32})
	var se *exec.StepError
	if !errors.As(err, &se) || !errors.Is(err, transport.ErrAborted) {
		t.Errorf("got %v, want a StepError wrapping ErrAborted", err)
	}
}

func TestInvalidDType(t *testing.T) {
	prog := exchange(0)
	for _, d := range []dtype.DType{dtype.Invalid, dtype.DType(200)} {
		var hooked error
		calls := 0
		env := &exec.Env{Hook: func(p *sched.Program, err error) { calls++; hooked = err }}
		err := exec.Run(context.Background(), &prog, env, exec.Buffers{In: make([]byte, 16), Out: make([]byte, 16), DType: d})
		if err == nil || !strings.Contains(err.Error(), "dtype") {
			t.Errorf("dtype %v: got %v, want an invalid dtype error", d, err)
		}
		if calls != 1 || hooked != err {
			t.Errorf("dtype %v: hook called %d times with %v", d, calls, hooked)
		}
	}
}

func TestInvalidOp(t *testing.T) {
	// A program that reduces needs an op defined on the dtype; one that
	// does not reduce ignores the op.
	b := sched.NewBuilder(0)
	b.Reduce(sched.Chunk{Buf: sched.In, Len: 1}, sched.Chunk{Buf: sched.Out, Len: 1})
	bufs := exec.Buffers{In: f32(1), Out: f32(2), DType: dtype.Float32, Op: dtype.BXor}
	if err := exec.Run(context.Background(), &b.P, &exec.Env{}, bufs); err == nil {
		t.Error("bxor on float32: no error")
	}
	c := sched.NewBuilder(0)
	c.Copy(sched.Chunk{Buf: sched.In, Len: 1}, sched.Chunk{Buf: sched.Out, Len: 1})
	if err := exec.Run(context.Background(), &c.P, &exec.Env{}, bufs); err != nil {
		t.Errorf("copy with an unused bad op: %v", err)
	}
}

func TestHookOnSuccess(t *testing.T) {
	b := sched.NewBuilder(0)
	b.Copy(sched.Chunk{Buf: sched.In, Len: 1}, sched.Chunk{Buf: sched.Out, Len: 1})
	var got *sched.Program
	calls := 0
	env := &exec.Env{Hook: func(p *sched.Program, err error) {
		calls++
		got = p
		if err != nil {
			t.Errorf("hook: %v", err)
		}
	}}
	if err := exec.Run(context.Background(), &b.P, env, exec.Buffers{In: f32(1), Out: f32(0), DType: dtype.Float32}); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || got != &b.P {
		t.Errorf("hook called %d times with %p, want once with %p", calls, got, &b.P)
	}
}

func TestPrefixChain(t *testing.T) {
	// A prefix sum along a chain of 5 ranks: each rank adds the running sum
	// of the ranks before it to its input and passes it on, so rank r ends
	// with the sum over ranks 0..r. Exercises tags, deps and pending
	// requests across several peers, and (over three rounds) reuse of the
	// executor's pooled state.
	const n = 5
	progs := make([]sched.Program, n)
	for r := range n {
		b := sched.NewBuilder(r)
		out := sched.Chunk{Buf: sched.Out, Len: 2}
		prev := b.Copy(sched.Chunk{Buf: sched.In, Len: 2}, out)
		if r > 0 {
			prev = b.RecvReduce(r-1, int32(r), out, prev)
		}
		if r < n-1 {
			b.Send(r+1, int32(r+1), out, prev)
		}
		progs[r] = b.P
	}
	for round := range 3 {
		bufs := make([]exec.Buffers, n)
		for r := range n {
			bufs[r] = exec.Buffers{In: f32(float32(r), 1), Out: make([]byte, 8), DType: dtype.Float32, Op: dtype.Sum, NRanks: n}
		}
		for r, err := range runAll(t, progs, bufs, nil) {
			if err != nil {
				t.Fatalf("round %d rank %d: %v", round, r, err)
			}
		}
		for r := range n {
			want := []float32{float32(r * (r + 1) / 2), float32(r + 1)}
			if got := floats(bufs[r].Out); !equal(got, want) {
				t.Errorf("round %d rank %d: out %v, want %v", round, r, got, want)
			}
		}
	}
}

// stuckTwo is a rank-0 program that sends to rank 2 (which takes it at
// once) and then waits for rank 1 twice: step 2 receives from rank 1,
// after a first receive from rank 1 (step 1) that nothing matches either.
func stuckTwo() sched.Program {
	b := sched.NewBuilder(0)
	b.Send(2, 0, sched.Chunk{Buf: sched.In, Len: 1})
	b.Recv(1, 0, sched.Chunk{Buf: sched.Out, Len: 1})
	b.Recv(1, 1, sched.Chunk{Buf: sched.Out, Off: 1, Len: 1})
	return b.P
}

func TestTimeoutNamesWaitedStep(t *testing.T) {
	// A run that times out says which step it waited for: its first
	// pending receive, with the call's sequence number.
	meshes := inproc.NewWorld(3, nil)
	for _, m := range meshes {
		defer m.Close()
	}
	env := envFor(meshes[0])
	env.Timeout = 20 * time.Millisecond
	prog := stuckTwo()
	err := exec.Run(context.Background(), &prog, env, exec.Buffers{In: f32(1), Out: f32(0, 0), DType: dtype.Float32})
	var se *exec.StepError
	if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a StepError wrapping context.DeadlineExceeded", err)
	}
	if se.Index != 1 || se.Step.Peer != 1 || se.Seq != baseTag.Seq {
		t.Errorf("StepError %+v: want step 1, a receive from rank 1, call %d", se, baseTag.Seq)
	}
	if msg := err.Error(); !strings.Contains(msg, "call 1, step 1") {
		t.Errorf("message %q does not name the call and step", msg)
	}
}

func TestStallNamesPeersOnce(t *testing.T) {
	// Once the run has waited StallAfter, Stall is called once per peer
	// waited for (rank 1, whose two receives are pending), with the first
	// step that waits for it and the step's tag; not for rank 2, whose
	// send completed.
	meshes := inproc.NewWorld(3, nil)
	for _, m := range meshes {
		defer m.Close()
	}
	type call struct {
		index int
		peer  int
		tag   transport.Tag
	}
	var calls []call
	env := envFor(meshes[0])
	env.Timeout = 200 * time.Millisecond
	env.StallAfter = 10 * time.Millisecond
	env.Stall = func(i int, s *sched.Step, tag transport.Tag) { calls = append(calls, call{i, s.Peer, tag}) }
	prog := stuckTwo()
	exec.Run(context.Background(), &prog, env, exec.Buffers{In: f32(1), Out: f32(0, 0), DType: dtype.Float32})
	want := baseTag
	want.Step = 0
	if len(calls) != 1 || calls[0].index != 1 || calls[0].peer != 1 || calls[0].tag != want {
		t.Errorf("Stall calls %+v, want one for step 1 (rank 1) with tag %v", calls, want)
	}
}

func TestStallRearmsAfterProgress(t *testing.T) {
	// A run that stalled on a slow peer (rank 1), which then sent, and
	// that waits next for another (rank 2, which never sends) calls Stall
	// again for rank 2: the timeout's hold must learn whether the rank it
	// now waits for waits too. Rank 1 sends only once Stall named it, so
	// the order does not depend on timing.
	meshes := inproc.NewWorld(3, nil)
	for _, m := range meshes {
		defer m.Close()
	}
	b := sched.NewBuilder(0)
	first := b.Recv(1, 0, sched.Chunk{Buf: sched.Out, Len: 1})
	b.Recv(2, 1, sched.Chunk{Buf: sched.Out, Off: 1, Len: 1}, first)
	prog := b.P
	named := make(chan int, 4)
	env := envFor(meshes[0])
	env.Timeout = 500 * time.Millisecond
	env.StallAfter = 10 * time.Millisecond
	env.Stall = func(i int, s *sched.Step, tag transport.Tag) { named <- s.Peer }
	done := make(chan error, 1)
	go func() {
		done <- exec.Run(context.Background(), &prog, env, exec.Buffers{In: f32(1), Out: f32(0, 0), DType: dtype.Float32})
	}()
	if p := <-named; p != 1 {
		t.Fatalf("first stall named rank %d, want 1", p)
	}
	sb := sched.NewBuilder(1)
	sb.Send(0, 0, sched.Chunk{Buf: sched.In, Len: 1})
	sprog := sb.P
	if err := exec.Run(context.Background(), &sprog, envFor(meshes[1]), exec.Buffers{In: f32(7), Out: f32(), DType: dtype.Float32}); err != nil {
		t.Fatalf("rank 1's send: %v", err)
	}
	select {
	case p := <-named:
		if p != 2 {
			t.Errorf("second stall named rank %d, want 2", p)
		}
	case err := <-done:
		t.Fatalf("the run ended (%v) without a stall for rank 2", err)
	}
	<-done
}
