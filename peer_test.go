package braid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
)

// TestP2PPeerOnSplit: a point-to-point call that fails names its peer by
// its rank in the communicator of the call, here a split that reverses
// the world's order (split rank = 3 - world rank), whether the failure is
// a mismatch the transport finds or a timeout.
func TestP2PPeerOnSplit(t *testing.T) {
	const n = 4
	cases := []struct {
		name string
		kind braid.ErrorKind
		run  func(ctx context.Context, sub *braid.Comm) error // on split ranks 0 to 3
		rank int                                              // the split rank that must fail so
		peer int                                              // naming this split rank
	}{
		{"mismatch", braid.Mismatch, func(ctx context.Context, sub *braid.Comm) error {
			switch sub.Rank() {
			case 0:
				return sub.Send(ctx, make([]float32, 8), 1, 7)
			case 1:
				return sub.Recv(ctx, make([]float32, 16), 0, 7)
			}
			return nil
		}, 1, 0},
		{"timeout", braid.Timeout, func(ctx context.Context, sub *braid.Comm) error {
			if sub.Rank() == 2 {
				ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				return sub.Recv(ctx, make([]float32, 4), 3, 9)
			}
			return nil
		}, 2, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := make([]error, n)
			onRanks(t, n, &braid.Options{Timeout: 5 * time.Second}, func(w *braid.Comm) error {
				ctx := context.Background()
				sub, err := w.Split(ctx, 0, -w.Rank())
				if err != nil {
					return err
				}
				if sub.Rank() != n-1-w.Rank() {
					t.Errorf("world rank %d is split rank %d, want %d", w.Rank(), sub.Rank(), n-1-w.Rank())
				}
				errs[sub.Rank()] = c.run(ctx, sub)
				return nil
			})
			var e *braid.Error
			if !errors.As(errs[c.rank], &e) || e.Kind != c.kind {
				t.Fatalf("split rank %d: %v, want %v", c.rank, errs[c.rank], c.kind)
			}
			if e.Peer != c.peer || e.Rank != c.rank {
				t.Errorf("split rank %d: Rank %d, Peer %d, want rank %d naming its peer split rank %d (world rank %d): %v",
					c.rank, e.Rank, e.Peer, c.rank, c.peer, n-1-c.peer, e)
			}
			// The message gives the world ranks too, which the
			// transport's words in it use.
			want := fmt.Sprintf("braid: rank %d (world rank %d): recv: %v (peer rank %d, world rank %d): ", c.rank, n-1-c.rank, c.kind, c.peer, n-1-c.peer)
			if !strings.HasPrefix(e.Error(), want) {
				t.Errorf("split rank %d: %q, want it to start %q", c.rank, e.Error(), want)
			}
		})
	}
}

// TestAbortPeerOnSplit: when a rank of a split (in reverse order) calls
// Abort, every other rank's pending call fails with Aborted naming that
// rank by its rank in the split, also where the abort reached it through
// another rank first.
func TestAbortPeerOnSplit(t *testing.T) {
	const n = 4
	for range 5 {
		errs := make([]error, n)
		onRanks(t, n, &braid.Options{Timeout: 5 * time.Second}, func(w *braid.Comm) error {
			ctx := context.Background()
			sub, err := w.Split(ctx, 0, -w.Rank())
			if err != nil {
				return err
			}
			if sub.Rank() == 1 {
				sub.Abort(errors.New("the user's reason"))
				return nil
			}
			errs[sub.Rank()] = sub.Allreduce(ctx, make([]float32, 8), make([]float32, 8), braid.Sum)
			return nil
		})
		for r, err := range errs {
			if r == 1 {
				continue
			}
			var e *braid.Error
			if !errors.As(err, &e) || e.Kind != braid.Aborted || e.Peer != 1 {
				t.Errorf("split rank %d: %v; want Aborted naming split rank 1 (world rank 2)", r, err)
			}
		}
	}
}
