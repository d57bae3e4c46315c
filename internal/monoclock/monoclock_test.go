package monoclock

import (
	"testing"
	"time"
)

// TestFromNarrowest: the base is the CLOCK_MONOTONIC reading of the
// narrowest pair of reads around time.Now, not of the first pair: a thread
// descheduled between the first two reads (a gap of 300 µs here) would put
// every reading half that gap off the host's other processes'.
func TestFromNarrowest(t *testing.T) {
	// Pairs of reads: (1000, 301000), a gap of 300 µs around the first
	// time.Now, then (400000, 405000) around the second, then (500000,
	// 500001) around the third, which is within MaxGap and ends the
	// search.
	reads := []int64{1000, 301000, 400000, 405000, 500000, 500001, 900000, 900001}
	var nows []time.Time
	t0 := time.Now()
	mono := func() int64 { v := reads[0]; reads = reads[1:]; return v }
	now := func() time.Time { n := t0.Add(time.Duration(len(nows))); nows = append(nows, n); return n }
	base, ns, gap := From(mono, now)
	if len(nows) != 3 {
		t.Fatalf("read time.Now %d times, want 3 (the third pair is narrow enough)", len(nows))
	}
	if ns != 500000 || !base.Equal(nows[2]) || gap != 1 {
		t.Errorf("base %v at %d ns, gap %v; want the third pair's: %v at 500000, gap 1ns", base, ns, gap, nows[2])
	}
}

// TestFromKeepsNarrowest: when no pair is within MaxGap, the narrowest of
// Tries pairs is kept.
func TestFromKeepsNarrowest(t *testing.T) {
	i := int64(0)
	calls := 0
	mono := func() int64 {
		i++
		// Pair k reads (k·1e6, k·1e6 + gap), the gap 10 µs except
		// for pair 37's, 5 µs.
		k := (i - 1) / 2
		if i%2 == 1 {
			return k * 1e6
		}
		if k == 37 {
			return k*1e6 + 5000
		}
		return k*1e6 + 10000
	}
	t0 := time.Now()
	now := func() time.Time { calls++; return t0.Add(time.Duration(calls)) }
	base, ns, gap := From(mono, now)
	if calls != Tries || ns != 37e6+2500 || gap != 5*time.Microsecond || !base.Equal(t0.Add(38)) {
		t.Errorf("%d tries, base %d ns at %v, gap %v; want %d tries, pair 37's: %d ns, gap 5µs", calls, ns, base.Sub(t0), gap, Tries, int64(37e6+2500))
	}
}

// TestBase: the host's clock read through Base agrees with a direct read
// later, to within the gap and the time between them.
func TestBase(t *testing.T) {
	base, ns, gap := Base()
	if gap < 0 || gap > time.Second {
		t.Fatalf("gap %v", gap)
	}
	_, ns2, _ := Base()
	if d := ns2 - (ns + int64(time.Since(base))); d > int64(10*time.Millisecond) || d < -int64(10*time.Millisecond) {
		t.Errorf("two bases disagree by %v", time.Duration(d))
	}
}
