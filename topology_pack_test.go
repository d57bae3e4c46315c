package braid

import (
	"testing"

	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// TestPackTreesDirections packs trees on three GPUs joined by a fast ring
// one way (gpu0 → gpu1 → gpu2 → gpu0, 10 GB/s) and a slow one the other
// way (1 GB/s): a broadcast's trees must fit the link directions their
// parent-to-child sends take, a reduce's those of their child-to-parent
// sends (packed on the reversed graph), and an allreduce's both.
func TestPackTreesDirections(t *testing.T) {
	tp := &topo.Topology{Name: "rings"}
	for i := range 3 {
		if _, err := tp.AddDevice(topo.Device{ID: []string{"gpu0", "gpu1", "gpu2"}[i], Kind: topo.GPU, Host: "h", Index: i, NUMA: -1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		for _, l := range []topo.Link{
			{From: i, To: (i + 1) % 3, Class: topo.NVLink, Count: 1, Bandwidth: 10, Latency: 1},
			{From: (i + 1) % 3, To: i, Class: topo.NVLink, Count: 1, Bandwidth: 1, Latency: 1},
		} {
			if err := tp.AddLink(l); err != nil {
				t.Fatal(err)
			}
		}
	}
	capacity := func(from, to int) float64 { return tp.Capacity(from, to) }
	for _, tc := range []struct {
		coll     sched.Collective
		root     int
		down, up bool // the trees send parent → child, child → parent
		rate     float64
	}{
		{sched.Bcast, 0, true, false, 11},
		{sched.Bcast, 2, true, false, 11},
		{sched.Reduce, 0, false, true, 11},
		{sched.Reduce, 1, false, true, 11},
		{sched.Allreduce, 0, true, true, 0},
	} {
		ts, pl, links, _, err := packTrees(tp, []int{0, 1, 2}, tc.coll, tc.root)
		if err != nil {
			t.Fatalf("%v root %d: %v", tc.coll, tc.root, err)
		}
		if links != "nvlink" || pl == nil {
			t.Errorf("%v root %d: packed over %q links", tc.coll, tc.root, links)
		}
		if tc.rate > 0 && (ts.Rate() < tc.rate*(1-1e-6) || ts.Rate() > tc.rate*(1+1e-6)) {
			t.Errorf("%v root %d: rate %g, want %g:\n%v", tc.coll, tc.root, ts.Rate(), tc.rate, ts)
		}
		load := map[[2]int]float64{}
		for _, tr := range ts.Tree {
			if tc.coll != sched.Allreduce && tr.Root != tc.root {
				t.Errorf("%v root %d: a tree rooted at %d", tc.coll, tc.root, tr.Root)
			}
			for v, u := range tr.Parent {
				if v == tr.Root {
					continue
				}
				if tc.down {
					load[[2]int{u, v}] += tr.Weight
				}
				if tc.up {
					load[[2]int{v, u}] += tr.Weight
				}
			}
		}
		for l, w := range load {
			if c := capacity(l[0], l[1]); w > c*(1+1e-6) {
				t.Errorf("%v root %d: the trees load gpu%d → gpu%d with %g GB/s, more than its %g:\n%v", tc.coll, tc.root, l[0], l[1], w, c, ts)
			}
		}
	}

	// One rank: one tree of the rank alone.
	ts, pl, _, _, err := packTrees(tp, []int{2}, sched.Bcast, 0)
	if err != nil || pl != nil || ts.Validate(1) != nil {
		t.Errorf("one rank: %v, %v, %v", ts, pl, err)
	}
}
