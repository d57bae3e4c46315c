package braid

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRequestWaitRunsCall checks who runs a non-blocking call: a Wait with
// a context that never ends runs a call that has not begun, once, and
// returns its error; a Wait with a context that can end leaves it to the
// background and returns the context's error.
func TestRequestWaitRunsCall(t *testing.T) {
	boom := errors.New("the call's error")
	runs := 0
	r := newRequest()
	r.body = func() error { runs++; return boom } // not started: only a Wait can run it

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a deadline: %v, want the context's error", err)
	}
	if done, _ := r.Test(); done || runs != 0 {
		t.Fatalf("after a Wait with a deadline: done %v, %d runs; want the call left alone", done, runs)
	}
	if err := r.Wait(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Wait: %v, want the call's error", err)
	}
	if err := r.Wait(context.Background()); !errors.Is(err, boom) || runs != 1 {
		t.Fatalf("second Wait: %v after %d runs; want the call's error after 1", err, runs)
	}
	r.run() // the goroutine that start would have begun: too late, runs nothing
	if runs != 1 {
		t.Fatalf("%d runs, want 1", runs)
	}
}
