package main

import (
	stdctx "context"
	"math"
	"sync"
	"testing"

	"github.com/braid-ccl/braid"
)

// TestRanksMatchOneProcess trains the MLP for 20 steps of a global batch
// of 64 on 1 rank and on 2 and 4 goroutine ranks, and checks that the
// ranks end with rank 0's parameters, that these are within 1e-4 of the
// one-rank run's (float32 gradient sums taken in another order: the mean
// of per-rank means instead of one mean), and that the test accuracy on
// 1,000 images is the same.
func TestRanksMatchOneProcess(t *testing.T) {
	trainSet, testSet, err := load(defaultDataDir())
	if err != nil {
		t.Skipf("MNIST data not found: %v", err)
	}
	cfg := config{steps: 20, batch: 64, hidden: 32, lr: 0.1, seed: 1, evalSamples: 1000}
	runOn := func(n int) []result {
		comms, err := braid.NewLocal(n, nil)
		if err != nil {
			t.Fatal(err)
		}
		res := make([]result, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Go(func() { res[r], errs[r] = run(stdctx.Background(), c, cfg, trainSet, testSet) })
		}
		wg.Wait()
		for _, c := range comms {
			c.Close()
		}
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%d ranks: rank %d: %v", n, r, err)
			}
		}
		return res
	}
	ref := runOn(1)[0]
	if ref.accuracy < 0.5 {
		t.Fatalf("one rank reached test accuracy %.3f after %d steps: the model does not learn", ref.accuracy, cfg.steps)
	}
	for _, n := range []int{2, 4} {
		res := runOn(n)
		for r := 1; r < n; r++ {
			for k := range res[0].params {
				for i, v := range res[0].params[k] {
					if res[r].params[k][i] != v {
						t.Fatalf("%d ranks: rank %d's parameter %d[%d] = %v, rank 0's %v", n, r, k, i, res[r].params[k][i], v)
					}
				}
			}
		}
		worst := 0.0
		for k := range ref.params {
			for i, v := range ref.params[k] {
				worst = max(worst, math.Abs(float64(res[0].params[k][i]-v)))
			}
		}
		if worst > 1e-4 {
			t.Errorf("%d ranks: largest parameter difference from one rank %.3g, want ≤ 1e-4", n, worst)
		}
		if res[0].accuracy != ref.accuracy {
			t.Errorf("%d ranks: test accuracy %.4f, one rank %.4f", n, res[0].accuracy, ref.accuracy)
		}
		t.Logf("%d ranks: largest parameter difference %.3g; test accuracy %.4f (one rank %.4f)", n, worst, res[0].accuracy, ref.accuracy)
	}
}
