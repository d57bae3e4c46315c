package transport_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/inproc"
)

// hang bounds every wait of these tests: past it, a call is stuck, not slow.
const hang = 20 * time.Second

// TestBackoffSpinThenBlock checks the phases with a channel: a zero Backoff
// spins SpinPolls times without touching the channel, then blocks on it.
// A buffered value on the channel shows when the backoff first selects on
// it, without any timing.
func TestBackoffSpinThenBlock(t *testing.T) {
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	var b transport.Backoff
	for i := range transport.SpinPolls {
		if b.Spun() {
			t.Fatalf("Spun after %d polls", i)
		}
		b.Idle(ch)
		if len(ch) == 0 {
			t.Fatalf("blocked on the channel at poll %d, want spinning for %d", i+1, transport.SpinPolls)
		}
	}
	if b.Spun() {
		t.Fatalf("Spun after exactly SpinPolls polls")
	}
	idleOnChannel(t, &b, ch, "after spinning")
	if !b.Spun() {
		t.Error("not Spun after SpinPolls+1 polls")
	}

	// Reset returns to spinning: SpinPolls more polls leave the channel
	// alone again, the next one blocks on it.
	b.Reset()
	if b.Spun() {
		t.Error("Spun after Reset")
	}
	ch <- struct{}{}
	for i := range transport.SpinPolls {
		b.Idle(ch)
		if len(ch) == 0 {
			t.Fatalf("after Reset: blocked at poll %d", i+1)
		}
	}
	idleOnChannel(t, &b, ch, "after Reset and spinning")
}

// idleOnChannel checks that b, past spinning, waits on ch: its Idle takes
// the value ch holds. Idle arms a timer of MinSleep and selects on both;
// a goroutine held off its core between the two (a loaded machine, the
// race detector) finds both ready, and select picks either, so a few
// tries are allowed. (Idle checking ch before it arms the timer, as
// 78df4f2 had it for this test's sake, went with a stalled first size of
// the 16-rank 8-byte allreduce on the 16-core node in 9 of 22 runs,
// against 6 of 53 without it: session 24, docs/PERFORMANCE.md.)
func idleOnChannel(t *testing.T, b *transport.Backoff, ch chan struct{}, when string) {
	t.Helper()
	for try := 0; try < 20; try++ {
		b.Idle(ch)
		if len(ch) == 0 {
			return
		}
	}
	t.Fatalf("%s: 20 polls did not take the value on the channel", when)
}

// TestBackoffYieldThenSleep checks the phases without a channel: spin for
// SpinPolls polls, then yield (for YieldFor), then sleep, the sleeps growing
// to MaxSleep; Reset returns to spinning. Only that polls end up taking at
// least MaxSleep is checked (a sleep never ends early); nothing on speed.
func TestBackoffYieldThenSleep(t *testing.T) {
	var b transport.Backoff
	for range transport.SpinPolls {
		b.Idle(nil)
	}
	if b.Spun() {
		t.Fatal("Spun during the spin phase")
	}
	b.Idle(nil)
	if !b.Spun() {
		t.Fatal("not Spun after the spin phase")
	}
	// The backoff yields for a while, then sleeps ever longer: polls end
	// up taking at least MaxSleep.
	start := time.Now()
	for {
		t0 := time.Now()
		b.Idle(nil)
		if time.Since(t0) >= transport.MaxSleep {
			break
		}
		if time.Since(start) > hang {
			t.Fatal("Idle(nil) never slept MaxSleep")
		}
	}
	// Reset returns to spinning.
	b.Reset()
	for i := range transport.SpinPolls {
		if b.Spun() {
			t.Fatalf("after Reset: Spun at poll %d", i)
		}
		b.Idle(nil)
	}
}

// TestBackoffSpinDuration checks that a Backoff with Spin set does not block
// before Spin has passed, and does block afterwards.
func TestBackoffSpinDuration(t *testing.T) {
	const spin = 20 * time.Millisecond
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	b := transport.Backoff{Spin: spin}
	start := time.Now()
	for len(ch) == 1 {
		b.Idle(ch)
		if time.Since(start) > hang {
			t.Fatal("still spinning long after Spin")
		}
	}
	if el := time.Since(start); el < spin {
		t.Errorf("blocked after %v, before Spin (%v) had passed", el, spin)
	}
}

// TestBackoffClosedChannel checks that once blocking, Idle returns as soon
// as the channel is closed instead of waiting for its timer. Waiting for the
// timers would take n polls × up to MaxSleep (about 8 s); returning at once
// takes microseconds. The bound is a quarter of the former, so only the
// wrong behaviour fails it, never a slow machine.
func TestBackoffClosedChannel(t *testing.T) {
	ch := make(chan struct{})
	close(ch)
	var b transport.Backoff
	for range transport.SpinPolls + 1 {
		b.Idle(ch)
	}
	const n = 4000
	start := time.Now()
	for range n {
		b.Idle(ch)
	}
	if el, limit := time.Since(start), n*transport.MaxSleep/4; el >= limit {
		t.Errorf("%d polls on a closed channel took %v (≥ %v): Idle waited for its timer", n, el, limit)
	}
}

// TestBackoffWakesOnClose checks that a blocked Idle returns when another
// goroutine closes its channel.
func TestBackoffWakesOnClose(t *testing.T) {
	ch := make(chan struct{})
	var b transport.Backoff
	var closed atomic.Bool
	time.AfterFunc(10*time.Millisecond, func() { closed.Store(true); close(ch) })
	start := time.Now()
	for !closed.Load() {
		b.Idle(ch)
		if time.Since(start) > hang {
			t.Fatal("Idle never saw the channel close")
		}
	}
	// One more poll on the closed channel returns.
	b.Idle(ch)
}

// fakeReq completes (with err) once done is set.
type fakeReq struct {
	done  atomic.Bool
	err   error
	ch    chan struct{}
	tests atomic.Int32
}

func newFake() *fakeReq { return &fakeReq{ch: make(chan struct{})} }

func (f *fakeReq) finish(err error) {
	f.err = err
	f.done.Store(true)
	close(f.ch)
}

func (f *fakeReq) Test() (bool, error) {
	f.tests.Add(1)
	if f.done.Load() {
		return true, f.err
	}
	return false, nil
}

func (f *fakeReq) Done() <-chan struct{} { return f.ch }

// pollReq completes after a number of Tests and has no Done channel, like a
// polling transport's request.
type pollReq struct {
	left int
	err  error
}

func (p *pollReq) Test() (bool, error) {
	if p.left > 0 {
		p.left--
		return false, nil
	}
	return true, p.err
}

func (p *pollReq) Done() <-chan struct{} { return nil }

// waitAsync runs transport.Wait in a goroutine and returns its result,
// failing the test if it does not return.
func waitAsync(t *testing.T, ctx context.Context, fail func() error, reqs ...transport.Request) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- transport.Wait(ctx, fail, reqs...) }()
	select {
	case err := <-res:
		return err
	case <-time.After(hang):
		t.Fatal("Wait did not return")
		return nil
	}
}

func TestWaitAllComplete(t *testing.T) {
	if err := transport.Wait(context.Background(), nil); err != nil {
		t.Errorf("no requests: %v", err)
	}
	a, b := newFake(), newFake()
	p := &pollReq{left: 200}
	time.AfterFunc(5*time.Millisecond, func() { a.finish(nil) })
	time.AfterFunc(10*time.Millisecond, func() { b.finish(nil) })
	if err := waitAsync(t, context.Background(), nil, a, p, b); err != nil {
		t.Fatal(err)
	}
	if !a.done.Load() || !b.done.Load() || p.left != 0 {
		t.Error("Wait returned before every request completed")
	}
}

func TestWaitFirstError(t *testing.T) {
	boom := errors.New("boom")
	stuck, bad := newFake(), newFake()
	time.AfterFunc(5*time.Millisecond, func() { bad.finish(boom) })
	err := waitAsync(t, context.Background(), nil, stuck, bad)
	if !errors.Is(err, boom) {
		t.Errorf("got %v, want the failed request's error", err)
	}
	// A later request that completes fine does not hide an earlier error.
	ok := newFake()
	ok.finish(nil)
	err = waitAsync(t, context.Background(), nil, ok, transport.DoneRequest{Err: boom}, newFake())
	if !errors.Is(err, boom) {
		t.Errorf("got %v, want boom", err)
	}
}

func TestWaitCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	err := waitAsync(t, ctx, nil, newFake())
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	// Polling requests (no Done channel) are interrupted as well.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	err = waitAsync(t, ctx2, nil, &pollReq{left: 1 << 62})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("polling request: got %v, want context.DeadlineExceeded", err)
	}
	// An already cancelled context with a pending request.
	done, cancel3 := context.WithCancel(context.Background())
	cancel3()
	if err := waitAsync(t, done, nil, newFake()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v", err)
	}
}

func TestWaitFail(t *testing.T) {
	lost := errors.New("peer lost")
	var failed atomic.Bool
	time.AfterFunc(10*time.Millisecond, func() { failed.Store(true) })
	fail := func() error {
		if failed.Load() {
			return lost
		}
		return nil
	}
	err := waitAsync(t, context.Background(), fail, newFake())
	if !errors.Is(err, lost) {
		t.Errorf("got %v, want the fail func's error", err)
	}
}

func TestDoneRequest(t *testing.T) {
	done, err := transport.DoneRequest{}.Test()
	if !done || err != nil {
		t.Errorf("DoneRequest{}.Test() = %v, %v", done, err)
	}
	boom := errors.New("boom")
	r := transport.DoneRequest{Err: boom}
	for range 2 {
		done, err := r.Test()
		if !done || err != boom {
			t.Errorf("Test() = %v, %v; want true, boom", done, err)
		}
	}
	select {
	case <-r.Done():
	default:
		t.Error("Done channel is not closed")
	}
	var _ transport.Request = transport.DoneRequest{}
	if err := transport.Wait(context.Background(), nil, transport.DoneRequest{}, transport.DoneRequest{}); err != nil {
		t.Errorf("Wait on done requests: %v", err)
	}
	if err := transport.Wait(context.Background(), nil, r); err != boom {
		t.Errorf("Wait on a failed DoneRequest: %v", err)
	}
}

func TestWaitInproc(t *testing.T) {
	meshes := inproc.NewWorld(2, nil)
	defer meshes[0].Close()
	defer meshes[1].Close()
	tag := transport.Tag{Comm: 1, Seq: 2, Step: 3}
	// Larger than the eager limit: the send completes only when received.
	data := make([]byte, inproc.EagerLimit+10)
	for i := range data {
		data[i] = byte(i)
	}
	buf := make([]byte, len(data))
	sreq, err := meshes[0].Conn(1).Isend(tag, data)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { res <- transport.Wait(context.Background(), nil, sreq) }()
	time.Sleep(5 * time.Millisecond)
	rreq, err := meshes[1].Conn(0).Irecv(tag, buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitAsync(t, context.Background(), nil, rreq); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hang):
		t.Fatal("sender's Wait did not return")
	}
	for i := range buf {
		if buf[i] != data[i] {
			t.Fatalf("byte %d: %d, want %d", i, buf[i], data[i])
		}
	}
}
