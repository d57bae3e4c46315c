package transport

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// Backoff is the waiting policy every Braid wait loop follows: spin briefly,
// then yield the processor, then block (on a channel when one is given, else
// a short sleep that grows up to MaxSleep). It never spins forever: with more
// ranks than cores, a spinning waiter steals the time its peer needs.
//
// The zero value is ready to use. Call Idle each time a poll found nothing
// to do and Reset when it did.
type Backoff struct {
	// Spin is how long to poll before yielding; zero means SpinPolls
	// polls, and a negative Spin means OverSpinPolls polls (for ranks that
	// outnumber the cores: every poll then steals a peer's time). Spin long when every rank has a core of its own, briefly when
	// ranks outnumber cores (they need each other's time slices).
	Spin time.Duration

	spinStart time.Time
	n         int
	sleep     time.Duration
	timer     *time.Timer
	yields    time.Time // when the yield phase began
}

// Tuning of the backoff. Spinning costs nothing to the latency of a message
// that arrives during it; yielding costs a system call; sleeping costs the
// timer's granularity (tens of microseconds).
// Go's timers are coarse in a VM (a 20 µs sleep takes 0.4–1 ms), so a
// polling waiter yields for YieldFor before it sleeps at all.
const (
	SpinPolls     = 64
	OverSpinPolls = 4
	YieldFor      = 2 * time.Millisecond
	MinSleep      = 50 * time.Microsecond
	MaxSleep      = 2 * time.Millisecond
)

// Spun reports whether the backoff has passed its spinning phase.
func (b *Backoff) Spun() bool { return b.n > SpinPolls }

// spinning reports whether the backoff is still in its spinning phase,
// extending it to b.Spin.
func (b *Backoff) spinning() bool {
	if b.Spin < 0 {
		return b.n <= OverSpinPolls
	}
	if b.n <= SpinPolls {
		if b.n == 1 && b.Spin > 0 {
			b.spinStart = time.Now()
		}
		return true
	}
	if b.Spin > 0 && b.sleep == 0 && b.yields.IsZero() {
		if b.n&63 != 0 || time.Since(b.spinStart) < b.Spin {
			return true
		}
	}
	return false
}

// Reset returns the backoff to spinning.
func (b *Backoff) Reset() { b.n = 0; b.sleep = 0; b.yields = time.Time{} }

// Idle waits a little, more each call. If ch is not nil, a close of (or a
// value on) ch ends the wait early once the backoff blocks.
func (b *Backoff) Idle(ch <-chan struct{}) {
	b.n++
	switch {
	case b.spinning():
		return
	case ch == nil && b.sleep == 0:
		// Yielding helps only a waiter that polls memory another process
		// writes; a channel waiter blocks instead, and the Go scheduler
		// runs whoever will close it.
		if b.yields.IsZero() {
			b.yields = time.Now()
		}
		if b.n&63 != 0 || time.Since(b.yields) < YieldFor {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			return
		}
	}
	if b.sleep == 0 {
		b.sleep = MinSleep
	} else if b.sleep < MaxSleep {
		b.sleep *= 2
		if b.sleep > MaxSleep {
			b.sleep = MaxSleep
		}
	}
	if ch == nil {
		time.Sleep(b.sleep)
		return
	}
	if b.timer == nil {
		b.timer = time.NewTimer(b.sleep)
	} else {
		b.timer.Reset(b.sleep)
	}
	select {
	case <-ch:
	case <-b.timer.C:
	}
	b.timer.Stop()
}

// Wait waits until every request completes, or one fails, or ctx ends, or
// fail (which may be nil) returns an error. It returns the first error.
func Wait(ctx context.Context, fail func() error, reqs ...Request) error {
	var b Backoff
	pending := append([]Request(nil), reqs...)
	for polls := 0; len(pending) > 0; polls++ {
		progressed := false
		keep := pending[:0]
		for _, r := range pending {
			done, err := r.Test()
			if err != nil {
				return err
			}
			if done {
				progressed = true
				continue
			}
			keep = append(keep, r)
		}
		pending = keep
		if len(pending) == 0 {
			return nil
		}
		if progressed {
			b.Reset()
		}
		if polls&63 == 0 || b.n > SpinPolls {
			if err := ctx.Err(); err != nil {
				return err
			}
			if fail != nil {
				if err := fail(); err != nil {
					return err
				}
			}
		}
		b.Idle(pending[0].Done())
	}
	return nil
}

// DoneRequest is a Request that completed at creation, with err.
type DoneRequest struct{ Err error }

// Test returns true and the request's error.
func (d DoneRequest) Test() (bool, error) { return true, d.Err }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done returns a closed channel.
func (d DoneRequest) Done() <-chan struct{} { return closedChan }
