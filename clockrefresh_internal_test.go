package braid

import (
	"testing"
	"time"
)

// TestClockUpdate walks the refresh's rule: an estimate whose round trip
// is at most twice the shortest so far replaces the offset and its bound;
// a slower one is left out, and the limit doubles with each one left out
// in a row, back to twice the shortest once one is taken.
func TestClockUpdate(t *testing.T) {
	k := newClock()
	k.off.Store(1000)
	k.err.Store(50)
	k.rtt = 100
	step := func(rtt, delta int64, want bool, wantOff, wantErr int64) {
		t.Helper()
		if got := k.update(rtt, delta); got != want {
			t.Fatalf("update(rtt %d, delta %d) = %v, want %v", rtt, delta, got, want)
		}
		if k.off.Load() != wantOff || k.err.Load() != wantErr {
			t.Fatalf("after update(rtt %d, delta %d): offset %d ± %d, want %d ± %d", rtt, delta, k.off.Load(), k.err.Load(), wantOff, wantErr)
		}
	}
	step(150, 30, true, 1030, 75)  // within 2 × 100
	step(201, 30, false, 1030, 75) // above 2 × 100: left out
	step(399, 30, true, 1060, 199) // within 4 × 100 after one left out
	step(201, -60, false, 1060, 199)
	step(401, -60, false, 1060, 199) // 4 × 100 after one, not 8
	step(800, -60, true, 1000, 400)  // 8 × 100 after two
	step(60, 5, true, 1005, 30)
	if k.rtt != 60 {
		t.Errorf("shortest round trip %d, want 60", k.rtt)
	}
	step(121, 5, false, 1005, 30) // twice the new shortest
	if n := k.refreshes.Load(); n != 4 {
		t.Errorf("%d refreshes counted, want 4", n)
	}
}

// TestClockEstimateConsistent: an offset and its bound are read from one
// estimate while the refresher replaces it (ClockOffset used to read them
// apart: a refresh between the two loads paired an older offset with a
// newer, smaller bound that did not hold its error).
func TestClockEstimateConsistent(t *testing.T) {
	k := newClock()
	const n = 200000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(1); i <= n; i++ {
			k.set(1, i) // off and bound both i
		}
	}()
	for reads := 0; ; reads++ {
		off, bound := k.estimate()
		if off != bound {
			t.Fatalf("read %d: offset %d with bound %d, from two estimates", reads, off, bound)
		}
		select {
		case <-done:
			return
		default:
		}
	}
}

// TestClockBaseNarrowest: the clock's base is the CLOCK_MONOTONIC reading
// of the narrowest pair of reads around time.Now, not of the first pair: a
// thread descheduled between the first two reads (a gap of 300 µs here)
// would put every stamp of the rank half that gap off its host's other
// ranks'.
func TestClockBaseNarrowest(t *testing.T) {
	// Pairs of reads: (1000, 301000), a gap of 300 µs around the first
	// time.Now, then (400000, 405000) around the second, then (500000,
	// 500001) around the third, which is within the 2 µs that ends the
	// search.
	reads := []int64{1000, 301000, 400000, 405000, 500000, 500001, 900000, 900001}
	var nows []time.Time
	t0 := time.Now()
	mono := func() int64 { v := reads[0]; reads = reads[1:]; return v }
	now := func() time.Time { n := t0.Add(time.Duration(len(nows))); nows = append(nows, n); return n }
	k := clockFrom(mono, now)
	if len(nows) != 3 {
		t.Fatalf("read time.Now %d times, want 3 (the third pair is narrow enough)", len(nows))
	}
	if k.baseNS != 500000 || !k.base.Equal(nows[2]) {
		t.Errorf("base %v at %d ns, want the third pair's: %v at 500000", k.base, k.baseNS, nows[2])
	}
}
