package braid

import (
	"bytes"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/sched"
)

// TestStatsOf: the agreed figures from the ranks' call times, and from
// their measured Ω and α where some rank read the stamps.
func TestStatsOf(t *testing.T) {
	st := statsOf([]float64{10e-6, 1e-6, -1, -1, 4e-6, 2e-6, -1, -1, 1e-6, 0.5e-6, -1, -1})
	if st.balanced != 0.5e-6 || st.spread != 9.5e-6 || st.latency != 5e-6 || st.measured {
		t.Fatalf("statsOf = %+v, want balanced 0.5µs, spread 9.5µs, latency 5µs, estimated", st)
	}
	st = statsOf([]float64{10e-6, 1e-6, 7e-6, 0.8e-6, 4e-6, 2e-6, -1, -1, 1e-6, 0.5e-6, 8e-6, 0.9e-6})
	if st.balanced != 0.8e-6 || st.spread != 8e-6 || st.latency != 5e-6 || !st.measured {
		t.Fatalf("statsOf = %+v, want balanced 0.8µs, spread 8µs, latency 5µs, measured", st)
	}
}

// TestArrivalRule walks the rule through its moves: no switch while the
// spread stays below arrivalOn × the balanced time; a switch above; back
// with a back-off when the arrival-aware reductions are more than 5 %
// slower than the balanced choice was; no try during the back-off, a
// doubled back-off after a second loss; a kept switch when they are
// faster, and back when the spread falls below arrivalOff × the balanced
// time.
func TestArrivalRule(t *testing.T) {
	var log bytes.Buffer
	comms, err := NewLocal(1, &Options{Debug: "info", Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	c := comms[0]
	k := &call{p: sched.Params{Coll: sched.Allreduce, NRanks: 1, Count: 8}}
	pl := &planned{algo: "shm", reason: "cost model"}
	w := &arrivalWatch{reason: pl.reason}
	step := func(balanced, spread, latency float64, wantPAP bool, wantLog string) {
		t.Helper()
		log.Reset()
		c.arrivalRule(k, pl, w, arrivalStats{balanced: balanced, spread: spread, latency: latency})
		if w.pap.Load() != wantPAP {
			t.Fatalf("after %v/%v/%v: pap = %v, want %v (log %q)", balanced, spread, latency, w.pap.Load(), wantPAP, log.String())
		}
		if !strings.Contains(log.String(), wantLog) {
			t.Fatalf("after %v/%v/%v: log %q, want %q", balanced, spread, latency, log.String(), wantLog)
		}
	}
	step(1e-6, 3.9e-6, 5e-6, false, "")
	step(1e-6, 5e-6, 6e-6, true, "is more than 4 × the balanced call's 1.00µs")
	step(1e-6, 5e-6, 6.4e-6, false, "back to shm (next try in 4 windows")
	for range 4 {
		step(1e-6, 5e-6, 6e-6, false, "")
	}
	step(1e-6, 5e-6, 6e-6, true, "switching from shm to pap")
	step(1e-6, 5e-6, 7e-6, false, "next try in 8 windows")
	for range 8 {
		step(1e-6, 5e-6, 6e-6, false, "")
	}
	step(1e-6, 5e-6, 6e-6, true, "switching")
	step(1e-6, 5e-6, 5e-6, true, "")
	step(1e-6, 1.9e-6, 2.5e-6, false, "is below 2 × the call's")
}

// TestWatchable: the sites the arrival statistics may switch: reduce and
// allreduce above the shared area's FlatMax (up to it, the area's reduce
// and allreduce are flat, as pap's allreduce); not the other
// collectives, not one rank, not with DisableArrival.
func TestWatchable(t *testing.T) {
	for _, tc := range []struct {
		coll    sched.Collective
		n       int
		bytes   int
		disable bool
		want    bool
	}{
		{sched.Allreduce, 4, 8, false, false},
		{sched.Allreduce, 4, 2 << 10, false, false}, // FlatMax
		{sched.Allreduce, 4, 4 << 10, false, true},
		{sched.Allreduce, 4, 1 << 20, false, true},
		{sched.Allreduce, 4, 1 << 20, true, false},
		{sched.Allreduce, 1, 1 << 20, false, false},
		{sched.Reduce, 4, 2 << 10, false, false}, // FlatMax
		{sched.Reduce, 4, 4 << 10, false, true},
		{sched.Reduce, 4, 32 << 10, false, true},
		{sched.Bcast, 4, 1 << 20, false, false},
	} {
		comms, err := NewLocal(tc.n, &Options{DisableArrival: tc.disable})
		if err != nil {
			t.Fatal(err)
		}
		c := comms[0]
		p := sched.Params{Coll: tc.coll, NRanks: tc.n, Count: tc.bytes / 4}
		cand := []string{"shm", "ring"}
		if tc.coll != sched.Bcast {
			cand = append(cand, papAlgo)
		}
		if got := c.watchable(p, 4, cand); got != tc.want {
			t.Errorf("%v of %d B on %d ranks (DisableArrival %v): watchable = %v, want %v", tc.coll, tc.bytes, tc.n, tc.disable, got, tc.want)
		}
		if got := c.watchable(p, 4, cand[:2]); got {
			t.Errorf("%v of %d B on %d ranks: watchable without pap among the candidates", tc.coll, tc.bytes, tc.n)
		}
		for _, c := range comms {
			c.Close()
		}
	}
}
