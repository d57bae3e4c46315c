package wait

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestStepPhases walks a polling waiter through the three phases: Step
// returns 0 while it spins (SpinPolls polls) and while it yields (for
// Yield at least), then the sleeps, from MinSleep doubling up to Sleep.
func TestStepPhases(t *testing.T) {
	for _, c := range []struct {
		name   string
		b      Backoff
		sleeps []time.Duration
	}{
		{"host default", Backoff{Yield: time.Millisecond}, []time.Duration{MinSleep, 2 * MinSleep, 4 * MinSleep, 8 * MinSleep, 16 * MinSleep, 32 * MinSleep, MaxSleep, MaxSleep}},
		{"constant sleep (the GPU loops)", Backoff{Yield: time.Millisecond, Sleep: MinSleep, Goroutines: true}, []time.Duration{MinSleep, MinSleep, MinSleep}},
		{"sleep under MinSleep", Backoff{Yield: time.Millisecond, Sleep: MinSleep / 5}, []time.Duration{MinSleep / 5, MinSleep / 5}},
	} {
		b := c.b
		for i := range SpinPolls {
			if d := b.Step(true); d != 0 {
				t.Fatalf("%s: poll %d slept %v during the spin", c.name, i+1, d)
			}
		}
		start := time.Now()
		polls := 0
		d := time.Duration(0)
		for d == 0 {
			d = b.Step(true)
			polls++
		}
		if el := time.Since(start); el < c.b.Yield || polls < 64 {
			t.Errorf("%s: yielded %v over %d polls, want at least %v", c.name, el, polls, c.b.Yield)
		}
		got := []time.Duration{d}
		for len(got) < len(c.sleeps) {
			got = append(got, b.Step(true))
		}
		for i := range got {
			if got[i] != c.sleeps[i] {
				t.Errorf("%s: sleeps %v, want %v", c.name, got, c.sleeps)
				break
			}
		}
		b.Reset()
		if d := b.Step(true); d != 0 {
			t.Errorf("%s: slept %v right after Reset", c.name, d)
		}
	}
}

// TestStepChannelSkipsYield: a waiter that can block on a channel goes
// from spinning straight to sleeping.
func TestStepChannelSkipsYield(t *testing.T) {
	b := Backoff{Yield: time.Hour}
	for range SpinPolls {
		if d := b.Step(false); d != 0 {
			t.Fatalf("slept %v during the spin", d)
		}
	}
	if d := b.Step(false); d != MinSleep {
		t.Errorf("after the spin: %v, want a sleep of MinSleep", d)
	}
	b = Backoff{Spin: -1}
	for range OverSpinPolls {
		b.Step(false)
	}
	if d := b.Step(false); d != MinSleep {
		t.Errorf("negative Spin: after OverSpinPolls polls %v, want a sleep of MinSleep", d)
	}
}

// TestGoroutinesYield: with Goroutines the yield phase lets another
// goroutine of the process run on a single Go processor within a few
// polls. A thread yield (sched_yield) keeps the processor, and the other
// goroutine would wait for the runtime's preemption (about 10 ms,
// thousands of polls).
func TestGoroutinesYield(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var flag atomic.Bool
	go flag.Store(true)
	b := Backoff{Spin: -1, Yield: time.Hour, Goroutines: true}
	polls := 0
	for !flag.Load() {
		if d := b.Step(true); d != 0 {
			t.Fatalf("slept %v within an hour's yield phase", d)
		}
		polls++
	}
	if polls > OverSpinPolls+8 {
		t.Errorf("the other goroutine ran after %d polls, want within a few yields after the %d spins", polls, OverSpinPolls)
	}
}

// TestSpinDuration: a positive Spin spins (Step returns 0, no yield)
// until it has passed, then moves on.
func TestSpinDuration(t *testing.T) {
	const spin = 2 * time.Millisecond
	b := Backoff{Spin: spin}
	start := time.Now()
	for b.Step(false) == 0 {
	}
	if el := time.Since(start); el < spin {
		t.Errorf("stopped spinning after %v, before Spin (%v)", el, spin)
	}
}
