package braid

import "testing"

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
