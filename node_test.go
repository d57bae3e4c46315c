package braid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
)

// nodeCollectives are the collectives the host's shared area runs
// (algorithm "shm").
var nodeCollectives = []sched.Collective{sched.Allreduce, sched.Reduce, sched.Bcast, sched.Allgather, sched.ReduceScatter, sched.Barrier}

// nodeAlgo stands for the "shm" path in matrixCases, which asks an
// algorithm which calls it supports: the shared area runs them all.
type nodeAlgo struct{ coll sched.Collective }

func (nodeAlgo) Name() string                                   { return "shm" }
func (a nodeAlgo) Collective() sched.Collective                 { return a.coll }
func (nodeAlgo) Supports(sched.Params) error                    { return nil }
func (nodeAlgo) Program(p sched.Params, rank int) sched.Program { panic("shm has no schedule") }

var _ algo.Algorithm = nodeAlgo{}

// TestMatrixShm runs the matrix's cases through the shared area: every
// dtype and op at the small counts, float32 at the large ones (many
// chunks), in place and not, every root, on 1–9 ranks, and the small
// counts on 16 and 17 (allreduce, reduce-scatter and allgather also by
// recursive doubling, on 4, 8, 16 and 17 ranks).
func TestMatrixShm(t *testing.T) {
	for _, coll := range nodeCollectives {
		t.Run(coll.String(), func(t *testing.T) {
			t.Parallel()
			for n := 1; n <= 9; n++ {
				runCases(t, coll, "shm", n, nil, matrixCases(coll, nodeAlgo{coll}, n))
			}
			small := func(n int) []mcase {
				var small []mcase
				for _, k := range matrixCases(coll, nodeAlgo{coll}, n) {
					if k.count <= 1000 {
						small = append(small, k)
					}
				}
				return small
			}
			for _, n := range []int{16, 17} {
				runCases(t, coll, "shm", n, nil, small(n))
			}
			if coll == sched.Allreduce || coll == sched.ReduceScatter || coll == sched.Allgather {
				// Recursive doubling, which the area takes on 4, 8 and
				// 16 or more ranks where they have a core each (not on a
				// 2-core machine): an allreduce of up to 1 KiB, a
				// reduce-scatter of up to 1 KiB in blocks of up to a
				// line, an allgather of up to 1 KiB on a power of two
				// ranks.
				undo := braid.KeepDoubling()
				for _, n := range []int{4, 8, 16, 17} {
					runCases(t, coll, "shm", n, nil, small(n))
				}
				undo()
			}
		})
	}
}

// TestShmChosen checks that the planner takes the shared area for small
// calls of ranks on one host, and that forcing it where it cannot run
// says why.
func TestShmChosen(t *testing.T) {
	comms, err := braid.NewLocal(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	for _, coll := range []string{"allreduce", "bcast", "allgather", "reducescatter", "reduce", "barrier"} {
		a, why, err := comms[0].Explain(coll, 2, braid.Float32, 0)
		if err != nil || a != "shm" {
			t.Errorf("%s of 8 bytes on 4 local ranks: %s (%s, %v), want shm", coll, a, why, err)
		}
	}
	// Emulated hosts: no shared area, and forcing it is Unsupported.
	hosted, err := braid.NewLocal(2, &braid.Options{LocalHosts: []string{"a", "b"}, Algo: "allreduce=shm"})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, c := range hosted {
		go func() {
			errs <- c.Allreduce(context.Background(), []float32{1}, make([]float32, 1), braid.Sum)
		}()
	}
	// The first rank to plan reports Unsupported; the other may see that
	// rank's abort first. Both name the cause.
	for range 2 {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "unsupported: BRAID_ALGO forces shm: the shared area runs") {
			t.Errorf("forcing shm across emulated hosts: %v, want Unsupported naming the shared area", err)
		}
	}
}

// TestShmMismatch: ranks that disagree about a call through the shared
// area get Mismatch on every rank by their next call. Each rank here
// broadcasts from itself: none reads another's data, so the call itself
// cannot tell; the next one (a barrier) compares the ranks' running hashes
// of their calls.
func TestShmMismatch(t *testing.T) {
	errs := onRanks(t, 3, &braid.Options{Algo: "bcast=shm,barrier=shm", Timeout: 5 * time.Second}, func(c *braid.Comm) error {
		buf := []float32{float32(c.Rank())}
		if err := c.Bcast(context.Background(), buf, c.Rank()); err != nil {
			return err
		}
		return c.Barrier(context.Background())
	})
	for r, err := range errs {
		var be *braid.Error
		if !errors.As(err, &be) || be.Kind != braid.Mismatch {
			t.Errorf("rank %d: %v, want Mismatch", r, err)
		}
	}
}

// TestShmTimeoutNamesPeer: a rank that never makes the call is named in
// the others' timeout.
func TestShmTimeoutNamesPeer(t *testing.T) {
	comms, err := braid.NewLocal(3, &braid.Options{Algo: "allreduce=shm", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, c := range comms[:2] {
		go func() {
			errs <- c.Allreduce(context.Background(), []float32{1}, make([]float32, 1), braid.Sum)
		}()
	}
	// The first rank to time out names rank 2 and aborts the job; the
	// other reports that cause.
	for range 2 {
		err := <-errs
		var be *braid.Error
		if !errors.As(err, &be) || !strings.Contains(err.Error(), "waited for rank 2 (call ") {
			t.Errorf("%v, want an error naming rank 2", err)
		}
	}
	for _, c := range comms {
		c.Close()
	}
}

// TestShmSplit: communicators split from one with a shared area get areas
// of their own, and their collectives through them are right.
func TestShmSplit(t *testing.T) {
	errs := onRanks(t, 6, nil, func(c *braid.Comm) error {
		ctx := context.Background()
		color := c.Rank() % 2
		if c.Rank() == 5 {
			color = braid.Undefined
		}
		sub, err := c.Split(ctx, color, 0)
		if err != nil || sub == nil {
			return err
		}
		defer sub.Close()
		if a, why, err := sub.Explain("allreduce", 2, braid.Float32, 0); err != nil || a != "shm" {
			return fmt.Errorf("split of %d ranks: allreduce of 8 bytes runs %s (%s, %v), want shm", sub.Size(), a, why, err)
		}
		v := []float64{float64(c.Rank())}
		if err := sub.Allreduce(ctx, v, v, braid.Sum); err != nil {
			return err
		}
		want := map[int]float64{0: 0 + 2 + 4, 1: 1 + 3}[color]
		if v[0] != want {
			return fmt.Errorf("color %d: allreduce gave %v, want %v", color, v[0], want)
		}
		return sub.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestShmShapeExplained: the planner's reason for the shared area says how
// the area runs the call (Explain, BRAID_DEBUG=info).
func TestShmShapeExplained(t *testing.T) {
	undo := braid.KeepDoubling()
	defer undo()
	for _, tc := range []struct {
		coll     string
		n, count int // count: a rank's block for reducescatter and allgather
		want     string
		not      bool // the reason must not say want
	}{
		{"allreduce", 16, 64, "recursive doubling in 2 rounds", false},
		{"allreduce", 17, 64, "recursive doubling in 4 rounds", false},
		{"allreduce", 4, 2, "recursive doubling in 1 rounds", false},
		{"allreduce", 3, 2, "one phase", false},
		{"allreduce", 8, 2, "one phase", false}, // inside a flag line
		{"allreduce", 8, 16, "recursive doubling in 2 rounds", false},
		{"allreduce", 4, 4096, "two phases", false},
		{"reducescatter", 16, 1, "recursive halving in 2 rounds", false},
		{"reducescatter", 8, 17, "recursive halving in 2 rounds", false}, // blocks over a line
		{"reducescatter", 17, 1, "the whole input by recursive doubling in 4 rounds", false},
		{"reducescatter", 16, 17, "halving", true}, // the whole input over RDMax
		{"allgather", 16, 4, "recursive doubling in 2 rounds", false},
		{"allgather", 8, 2, "recursive doubling in 2 rounds", false},
		{"allgather", 5, 2, "doubling", true}, // not a power of two
	} {
		comms, err := braid.NewLocal(tc.n, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, why, err := comms[0].Explain(tc.coll, tc.count, braid.Float32, 0)
		for _, c := range comms {
			c.Close()
		}
		switch {
		case err != nil || a != "shm":
			t.Errorf("%s, %d ranks, %d floats: %s (%s, %v), want shm", tc.coll, tc.n, tc.count, a, why, err)
		case tc.not && strings.Contains(why, tc.want):
			t.Errorf("%s, %d ranks, %d floats: %s, want no %s", tc.coll, tc.n, tc.count, why, tc.want)
		case !tc.not && !strings.Contains(why, "the area runs it as "+tc.want):
			t.Errorf("%s, %d ranks, %d floats: %s, want shm run as %s", tc.coll, tc.n, tc.count, why, tc.want)
		}
	}
}

// TestDoublingDisagreement: 16 ranks of which half allreduce 1 KiB (by
// recursive doubling in the area) and half 2 KiB (two phases), and ranks
// that disagree on the reduction, or on allreduce against bcast, while
// doubling: every rank reports Mismatch, and none waits for its timeout.
func TestDoublingDisagreement(t *testing.T) {
	undo := braid.KeepDoubling()
	defer undo()
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, c *braid.Comm) error
	}{
		{"count", func(ctx context.Context, c *braid.Comm) error {
			b := make([]float32, 256*(1+c.Rank()%2))
			return c.Allreduce(ctx, b, b, braid.Sum)
		}},
		{"op", func(ctx context.Context, c *braid.Comm) error {
			op := braid.Sum
			if c.Rank() == 5 {
				op = braid.Max
			}
			b := make([]float32, 16)
			return c.Allreduce(ctx, b, b, op)
		}},
		{"bcast", func(ctx context.Context, c *braid.Comm) error {
			b := make([]float32, 16)
			if c.Rank() == 11 {
				return c.Bcast(ctx, b, 0)
			}
			return c.Allreduce(ctx, b, b, braid.Sum)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			errs := onRanks(t, 16, &braid.Options{Timeout: 20 * time.Second, Algo: "shm"}, func(c *braid.Comm) error {
				ctx := context.Background()
				if err := tc.call(ctx, c); err != nil {
					return err
				}
				return c.Barrier(ctx)
			})
			for r, err := range errs {
				if braid.KindOf(err) != braid.Mismatch {
					t.Errorf("rank %d: %v, want Mismatch", r, err)
				}
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("took %v: the ranks waited out their timeouts", d)
			}
		})
	}
}
