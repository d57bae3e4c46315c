package braid_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/launch"
)

// TestArrivalMetrics delays rank r by r·d before each of its calls, so
// that the arrivals are (0, d, 2d, 3d) plus scheduling noise: Ω = 3d and
// Δ̄ = d (the mean of 1.5d, 0.5d, 0.5d, 1.5d). Through the shared area
// every rank knows every rank's stamp: the metrics must be those, within
// tolerances for the noise, rank 3 arrived last, and every rank holds the
// same figures (the same stamps). Run as schedules (BRAID_ALGO=ring), a
// rank knows only its own arrival: nothing is Known, and rank 0's time in
// the call holds its wait for rank 3.
func TestArrivalMetrics(t *testing.T) {
	const (
		n     = 4
		calls = 5
		d     = 20 * time.Millisecond
	)
	for _, algo := range []string{"shm", "ring"} {
		t.Run(algo, func(t *testing.T) {
			comms, err := braid.NewLocal(n, &braid.Options{Algo: algo})
			if err != nil {
				t.Fatal(err)
			}
			stats := make([]braid.ArrivalStats, n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v := make([]float64, 4)
					for range calls {
						time.Sleep(time.Duration(r) * d)
						if err := c.Allreduce(context.Background(), v, v, braid.Sum); err != nil {
							t.Error(err)
							return
						}
					}
					var err error
					stats[r], err = c.Arrivals("allreduce", 32)
					if err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			for _, c := range comms {
				c.Close()
			}
			if t.Failed() {
				return
			}
			for r, s := range stats {
				t.Logf("rank %d: %+v", r, s)
				if s.Calls != calls {
					t.Errorf("rank %d: %d calls recorded, want %d", r, s.Calls, calls)
				}
			}
			if algo == "ring" {
				for r, s := range stats {
					if s.Known != 0 || s.LastRank != -1 {
						t.Errorf("rank %d knows arrival patterns of schedules' calls: %+v", r, s)
					}
				}
				if stats[0].MeanTime < 3*d*8/10 {
					t.Errorf("rank 0's mean time in the call %v, want at least about 3d = %v", stats[0].MeanTime, 3*d)
				}
				return
			}
			s := stats[0]
			if s.Known != calls {
				t.Errorf("%d calls with every rank's arrival known, want %d", s.Known, calls)
			}
			const slack = 150 * time.Millisecond // a loaded machine oversleeps
			if s.MeanWorst < 3*d*8/10 || s.MeanWorst > 3*d+slack {
				t.Errorf("mean worst-case imbalance Ω %v, want about 3d = %v", s.MeanWorst, 3*d)
			}
			if s.MeanAverage < d/2 || s.MeanAverage > d+slack {
				t.Errorf("mean average-case imbalance Δ̄ %v, want about d = %v", s.MeanAverage, d)
			}
			if s.MaxWorst < s.MeanWorst || s.LastRank != 3 || s.Alpha <= 0 || s.WorstFactor() <= 0 {
				t.Errorf("max %v, last rank %d, α %v, factor %v: want max ≥ mean, rank 3 last, α > 0",
					s.MaxWorst, s.LastRank, s.Alpha, s.WorstFactor())
			}
			for r := 1; r < n; r++ {
				o := stats[r]
				if o.MeanWorst != s.MeanWorst || o.MaxWorst != s.MaxWorst || o.MeanAverage != s.MeanAverage || o.LastRank != s.LastRank {
					t.Errorf("rank %d's figures differ from rank 0's: %+v", r, o)
				}
			}
		})
	}
}

func TestArrivalsErrors(t *testing.T) {
	comms, err := braid.NewLocal(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	if _, err := comms[0].Arrivals("allscatter", 8); err == nil {
		t.Error("Arrivals of an unknown collective: no error")
	}
	if _, err := comms[0].Arrivals("allreduce", -1); err == nil {
		t.Error("Arrivals of a negative size: no error")
	}
	s, err := comms[0].Arrivals("bcast", 1<<20)
	if err != nil || s.Calls != 0 || s.LastRank != -1 {
		t.Errorf("Arrivals of a site without calls: %+v, %v", s, err)
	}
}

func init() { childRoles["clock"] = clockChild }

// clockChild is one rank of TestClockOffset: it claims a host of its own,
// and prints its clock offset and its bound.
func clockChild() int {
	c, err := braid.Init(context.Background(), &braid.Options{Host: "host" + os.Getenv("BRAID_RANK")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	off, bound := c.ClockOffset()
	fmt.Printf("OFFSET %d %d %d\n", c.Rank(), off, bound)
	return 0
}

// TestClockOffset runs three ranks that claim three hosts (over TCP), so
// that ranks 1 and 2 estimate their clock's offset from rank 0's host. The
// processes share one clock: the true offset is 0, which the estimate
// must hold within its bound (half the best round trip), and rank 0's
// offset is 0 exactly.
func TestClockOffset(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	out := runClockChildren(t, "clock")
	seen := 0
	for _, l := range strings.Split(out, "\n") {
		var r int
		var off, bound time.Duration
		if _, err := fmt.Sscanf(l, "OFFSET %d %d %d", &r, &off, &bound); err != nil {
			continue
		}
		seen++
		t.Logf("rank %d: offset %v ± %v", r, off, bound)
		switch {
		case r == 0 && (off != 0 || bound != 0):
			t.Errorf("rank 0: offset %v ± %v, want 0", off, bound)
		case r > 0 && (bound <= 0 || off > bound || off < -bound):
			t.Errorf("rank %d: offset %v ± %v does not hold the true offset 0", r, off, bound)
		}
	}
	if seen != 3 {
		t.Errorf("%d ranks printed their offset:\n%s", seen, out)
	}
}

// runClockChildren runs three ranks of child role (over TCP: each claims
// a host of its own) and returns their output.
func runClockChildren(t *testing.T, role string) string {
	t.Helper()
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := launch.Run(ctx, launch.Config{N: 3, Prog: os.Args[0], Stdout: &out, Stderr: &out,
		Env: []string{"BRAID_TEST_CHILD=" + role}})
	if err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	return out.String()
}

func init() { childRoles["clockrefresh"] = clockRefreshChild }

// clockRefreshChild is one rank of TestClockRefresh: it claims a host of
// its own, refreshes its clock offset every 20 ms, and on ranks other
// than 0 skews it by 5 ms after Init (a drift that Init's estimate does
// not know of); it prints its offset, bound and refreshes once it has
// refreshed twice since (or after 5 s).
func clockRefreshChild() int {
	c, err := braid.Init(context.Background(), &braid.Options{Host: "host" + os.Getenv("BRAID_RANK"), ClockRefresh: 20 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	if c.Rank() != 0 {
		braid.SkewClock(c, 5*time.Millisecond)
		n0 := braid.ClockRefreshes(c)
		for end := time.Now().Add(5 * time.Second); braid.ClockRefreshes(c) < n0+2 && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := c.Barrier(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	off, bound := c.ClockOffset()
	fmt.Printf("REFRESHED %d %d %d %d\n", c.Rank(), off, bound, braid.ClockRefreshes(c))
	return 0
}

// TestClockRefresh: ranks on other hosts than rank 0's refresh their
// clock offset in the background (Options.ClockRefresh), so that a drift
// after Init is corrected: three ranks claim three hosts (over TCP) and
// share one clock (the true offset is 0); ranks 1 and 2 skew their offset
// by 5 ms after Init, and within two refreshes hold 0 within their bound
// again. Without the refresh they would keep the 5 ms.
func TestClockRefresh(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	out := runClockChildren(t, "clockrefresh")
	seen := 0
	for _, l := range strings.Split(out, "\n") {
		var r int
		var off, bound time.Duration
		var n uint64
		if _, err := fmt.Sscanf(l, "REFRESHED %d %d %d %d", &r, &off, &bound, &n); err != nil {
			continue
		}
		seen++
		t.Logf("rank %d: offset %v ± %v after %d refreshes", r, off, bound, n)
		switch {
		case r == 0 && (off != 0 || bound != 0 || n != 0):
			t.Errorf("rank 0: offset %v ± %v, %d refreshes, want 0", off, bound, n)
		case r > 0 && n < 2:
			t.Errorf("rank %d: %d refreshes, want 2", r, n)
		case r > 0 && (bound <= 0 || off > bound || off < -bound):
			t.Errorf("rank %d: offset %v ± %v does not hold the true offset 0", r, off, bound)
		}
	}
	if seen != 3 {
		t.Errorf("%d ranks printed their offset:\n%s", seen, out)
	}
}
