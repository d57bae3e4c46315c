package pack_test

import (
	"math/rand/v2"
	"testing"

	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// TestMultiNodeCapacity packs, as the communicator does (ForCollective,
// over NVLink where it spans the ranks, else over every link and route),
// broadcasts, reduces and allreduces among GPUs of two DGX-1 nodes joined
// by their NICs (presets 2xdgx1-p100 and 2xdgx1-v100): all 16 GPUs (not
// under the race detector), 1 + 1, Blink's 3 + 5 split, and random
// allocations of 2 to 12 GPUs across the nodes, from random roots. Every plan must span the ranks and load no resource (link
// direction, shared PCIe switch, CPU or NIC) over its capacity
// (checkPlan). Single-node DGX-1s pack over NVLink alone; these plans mix
// link classes and relayed routes, with capacities of many magnitudes.
func TestMultiNodeCapacity(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 8))
	for _, name := range []string{"2xdgx1-p100", "2xdgx1-v100"} {
		tp, err := topo.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		gpus := tp.GPUs()
		allocs := [][]int{{gpus[0], gpus[8]}, {gpus[0], gpus[1], gpus[2], gpus[8], gpus[9], gpus[10], gpus[11], gpus[12]}}
		if !raceEnabled {
			// All 16 GPUs take a second to pack, a minute under the race
			// detector.
			allocs = append(allocs, gpus)
		}
		for range 6 {
			k := 2 + rng.IntN(11)
			perm := rng.Perm(len(gpus))
			a := make([]int, k)
			for i := range a {
				a[i] = gpus[perm[i]]
			}
			allocs = append(allocs, a)
		}
		plans := 0
		for _, devs := range allocs {
			for _, coll := range []sched.Collective{sched.Bcast, sched.Reduce, sched.Allreduce} {
				root := rng.IntN(len(devs))
				p, g, links, err := pack.ForCollective(tp, devs, coll, root, "nvlink", "all")
				if err != nil {
					t.Fatalf("%s %v %v root %d: %v", name, devs, coll, root, err)
				}
				if coll == sched.Reduce {
					g = pack.Reversed(g)
				}
				t.Run("", func(t *testing.T) { checkPlan(t, g, p) })
				if t.Failed() {
					t.Fatalf("%s devices %v %v root %d over %s: %d trees, rate %g", name, devs, coll, root, links, len(p.Trees), p.Rate)
				}
				plans++
			}
		}
		t.Logf("%s: %d plans within capacity", name, plans)
	}
}

// TestRandomCapacities packs broadcasts and allreduces on random graphs
// (3 to 7 vertices, random duplex links, one-way links and shared
// resources) whose capacities are random reals from 0.5 to 50: every plan
// must fit the capacities (checkPlan), and a broadcast must reach 99 % of
// the optimum (the max-flow bound where no resource is shared, else the
// LP's).
func TestRandomCapacities(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 14))
	capacity := func() float64 { return 0.5 + 49.5*rng.Float64() }
	for trial := range 60 {
		n := 3 + rng.IntN(5)
		g := pack.NewGraph(n)
		// A ring keeps the graph connected; random chords, one-way links
		// and a resource shared by two links (a switch) add the rest.
		for v := range n {
			g.AddDuplex(v, (v+1)%n, capacity())
		}
		for range rng.IntN(2 * n) {
			a, b := rng.IntN(n), rng.IntN(n)
			if a == b {
				continue
			}
			if rng.IntN(2) == 0 {
				g.AddLink(a, b, capacity())
				continue
			}
			sw := g.AddResource(capacity())
			c := rng.IntN(n)
			if c == a || c == b {
				g.AddDuplex(a, b, capacity())
				continue
			}
			e := g.AddEdge(a, b, sw)
			f := g.AddEdge(b, a, sw)
			g.Pair(e, f)
			g.AddEdge(a, c, sw)
		}
		root := rng.IntN(n)
		p, err := pack.Broadcast(g, root, pack.Options{})
		if err != nil {
			t.Fatalf("trial %d: broadcast: %v", trial, err)
		}
		checkPlan(t, g, p)
		bound := p.Optimum
		if g.Exclusive() {
			if bound, err = pack.BroadcastBound(g, root); err != nil {
				t.Fatal(err)
			}
		}
		if p.Rate < 0.99*bound {
			t.Errorf("trial %d: broadcast rate %g, optimum %g", trial, p.Rate, bound)
		}
		if q, err := pack.AllReduce(g, -1, pack.Options{}); err == nil {
			checkPlan(t, g, q)
		} else {
			t.Fatalf("trial %d: allreduce: %v", trial, err)
		}
	}
}
