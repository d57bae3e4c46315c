// Package wait is Braid's one waiting policy: every loop that polls for
// something another thread, process or device will do (the host
// executor, the transports, the GPU executor's loops, the CUDA worker)
// waits through a Backoff, so that a change of policy is made here once.
//
// A Backoff has three phases, each idle poll in one of them:
//
//  1. spin: poll without pause (SpinPolls polls, or for Backoff.Spin);
//  2. yield: give the processor away between polls, for Backoff.Yield
//     (only for a waiter that polls memory others write; one that waits
//     on a channel blocks instead);
//  3. sleep: sleep between polls, from MinSleep doubling up to
//     Backoff.Sleep, or block on the waiter's channel for as long.
//
// Reset returns to spinning when a poll found work. Package transport
// re-exports Backoff and its constants (transport.Backoff) for the
// transports and exec.
package wait

import (
	"runtime"
	"time"
)

// Backoff is the waiting policy every Braid wait loop follows: spin briefly,
// then yield the processor, then block (on a channel when one is given, else
// a short sleep that grows up to Sleep). It never spins forever: with more
// ranks than cores, a spinning waiter steals the time its peer needs.
//
// The zero value is ready to use: the host executor's policy. Call Idle (or
// Step) each time a poll found nothing to do and Reset when it did.
type Backoff struct {
	// Spin is how long to poll before yielding; zero means SpinPolls
	// polls, and a negative Spin means OverSpinPolls polls (for ranks that
	// outnumber the cores: every poll then steals a peer's time). Spin
	// long when every rank has a core of its own, briefly when ranks
	// outnumber cores (they need each other's time slices). A positive
	// Spin polls at least SpinPolls times and reads the clock every 64th
	// poll.
	Spin time.Duration
	// Yield is how long the yield phase lasts; zero means YieldFor.
	Yield time.Duration
	// Sleep is the longest sleep of the sleep phase, whose sleeps start at
	// MinSleep (or Sleep, if shorter) and double; zero means MaxSleep.
	Sleep time.Duration
	// Goroutines makes the yield phase yield the goroutine
	// (runtime.Gosched) rather than the OS thread (sched_yield): for a
	// waiter whose peers may be goroutines of its own process, which a
	// thread that keeps its Go processor would keep from running (the GPU
	// executor's loops and the CUDA worker, whose ranks may share a
	// process).
	Goroutines bool

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

// Spun reports whether the backoff has passed its first SpinPolls polls.
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

// Step counts one idle poll and does what its phase asks short of sleeping:
// nothing while spinning, a yield while yielding. It returns 0 then, and
// in the sleep phase how long the caller should sleep or block now (Idle
// does it; a caller that blocks on something of its own, as the CUDA
// worker does, calls Step). polling says that the waiter polls memory that
// others write, and so yields before it sleeps; a waiter that can block on
// a channel goes from spinning to sleeping, since the Go scheduler runs
// whoever will wake it.
func (b *Backoff) Step(polling bool) time.Duration {
	b.n++
	if b.spinning() {
		return 0
	}
	if polling && b.sleep == 0 {
		if b.yields.IsZero() {
			b.yields = time.Now()
		}
		yield := b.Yield
		if yield == 0 {
			yield = YieldFor
		}
		if b.n&63 != 0 || time.Since(b.yields) < yield {
			if b.Goroutines {
				runtime.Gosched()
			} else {
				yieldThread()
			}
			return 0
		}
	}
	top := b.Sleep
	if top == 0 {
		top = MaxSleep
	}
	if b.sleep == 0 {
		b.sleep = min(MinSleep, top)
	} else if b.sleep < top {
		b.sleep = min(2*b.sleep, top)
	}
	return b.sleep
}

// Idle waits a little, more each call. If ch is not nil, a close of (or a
// value on) ch ends the wait early once the backoff blocks.
func (b *Backoff) Idle(ch <-chan struct{}) {
	d := b.Step(ch == nil)
	if d == 0 {
		return
	}
	if ch == nil {
		time.Sleep(d)
		return
	}
	if b.timer == nil {
		b.timer = time.NewTimer(d)
	} else {
		b.timer.Reset(d)
	}
	select {
	case <-ch:
	case <-b.timer.C:
	}
	b.timer.Stop()
}
