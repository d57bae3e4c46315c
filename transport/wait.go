package transport

import (
	"context"

	"github.com/braid-ccl/braid/internal/wait"
)

// Backoff is Braid's one waiting policy (internal/wait.Backoff): spin,
// then yield the processor, then sleep or block on a channel. The
// executor, the transports and the GPU loops all wait through it.
type Backoff = wait.Backoff

// The backoff's tuning (see internal/wait).
const (
	SpinPolls     = wait.SpinPolls
	OverSpinPolls = wait.OverSpinPolls
	YieldFor      = wait.YieldFor
	MinSleep      = wait.MinSleep
	MaxSleep      = wait.MaxSleep
)

// Wait waits until every request completes, or one fails, or ctx ends, or
// fail (which may be nil) returns an error. It returns the first error.
func Wait(ctx context.Context, fail func() error, reqs ...Request) error {
	var b Backoff
	pending := append([]Request(nil), reqs...)
	for polls := 0; len(pending) > 0; polls++ {
		progressed := false
		keep := pending[:0]
		for _, r := range pending {
			done, err := r.Test()
			if err != nil {
				return err
			}
			if done {
				progressed = true
				continue
			}
			keep = append(keep, r)
		}
		pending = keep
		if len(pending) == 0 {
			return nil
		}
		if progressed {
			b.Reset()
		}
		if polls&63 == 0 || b.Spun() {
			if err := ctx.Err(); err != nil {
				return err
			}
			if fail != nil {
				if err := fail(); err != nil {
					return err
				}
			}
		}
		b.Idle(pending[0].Done())
	}
	return nil
}

// DoneRequest is a Request that completed at creation, with err.
type DoneRequest struct{ Err error }

// Test returns true and the request's error.
func (d DoneRequest) Test() (bool, error) { return true, d.Err }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done returns a closed channel.
func (d DoneRequest) Done() <-chan struct{} { return closedChan }
