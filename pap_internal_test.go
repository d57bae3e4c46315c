package braid

import (
	"context"
	"sync"
	"testing"
)

// TestSharedReduceConfirmsInArea: a reduce through the shared area, by
// the area's own algorithm (shm) or the arrival-aware one (pap), leaves
// its non-root ranks a confirmation to settle in the area (shmcoll's
// Confirm, an entry without a program), and the root none to send: no
// confirmation messages. pap's went through messages once, which cost a
// 2-rank reduce 25 µs a call on the 2-core VM.
func TestSharedReduceConfirmsInArea(t *testing.T) {
	for _, name := range []string{"shm", "pap"} {
		comms, err := NewLocal(2, &Options{Algo: "reduce=" + name})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in, out := make([]float32, 4096), make([]float32, 4096)
				errs[r] = c.Reduce(context.Background(), in, out, Sum, 0)
			}()
		}
		wg.Wait()
		for r, e := range errs {
			if e != nil {
				t.Fatalf("%s: rank %d: %v", name, r, e)
			}
		}
		for r, c := range comms {
			k := &c.chk
			c.w.sigs.mu.Lock()
			conf := append([]confirmEntry(nil), k.conf...)
			c.w.sigs.mu.Unlock()
			want := r // the non-root (rank 1) owes one, the root none
			if len(conf) != want {
				t.Errorf("%s: rank %d owes %d confirmations, want %d", name, r, len(conf), want)
			}
			for _, e := range conf {
				if e.prog != nil {
					t.Errorf("%s: rank %d settles its confirmation by messages (%d steps), want through the area", name, r, len(e.prog.Steps))
				}
			}
		}
		for _, c := range comms {
			c.Close()
		}
	}
}
