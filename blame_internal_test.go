package braid

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestWaitChainNamesAbsentRank: rank 0 waits for rank 1, which waits for
// rank 2, which never makes its call (a stopped rank, or one busy outside
// Braid). Rank 0 starts waiting first, so its timeout comes first; it must
// hold it back, because rank 1 said it waits too, until rank 1's timeout
// names rank 2, and then report that: every rank's error names rank 2
// (issue 16's chaos campaign, stopped ranks). The cases are the waits
// that did not take part in the hold before:
//
//   - between calls: rank 0's probe reaches rank 1 before rank 1 begins
//     the call in which it waits (it was kept by no call, so never
//     answered);
//   - area: rank 1 waits in the shared area (whose waits neither probed
//     nor answered probes, and held their timeout a fixed 1 s past it
//     whatever the rank waited for), from the start or after being
//     probed between calls; or rank 0 waits in the area for rank 1;
//   - confirmation: rank 0 waits for the lagged confirmation of an earlier
//     call (whose call was no longer active when its timeout decided on
//     the hold), and its probe reaches rank 1 between calls.
//
// The hold is made long here, so that only the order of events matters:
// rank 1 begins to wait (after late) well before rank 0's timeout, and
// times out well after it.
func TestWaitChainNamesAbsentRank(t *testing.T) {
	h := holdMost
	holdMost = time.Minute
	t.Cleanup(func() { holdMost = h }) // after the parallel subtests
	const timeout = 3 * time.Second
	cases := []struct {
		name, algo string
		late       time.Duration // rank 1's sleep before its call that waits
		// first is what every rank runs (rank 2 too), then rank 0 runs
		// zero, rank 1 one (each ends in a wait).
		first, zero, one func(ctx context.Context, c *Comm, b []float32) error
	}{
		{
			name: "between calls", algo: "bcast=linear,reduce=linear", late: 500 * time.Millisecond,
			zero: func(ctx context.Context, c *Comm, b []float32) error {
				if err := c.Reduce(ctx, b, b, Sum, 1); err != nil {
					return err
				}
				return c.Bcast(ctx, b, 1) // waits for rank 1's data
			},
			one: func(ctx context.Context, c *Comm, b []float32) error {
				return c.Reduce(ctx, b, b, Sum, 1) // waits for rank 2's input
			},
		},
		{
			name: "area", algo: "reduce=shm,bcast=linear",
			zero: func(ctx context.Context, c *Comm, b []float32) error {
				if err := c.Reduce(ctx, b, b, Sum, 1); err != nil {
					return err
				}
				return c.Bcast(ctx, b, 1)
			},
			one: func(ctx context.Context, c *Comm, b []float32) error {
				return c.Reduce(ctx, b, b, Sum, 1) // waits in the area
			},
		},
		{
			name: "area, between calls", algo: "reduce=shm,bcast=linear", late: 500 * time.Millisecond,
			zero: func(ctx context.Context, c *Comm, b []float32) error {
				if err := c.Reduce(ctx, b, b, Sum, 1); err != nil {
					return err
				}
				return c.Bcast(ctx, b, 1)
			},
			one: func(ctx context.Context, c *Comm, b []float32) error {
				return c.Reduce(ctx, b, b, Sum, 1)
			},
		},
		{
			// The other way round: rank 0 waits in the area (which held
			// a fixed 1 s past its timeout, less than rank 1's lateness).
			name: "area holds", algo: "bcast=shm,reduce=linear", late: 1500 * time.Millisecond,
			zero: func(ctx context.Context, c *Comm, b []float32) error {
				if err := c.Reduce(ctx, b, b, Sum, 1); err != nil {
					return err
				}
				return c.Bcast(ctx, b, 1) // waits in the area for rank 1
			},
			one: func(ctx context.Context, c *Comm, b []float32) error {
				return c.Reduce(ctx, b, b, Sum, 1) // waits for rank 2's input
			},
		},
		{
			name: "confirmation", algo: "bcast=linear,reduce=linear", late: 500 * time.Millisecond,
			first: func(ctx context.Context, c *Comm, b []float32) error {
				return c.Bcast(ctx, b, 1) // confirmed at rank 1 once every rank's call 2 is over
			},
			zero: func(ctx context.Context, c *Comm, b []float32) error {
				return c.Reduce(ctx, b, b, Sum, 1) // then waits for rank 1's confirmation of call 1
			},
			one: func(ctx context.Context, c *Comm, b []float32) error {
				return c.Reduce(ctx, b, b, Sum, 1) // waits for rank 2's input
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each mostly waits for its timeouts
			comms, err := NewLocal(3, &Options{Timeout: timeout, Algo: tc.algo})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Go(func() {
					b := make([]float32, 16)
					if tc.first != nil {
						if errs[r] = tc.first(ctx, c, b); errs[r] != nil {
							return
						}
					}
					switch r {
					case 0:
						errs[r] = tc.zero(ctx, c, b)
					case 1:
						time.Sleep(tc.late)
						errs[r] = tc.one(ctx, c, b)
					}
				})
			}
			wg.Wait()
			for r := range 2 {
				var e *Error
				switch {
				case !errors.As(errs[r], &e):
					t.Errorf("rank %d: want an error naming rank 2, got %v", r, errs[r])
				case e.Peer != 2 || e.Kind != Timeout:
					t.Errorf("rank %d: want a Timeout naming rank 2, got %v (kind %v, peer %d)", r, e, e.Kind, e.Peer)
				default:
					t.Logf("rank %d: %v", r, e)
				}
			}
			for _, c := range comms {
				c.Close()
			}
		})
	}
}
