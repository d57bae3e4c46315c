package braid_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
)

// wantKinds checks that every rank failed, the reporting rank with kind
// want and the others with want or Aborted (they learn of it second-hand),
// all within the test's deadline.
func wantKinds(t *testing.T, errs []error, bad int, want braid.ErrorKind) {
	t.Helper()
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: no error, want %v", r, want)
			continue
		}
		var be *braid.Error
		if !errors.As(err, &be) {
			t.Errorf("rank %d: error %v is not a *braid.Error", r, err)
			continue
		}
		if r == bad && be.Kind != want {
			t.Errorf("rank %d: kind %v, want %v: %v", r, be.Kind, want, err)
		}
		if r != bad && be.Kind != want && be.Kind != braid.Aborted {
			t.Errorf("rank %d: kind %v, want %v or aborted: %v", r, be.Kind, want, err)
		}
		if !strings.Contains(err.Error(), "rank ") {
			t.Errorf("rank %d: error does not name a rank: %v", r, err)
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestBadInput(t *testing.T) {
	const n = 4
	cases := []struct {
		name string
		bad  func(ctx context.Context, c *braid.Comm) error
		want braid.ErrorKind
	}{
		{"unknown dtype", func(ctx context.Context, c *braid.Comm) error {
			b := braid.Raw{Bytes: make([]byte, 16), Type: braid.DType(99)}
			return c.Allreduce(ctx, b, b, braid.Sum)
		}, braid.InvalidArgument},
		{"unknown op", func(ctx context.Context, c *braid.Comm) error {
			b := make([]float32, 4)
			return c.Allreduce(ctx, b, b, braid.Op(99))
		}, braid.InvalidArgument},
		{"op not defined on dtype", func(ctx context.Context, c *braid.Comm) error {
			b := make([]float32, 4)
			return c.Allreduce(ctx, b, b, braid.BXor)
		}, braid.InvalidArgument},
		{"nil buffer", func(ctx context.Context, c *braid.Comm) error {
			return c.Allreduce(ctx, nil, make([]float32, 4), braid.Sum)
		}, braid.InvalidArgument},
		{"short receive buffer", func(ctx context.Context, c *braid.Comm) error {
			return c.Allreduce(ctx, make([]float32, 4), make([]float32, 3), braid.Sum)
		}, braid.InvalidArgument},
		{"dtype differs between send and receive", func(ctx context.Context, c *braid.Comm) error {
			return c.Allreduce(ctx, make([]float32, 4), make([]int32, 4), braid.Sum)
		}, braid.InvalidArgument},
		{"unsupported Go type", func(ctx context.Context, c *braid.Comm) error {
			return c.Allreduce(ctx, []string{"a"}, []string{"b"}, braid.Sum)
		}, braid.InvalidArgument},
		{"root out of range", func(ctx context.Context, c *braid.Comm) error {
			return c.Bcast(ctx, make([]float32, 4), n)
		}, braid.InvalidArgument},
		{"negative root", func(ctx context.Context, c *braid.Comm) error {
			return c.Reduce(ctx, make([]float32, 4), make([]float32, 4), braid.Sum, -1)
		}, braid.InvalidArgument},
		{"overlapping buffers", func(ctx context.Context, c *braid.Comm) error {
			b := make([]float32, 8)
			return c.Allreduce(ctx, b[:4], b[2:6], braid.Sum)
		}, braid.InvalidArgument},
		{"allgather receive size", func(ctx context.Context, c *braid.Comm) error {
			return c.Allgather(ctx, make([]float32, 4), make([]float32, 4*n-1))
		}, braid.InvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const bad = 1
			errs := onRanks(t, n, nil, func(c *braid.Comm) error {
				ctx := ctxT(t)
				if c.Rank() == bad {
					return tc.bad(ctx, c)
				}
				b := make([]float32, 4)
				return c.Allreduce(ctx, b, b, braid.Sum)
			})
			wantKinds(t, errs, bad, tc.want)
		})
	}
}

func TestBadInputEverywhere(t *testing.T) {
	// The same bad call on every rank: each reports InvalidArgument itself.
	errs := onRanks(t, 3, nil, func(c *braid.Comm) error {
		b := make([]float32, 4)
		return c.Allreduce(ctxT(t), b, b, braid.Op(42))
	})
	for r, err := range errs {
		if braid.KindOf(err) != braid.InvalidArgument {
			t.Errorf("rank %d: %v, want invalid argument", r, err)
		}
	}
}

func TestMismatch(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, c *braid.Comm) error
	}{
		{"count", func(ctx context.Context, c *braid.Comm) error {
			n := 1000
			if c.Rank() == 2 {
				n = 1001
			}
			b := make([]float32, n)
			return c.Allreduce(ctx, b, b, braid.Sum)
		}},
		{"dtype", func(ctx context.Context, c *braid.Comm) error {
			if c.Rank() == 2 {
				b := make([]int32, 100)
				return c.Allreduce(ctx, b, b, braid.Sum)
			}
			b := make([]float32, 100)
			return c.Allreduce(ctx, b, b, braid.Sum)
		}},
		{"op", func(ctx context.Context, c *braid.Comm) error {
			op := braid.Sum
			if c.Rank() == 2 {
				op = braid.Max
			}
			b := make([]float32, 100)
			return c.Allreduce(ctx, b, b, op)
		}},
		{"root", func(ctx context.Context, c *braid.Comm) error {
			root := 0
			if c.Rank() == 2 {
				root = 1
			}
			return c.Bcast(ctx, make([]float32, 100), root)
		}},
		{"collective", func(ctx context.Context, c *braid.Comm) error {
			b := make([]float32, 100)
			if c.Rank() == 2 {
				return c.Reduce(ctx, b, b, braid.Sum, 0)
			}
			return c.Allreduce(ctx, b, b, braid.Sum)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mismatches atomic.Int32
			errs := onRanks(t, 4, &braid.Options{Timeout: 10 * time.Second}, func(c *braid.Comm) error {
				err := tc.call(ctxT(t), c)
				if braid.KindOf(err) == braid.Mismatch {
					mismatches.Add(1)
				}
				if err == nil {
					// A rank whose part of the call was consistent (e.g. a
					// bcast leaf whose parent agreed on the root) can
					// finish; it learns of the failure at its next call.
					err = c.Barrier(ctxT(t))
				}
				return err
			})
			for r, err := range errs {
				k := braid.KindOf(err)
				if k != braid.Mismatch && k != braid.Aborted {
					t.Errorf("rank %d: %v, want mismatch or aborted", r, err)
				}
			}
			if mismatches.Load() == 0 {
				t.Errorf("no rank reported the mismatch")
			}
		})
	}
}

func TestAbort(t *testing.T) {
	errs := onRanks(t, 4, nil, func(c *braid.Comm) error {
		if c.Rank() == 3 {
			time.Sleep(50 * time.Millisecond)
			c.Abort(errors.New("user gave up"))
			return braid.ErrAborted
		}
		b := make([]float32, 1000)
		return c.Allreduce(ctxT(t), b, b, braid.Sum)
	})
	for r, err := range errs {
		if braid.KindOf(err) != braid.Aborted && r != 3 {
			t.Errorf("rank %d: %v, want aborted", r, err)
		}
	}
}

func TestTimeout(t *testing.T) {
	start := time.Now()
	errs := onRanks(t, 3, &braid.Options{Timeout: 300 * time.Millisecond}, func(c *braid.Comm) error {
		if c.Rank() == 0 {
			// Never joins; waits for the others to give up.
			time.Sleep(time.Second)
			return braid.ErrTimeout
		}
		b := make([]float32, 10)
		return c.Allreduce(context.Background(), b, b, braid.Sum)
	})
	for r, err := range errs {
		if k := braid.KindOf(err); k != braid.Timeout && k != braid.Aborted {
			t.Errorf("rank %d: %v, want timeout", r, err)
		}
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v", el)
	}
}

func TestErrorsIs(t *testing.T) {
	e := &braid.Error{Kind: braid.PeerLost, Rank: 1, Call: "allreduce", Peer: 2, Err: errors.New("x")}
	if !errors.Is(e, braid.ErrPeerLost) || errors.Is(e, braid.ErrTimeout) {
		t.Fatal("errors.Is does not match kinds")
	}
	if !strings.Contains(e.Error(), "rank 1") || !strings.Contains(e.Error(), "peer rank 2") {
		t.Fatalf("message %q", e.Error())
	}
}

// TestTimeoutSaysWhichLimit: a call that waits in vain says which limit
// ended it: the communicator's timeout (BRAID_TIMEOUT, Options.Timeout)
// for a call whose context has no deadline, else the context's deadline,
// which the timeout does not override. Through a schedule (ring), the
// shared area (shm) and a receive.
func TestTimeoutSaysWhichLimit(t *testing.T) {
	const limit = 100 * time.Millisecond
	for _, algo := range []string{"ring", "shm", "recv"} {
		for _, byCtx := range []bool{false, true} {
			opts := &braid.Options{Timeout: limit}
			if byCtx {
				opts.Timeout = time.Minute
			}
			if algo != "recv" {
				opts.Algo = "allreduce=" + algo
			}
			errs := onRanks(t, 2, opts, func(c *braid.Comm) error {
				if c.Rank() == 0 {
					return nil // never calls
				}
				ctx := context.Background()
				if byCtx {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, limit)
					defer cancel()
				}
				b := make([]float32, 4)
				if algo == "recv" {
					return c.Recv(ctx, b, 0, 1)
				}
				return c.Allreduce(ctx, b, b, braid.Sum)
			})
			err := errs[1]
			want, not := "no progress within the timeout (100ms", "before the call's context deadline"
			if byCtx {
				want, not = "no progress before the call's context deadline (BRAID_TIMEOUT, 1m0s, applies to calls without one)", "within the timeout"
			}
			if braid.KindOf(err) != braid.Timeout || !errors.Is(err, context.DeadlineExceeded) ||
				!strings.Contains(err.Error(), want) || strings.Contains(err.Error(), not) {
				t.Errorf("%s, deadline in the context %v: %v; want a timeout that says %q", algo, byCtx, err, want)
			}
		}
	}
}
