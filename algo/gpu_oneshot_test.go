package algo_test

import (
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sched/schedtest"
)

// TestGPUOneShot validates the one-shot allreduce (structure, rendezvous
// deadlock freedom, and the values it computes, in place and not) on 1 to
// 9 ranks, and checks that it stays out of the registry.
func TestGPUOneShot(t *testing.T) {
	a := algo.GPUOneShot
	for n := 1; n <= 9; n++ {
		for _, p := range params(a, n, 0, 1, 7, 100) {
			if err := a.Supports(p); err != nil {
				t.Fatalf("%+v: %v", p, err)
			}
			if err := schedtest.Check(p, algo.Programs(a, p)); err != nil {
				t.Errorf("n=%d count=%d: %v", n, p.Count, err)
			}
		}
	}
	if _, err := algo.Lookup(sched.Allreduce, a.Name()); err == nil {
		t.Error("gpu_oneshot is registered: the CPU planner could choose it")
	}
	p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 1 << 20}
	if c := a.(algo.Coster).Cost(p, 4, cost.Default()); !(c > 0) {
		t.Errorf("cost %v, want > 0", c)
	}
}
