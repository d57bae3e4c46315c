package bench

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/sched"
)

// TestImbalanceDelays checks the injected compute against the PAP-aware
// collectives paper (Alizadeh et al., EuroMPI/USA 2022) §6.1: before each
// timed call every rank computes for a random time in [0, MIF × α], α the
// balanced latency measured first at that size, drawn independently on each
// rank; and the split of each call's time into the wait for the last
// arrival and the tail after it.
func TestImbalanceDelays(t *testing.T) {
	const (
		n     = 2
		iters = 200
		mif   = 3.0
	)
	var mu sync.Mutex
	var delays []time.Duration
	compute = func(d time.Duration) {
		mu.Lock()
		delays = append(delays, d)
		mu.Unlock()
		busy(d)
	}
	defer func() { compute = busy }()

	comms, err := braid.NewLocal(n, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := Config{Coll: sched.Allreduce, MinSize: 256, MaxSize: 256, Iters: iters, Warmup: 2, Imbalance: mif}
	rows := make([][]Row, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[r], errs[r] = Run(ctx, comms[r], cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if len(rows[0]) != 1 {
		t.Fatalf("rows %+v, want one", rows[0])
	}
	row := rows[0][0]
	if row.MIF != mif || row.BalancedUs <= 0 || row.Iters != iters {
		t.Fatalf("row %+v: want MIF %v, a balanced latency, %d iterations", row, mif, iters)
	}
	// The split of the latency on the common clock: a rank's wait for the
	// last arrival is never negative, and wait + tail is the call's time.
	if row.WaitUs < 0 || math.Abs(row.WaitUs+row.TailUs-row.AvgUs) > 0.05*row.AvgUs+1 {
		t.Errorf("wait %.2f µs + tail %.2f µs, want a wait ≥ 0 and a sum near the latency %.2f µs", row.WaitUs, row.TailUs, row.AvgUs)
	}
	if len(delays) != n*iters {
		t.Fatalf("%d delays, want one per rank and call: %d", len(delays), n*iters)
	}
	bound := time.Duration(mif * row.BalancedUs * 1e3)
	sum := 0.0
	distinct := map[time.Duration]bool{}
	for _, d := range delays {
		if d < 0 || d > bound {
			t.Fatalf("delay %v outside [0, MIF × α = %v]", d, bound)
		}
		sum += float64(d) / float64(bound)
		distinct[d] = true
	}
	// Uniform on [0, 1]: the mean of 400 draws is within 0.1 of 1/2 but
	// with a probability below 1e-6 (and the seeds are fixed).
	if mean := sum / float64(len(delays)); math.Abs(mean-0.5) > 0.1 {
		t.Errorf("mean delay %.3f × the bound, want about 0.5", mean)
	}
	// Ranks draw their own delays: had they the same seed, each value
	// would come n times.
	if len(distinct) < len(delays)*9/10 {
		t.Errorf("%d distinct delays of %d: ranks draw the same ones", len(distinct), len(delays))
	}
}

// TestBusy checks that busy spins for at least the time asked.
func TestBusy(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, 200 * time.Microsecond} {
		start := time.Now()
		busy(d)
		if el := time.Since(start); el < d {
			t.Errorf("busy(%v) returned after %v", d, el)
		}
	}
}
