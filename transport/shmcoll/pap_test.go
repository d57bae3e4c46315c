package shmcoll

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestPAP checks the arrival-aware allreduce and reduce against a
// reference while the ranks arrive at random times, with the leader
// (Algorithm 1) and the chain (Algorithm 2), inline, slot-sized and
// several chunks, in place and not, every root, and the same bits on every
// rank.
func TestPAP(t *testing.T) {
	o := Options{Slot: 4096, FlatMax: 256}
	counts := []int{0, 1, 5, 6, 31, 500, 513, 1500}
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, leaderMax := range []int{0, 1 << 20, 256} {
			t.Run(fmt.Sprintf("n%d/leaderMax=%d", n, leaderMax), func(t *testing.T) {
				results := make([][]byte, n*len(counts))
				runAll(t, n, o, func(g *Group, c *Call) error {
					r := g.Rank()
					rng := rand.New(rand.NewPCG(uint64(n), uint64(r)))
					delay := func() {
						if d := rng.IntN(4); d > 0 {
							time.Sleep(time.Duration(d*100) * time.Microsecond)
						}
					}
					for k, m := range counts {
						in := make([]float64, m)
						for i := range in {
							in[i] = val(r, i)
						}
						want := make([]float64, m)
						for i := range want {
							for q := range n {
								want[i] += val(q, i)
							}
						}
						for _, inPlace := range []bool{false, true} {
							c.Sig = uint32(m)
							ib := bytesOf(in)
							ob := make([]byte, len(ib))
							if inPlace {
								ob = ib
							}
							delay()
							c.Ticket = g.Ticket()
							if err := g.AllreducePAP(c, ib, ob, sumF64(), leaderMax); err != nil {
								return fmt.Errorf("allreduce %d: %w", m, err)
							}
							for i, x := range f64s(ob) {
								if x != want[i] {
									return fmt.Errorf("allreduce %d: [%d] = %v, want %v", m, i, x, want[i])
								}
							}
							for _, root := range []int{0, n - 1, n / 2} {
								ib := bytesOf(in)
								ob := make([]byte, len(ib))
								if inPlace {
									ob = ib
								}
								delay()
								c.Ticket = g.Ticket()
								if err := g.ReducePAP(c, ib, ob, sumF64(), root, leaderMax); err != nil {
									return fmt.Errorf("reduce %d root %d: %w", m, root, err)
								}
								if r != root {
									continue
								}
								for i, x := range f64s(ob) {
									if x != want[i] {
										return fmt.Errorf("reduce %d root %d: [%d] = %v, want %v", m, root, i, x, want[i])
									}
								}
							}
						}
						// Sums that round: every rank must get the same bits.
						fr := make([]float64, m)
						for i := range fr {
							fr[i] = 1 / float64(r*m+i+3)
						}
						ob := make([]byte, 8*m)
						delay()
						c.Ticket = g.Ticket()
						if err := g.AllreducePAP(c, bytesOf(fr), ob, sumF64(), leaderMax); err != nil {
							return fmt.Errorf("allreduce (rounding) %d: %w", m, err)
						}
						results[k*n+r] = ob
						// An ordinary call after: the area stays consistent.
						c.Ticket = g.Ticket()
						if err := g.Barrier(c); err != nil {
							return fmt.Errorf("barrier: %w", err)
						}
					}
					return nil
				})
				for k := range counts {
					for r := 1; r < n; r++ {
						if string(results[k*n+r]) != string(results[k*n]) {
							t.Errorf("count %d: rank %d's result differs from rank 0's", counts[k], r)
						}
					}
				}
			})
		}
	}
}

// TestPAPTimeoutNamesAbsent: a rank that never arrives is named by the
// others, with the leader and with the chain.
func TestPAPTimeoutNamesAbsent(t *testing.T) {
	for _, leaderMax := range []int{1 << 20, 0} {
		gs, _ := NewLocal(3, Options{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &Call{Ctx: context.Background(), Ticket: gs[r].Ticket(), Timeout: 50 * time.Millisecond}
				errs[r] = gs[r].AllreducePAP(c, make([]byte, 64), make([]byte, 64), sumF64(), leaderMax)
			}()
		}
		wg.Wait()
		for r, e := range errs {
			var w *WaitError
			if !errors.As(e, &w) || w.Peer != 2 || !errors.Is(e, context.DeadlineExceeded) {
				t.Errorf("leaderMax %d: rank %d: %v, want a timeout waiting for rank 2", leaderMax, r, e)
			}
		}
	}
}
