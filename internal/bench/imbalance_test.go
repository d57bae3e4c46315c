package bench

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/sched"
)

// runImbalance runs Run with cfg on every rank of a local job of n ranks
// and returns every rank's rows and error.
func runImbalance(t *testing.T, n int, cfg Config) ([][]Row, []error) {
	t.Helper()
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
	return rows, errs
}

// mustRunImbalance is runImbalance that fails the test on any rank's error.
func mustRunImbalance(t *testing.T, n int, cfg Config) [][]Row {
	t.Helper()
	rows, errs := runImbalance(t, n, cfg)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return rows
}

// TestImbalanceDelays checks the injected compute against "Efficient
// Process Arrival Pattern Aware Collective Communication for Deep
// Learning" (EuroMPI/USA 2022) §6.1: before each timed call every rank
// computes for a random time in [0, MIF × α], α (§2.2) the one-way time of
// one message of the size, measured once and the same on every rank,
// drawn independently on each rank; and the split of each call's time
// into the wait for the last arrival and the tail after it.
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

	cfg := Config{Coll: sched.Allreduce, MinSize: 256, MaxSize: 256, Iters: iters, Warmup: 2, Imbalance: mif}
	rows := mustRunImbalance(t, n, cfg)
	if len(rows[0]) != 1 {
		t.Fatalf("rows %+v, want one", rows[0])
	}
	row := rows[0][0]
	if row.MIF != mif || row.BalancedUs <= 0 || row.AlphaUs <= 0 || row.Iters != iters {
		t.Fatalf("row %+v: want MIF %v, a balanced latency, an α, %d iterations", row, mif, iters)
	}
	// Every rank drew with the same α (rank 0's ping-pong).
	if a := rows[1][0].AlphaUs; a != row.AlphaUs {
		t.Errorf("rank 1's α %v µs, rank 0's %v µs: want one α for the job", a, row.AlphaUs)
	}
	// The split of the latency on the common clock: a rank's wait for the
	// last arrival is never negative, and wait + tail is the call's time.
	if row.WaitUs < 0 || math.Abs(row.WaitUs+row.TailUs-row.AvgUs) > 0.05*row.AvgUs+1 {
		t.Errorf("wait %.2f µs + tail %.2f µs, want a wait ≥ 0 and a sum near the latency %.2f µs", row.WaitUs, row.TailUs, row.AvgUs)
	}
	if len(delays) != n*iters {
		t.Fatalf("%d delays, want one per rank and call: %d", len(delays), n*iters)
	}
	bound := time.Duration(mif * row.AlphaUs * 1e3)
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
	// with a probability below 1e-6 (and the seeds are fixed). A bound
	// other than MIF × α (the balanced latency's, say) moves it.
	if mean := sum / float64(len(delays)); math.Abs(mean-0.5) > 0.1 {
		t.Errorf("mean delay %.3f × the bound, want about 0.5", mean)
	}
	// Ranks draw their own delays: had they the same seed, each value
	// would come n times.
	if len(distinct) < len(delays)*9/10 {
		t.Errorf("%d distinct delays of %d: ranks draw the same ones", len(distinct), len(delays))
	}
}

// TestImbalanceAlpha checks what α is: by default one message's time,
// measured per size (so a 4 MiB message takes longer than a 64-byte one,
// and one message is not the collective: on 3 ranks an allreduce sends at
// least two messages one after the other), the same on every rank; with
// AlphaCollective the size's smallest balanced latency; and that the
// default needs two ranks.
func TestImbalanceAlpha(t *testing.T) {
	const n = 3
	cfg := Config{Coll: sched.Allreduce, SizeList: []int64{64, 4 << 20}, Iters: 5, Warmup: 2, Imbalance: 1}
	rows := mustRunImbalance(t, n, cfg)
	if len(rows[0]) != 2 {
		t.Fatalf("rows %+v, want two", rows[0])
	}
	for r := 1; r < n; r++ {
		for i := range rows[r] {
			if rows[r][i].AlphaUs != rows[0][i].AlphaUs {
				t.Errorf("size %d: rank %d's α %v µs, rank 0's %v µs", rows[0][i].Bytes, r, rows[r][i].AlphaUs, rows[0][i].AlphaUs)
			}
		}
	}
	small, big := rows[0][0], rows[0][1]
	t.Logf("α %.2f µs at 64 B, %.1f µs at 4 MiB; balanced allreduce %.2f µs, %.1f µs", small.AlphaUs, big.AlphaUs, small.BalancedUs, big.BalancedUs)
	if small.AlphaUs <= 0 || big.AlphaUs <= small.AlphaUs {
		t.Errorf("α %.2f µs at 64 B and %.2f µs at 4 MiB: want a positive α that grows with the message", small.AlphaUs, big.AlphaUs)
	}
	if big.AlphaUs >= big.BalancedUs {
		t.Errorf("4 MiB: α %.1f µs, the balanced allreduce %.1f µs: want one message to take less than the allreduce of 3 ranks",
			big.AlphaUs, big.BalancedUs)
	}

	cfg.Alpha = AlphaCollective
	cfg.SizeList = []int64{64}
	rows = mustRunImbalance(t, n, cfg)
	if row := rows[0][0]; row.AlphaUs != row.BalancedUs {
		t.Errorf("α collective: α %v µs, want the balanced latency %v µs", row.AlphaUs, row.BalancedUs)
	}

	cfg.Alpha = AlphaP2P
	if _, errs := runImbalance(t, 1, cfg); !errors.Is(errs[0], errAlphaOneRank) {
		t.Errorf("one rank, α p2p: %v, want %v", errs[0], errAlphaOneRank)
	}
	cfg.Alpha = "message"
	if _, errs := runImbalance(t, 1, cfg); errs[0] == nil || CheckAlpha("message") == nil {
		t.Errorf("α %q: %v, want an error", cfg.Alpha, errs[0])
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
