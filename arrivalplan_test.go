package braid_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
)

// TestArrivalSwitch: a call site (a 32 KiB reduce, a 32 KiB allreduce)
// whose rank 3 always arrives 5 ms after the others is moved to the
// arrival-aware reductions once a window of calls shows the spread, and
// BRAID_DEBUG=info says why; every call's
// result stays right on every rank before and after the move (whether the
// site stays there depends on the two algorithms' times, which the rule's
// own test walks through); with DisableArrival, or with the algorithm
// forced, the site keeps its choice.
func TestArrivalSwitch(t *testing.T) {
	const n, count = 4, 8192
	calls := 3 * 64 // three windows
	for _, coll := range []string{"reduce", "allreduce"} {
		for _, tc := range []struct {
			name string
			opts braid.Options
			want string // what the site runs at the end (pap: switched to it at least once)
		}{
			{"watched", braid.Options{}, "pap"},
			{"disabled", braid.Options{DisableArrival: true}, "shm"},
			{"forced", braid.Options{Algo: coll + "=shm"}, "shm"},
		} {
			t.Run(coll+"/"+tc.name, func(t *testing.T) {
				log := &syncBuffer{}
				opts := tc.opts
				opts.Debug, opts.Log = "info", log
				ran := make([]string, n)
				errs := onRanks(t, n, &opts, func(c *braid.Comm) error {
					r := c.Rank()
					in, out := make([]float32, count), make([]float32, count)
					for i := range calls {
						for j := range in {
							in[j] = float32(r + i + j)
						}
						if r == n-1 {
							// 5 ms late: far above a balanced call, also
							// on a loaded machine (2 ms once failed to
							// switch on the 2-core VM under other tests).
							time.Sleep(5 * time.Millisecond)
						}
						var err error
						if coll == "reduce" {
							err = c.Reduce(context.Background(), in, out, braid.Sum, 0)
						} else {
							err = c.Allreduce(context.Background(), in, out, braid.Sum)
						}
						if err != nil {
							return err
						}
						if r != 0 && coll == "reduce" {
							continue
						}
						for j, x := range out {
							if want := float32(n*(i+j) + n*(n-1)/2); x != want {
								return fmt.Errorf("call %d: [%d] = %v, want %v", i, j, x, want)
							}
						}
					}
					a, why, err := c.Explain(coll, count, braid.Float32, 0)
					ran[r] = a + " (" + why + ")"
					return err
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				for r, a := range ran {
					if tc.want != "pap" && !strings.HasPrefix(a, tc.want+" ") {
						t.Errorf("rank %d runs %s at the end, want %s\nlog:\n%s", r, a, tc.want, log.String())
					}
				}
				switched := strings.Contains(log.String(), "× the balanced call's")
				if switched != (tc.want == "pap") {
					t.Errorf("log says switched = %v, want %v:\n%s", switched, tc.want == "pap", log.String())
				}
			})
		}
	}
}
