package braid

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestSplitCloseLeavesNothing: ranks split the world, broadcast on the
// split communicator (a call that every rank but the root confirms one call
// late) and close it, many times over; the root sometimes closes long after
// the others (past the stall probes' 250 ms). Close settles the
// confirmations, so that no message of a closed communicator stays behind
// in the transports: before, every split left one message per peer, and a
// soak of 9,000 splits an hour grew every rank's heap.
func TestSplitCloseLeavesNothing(t *testing.T) {
	for _, algo := range []string{"bcast=binomial", "bcast=linear", ""} {
		t.Run(algo, func(t *testing.T) { splitCloseRounds(t, algo) })
	}
}

func splitCloseRounds(t *testing.T, algo string) {
	const n, rounds = 4, 40
	comms, err := NewLocal(n, &Options{Timeout: 20 * time.Second, Algo: algo})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			buf := make([]int32, 100)
			for it := range rounds {
				sub, err := c.Split(ctx, 0, r)
				if err != nil {
					t.Error(err)
					return
				}
				root := it % n
				if r == root {
					for i := range buf {
						buf[i] = int32(it*1000 + i)
					}
				}
				if err := sub.Bcast(ctx, buf, root); err != nil {
					t.Errorf("rank %d round %d: %v", r, it, err)
					return
				}
				if buf[7] != int32(it*1000+7) {
					t.Errorf("rank %d round %d: bcast gave %d", r, it, buf[7])
				}
				if r == root && it%10 == 3 {
					time.Sleep(400 * time.Millisecond)
				}
				if err := sub.Close(); err != nil {
					t.Errorf("rank %d round %d: close: %v", r, it, err)
					return
				}
			}
			if err := c.Barrier(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	held := 0
	for _, c := range comms {
		held += c.w.held()
	}
	if held != 0 {
		t.Errorf("%d messages stay behind in the transports after %d split communicators were closed", held, rounds)
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}
