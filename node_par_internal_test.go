package braid

import (
	"math"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/par"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport/shmcoll"
)

// TestNodeCostThreads checks that the node model counts a rank's threads
// (package par) where the area splits a chunk across them: a process's
// chunk of par.MinSize bytes or more, not one below it, not the chain's
// segments, and not goroutine ranks, which share one process's pool.
func TestNodeCostThreads(t *testing.T) {
	proc := madeGroup(t, 2)
	locals, err := shmcoll.NewLocal(2, shmcoll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer locals[0].Close()
	m := cost.Default()
	m.Memory = 0 // the link model alone: the memory bound does not split
	// bytes is what the model cuts into chunks: a reduce-scatter's whole
	// input (n blocks of Count elements), the others' Count elements.
	costWith := func(g *shmcoll.Group, threads int, coll sched.Collective, bytes int) float64 {
		defer par.SetThreads(threads, 0)()
		count := bytes / 4
		if coll == sched.ReduceScatter {
			count /= 2
		}
		return nodeLinkCost(g, sched.Params{Coll: coll, NRanks: 2, Count: count}, 4, m)
	}
	if proc.Goroutines() || !locals[0].Goroutines() {
		t.Fatalf("Goroutines: a process's group %v, NewLocal's %v", proc.Goroutines(), locals[0].Goroutines())
	}
	want := nodeParSpeedup(2, 8)
	if want <= 1 {
		t.Fatalf("nodeParSpeedup(2, 8) = %v: 8 threads at 2 ranks should be faster than one", want)
	}
	for _, coll := range []sched.Collective{sched.Bcast, sched.Allgather, sched.ReduceScatter} {
		big := 4 << 20
		one, eight := costWith(proc, 1, coll, big), costWith(proc, 8, coll, big)
		if !(eight < one) || eight < one/want*0.99 {
			t.Errorf("%v of %d B on 2 processes: %.1f µs with 8 threads, %.1f with one; want faster, by at most %.2f×", coll, big, eight*1e6, one*1e6, want)
		}
		// par splits from MinSize bytes on, and the model counts a gain
		// that grows from nothing there (nodeSplit): a chunk of twice
		// MinSize gains, one 64 bytes smaller than MinSize does not.
		small := par.MinSize() - 64
		if a, b := costWith(proc, 1, coll, small), costWith(proc, 8, coll, small); a != b {
			t.Errorf("%v of %d B (below par.MinSize, not split): %.2f µs with 8 threads, %.2f with one", coll, small, b*1e6, a*1e6)
		}
		at := 2 * par.MinSize()
		if a, b := costWith(proc, 1, coll, at), costWith(proc, 8, coll, at); !(b < a) {
			t.Errorf("%v of %d B (twice par.MinSize, split): %.2f µs with 8 threads, %.2f with one; want faster", coll, at, b*1e6, a*1e6)
		}
		if a, b := costWith(locals[0], 1, coll, big), costWith(locals[0], 8, coll, big); a != b {
			t.Errorf("%v of %d B on goroutine ranks: %.1f µs with 8 threads, %.1f with one; want the same (one shared pool)", coll, big, b*1e6, a*1e6)
		}
	}
	// The allreduce's chunks take the two phases at 2 ranks (the chain
	// starts at shmcoll.DefaultChainRanks); on 4 ranks they take the
	// chain, which is not split.
	if one, eight := costWith(proc, 1, sched.Allreduce, 4<<20), costWith(proc, 8, sched.Allreduce, 4<<20); !(eight < one) {
		t.Errorf("allreduce of 4 MiB on 2 processes: %.1f µs with 8 threads, %.1f with one; want faster", eight*1e6, one*1e6)
	}
	proc4 := madeGroup(t, 4)
	if !proc4.Chained(4 << 20) {
		t.Skip("4 MiB on 4 ranks does not take the chain with the default options")
	}
	chain := func(threads int) float64 {
		defer par.SetThreads(threads, 0)()
		return nodeLinkCost(proc4, sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 1 << 20}, 4, m)
	}
	if a, b := chain(1), chain(8); a != b {
		t.Errorf("allreduce of 4 MiB on 4 processes (the chain): %.1f µs with 8 threads, %.1f with one; want the same", b*1e6, a*1e6)
	}
}

// TestNodeCostCore checks the model's limit on one thread's memory
// traffic (cost.Model.Core) where it decides: a reduce-scatter of 16 MiB
// on 2 and 4 processes with the node's threads (8 and 4 each), where the
// area ran 1.3–3.6 times as fast as the segmented ring and the direct
// exchange on the 16-core node, must cost less through the area than as
// either schedule; without the limit (the model before it) the schedules
// cost less. Below a core's cache the limit does not apply.
func TestNodeCostCore(t *testing.T) {
	for _, n := range []int{2, 4} {
		g, path, err := shmcoll.Make(t.TempDir(), n, shmcoll.Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		_ = shmcoll.Unlink(path)
		restore := par.SetThreads(16/n, 0)
		costs := func(m cost.Model, bytes int) (area, best float64, name string) {
			p := sched.Params{Coll: sched.ReduceScatter, NRanks: n, Count: bytes / 4 / n}
			area = nodeCost(g, p, 4, m)
			best = math.Inf(1)
			for _, a := range []string{"segring", "direct"} {
				alg, err := algo.Lookup(sched.ReduceScatter, a)
				if err != nil {
					t.Fatal(err)
				}
				tp := p
				if tu, ok := alg.(algo.Tuner); ok {
					tp = tu.Tune(p, 4, m)
				}
				if c := algo.CostOf(alg, tp, 4, m); c < best {
					best, name = c, a
				}
			}
			return area, best, name
		}
		m := cost.Default()
		if area, best, name := costs(m, 16<<20); !(area < best) {
			t.Errorf("%d ranks, 16 MiB: the area %.0f µs, %s %.0f; want the area cheaper", n, area*1e6, name, best*1e6)
		}
		old := m
		old.Core = 0
		if area, best, name := costs(old, 16<<20); !(area > best) {
			t.Errorf("%d ranks, 16 MiB, without Core: the area %.0f µs, %s %.0f; want the schedule cheaper (else this test checks nothing)", n, area*1e6, name, best*1e6)
		}
		// 256 KiB: every rank's traffic fits a core's cache.
		for _, a := range []string{"segring", "direct"} {
			alg, _ := algo.Lookup(sched.ReduceScatter, a)
			p := sched.Params{Coll: sched.ReduceScatter, NRanks: n, Count: (256 << 10) / 4 / n}
			if with, without := algo.CostOf(alg, p, 4, m), algo.CostOf(alg, p, 4, old); with != without {
				t.Errorf("%d ranks, 256 KiB, %s: %.1f µs with Core, %.1f without; want the same below the cache", n, a, with*1e6, without*1e6)
			}
		}
		restore()
	}
}
