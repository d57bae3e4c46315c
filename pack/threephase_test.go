package pack_test

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/topo"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// checkThreePhase checks the invariants of a three-phase plan for ranks
// placed on devices devs of t.
func checkThreePhase(t *testing.T, tp *topo.Topology, devs []int, p *pack.ThreePhase) {
	t.Helper()
	seen := map[int]bool{}
	for m, s := range p.Servers {
		host := tp.Devices[devs[s[0]]].Host
		for _, r := range s {
			if seen[r] || tp.Devices[devs[r]].Host != host {
				t.Fatalf("server %d: ranks %v mix hosts or repeat", m, s)
			}
			seen[r] = true
		}
		if p.Local[m].N != len(s) || p.Local[m].Op != pack.OpAllReduce {
			t.Fatalf("server %d: local plan %v for %d ranks", m, p.Local[m], len(s))
		}
	}
	if len(seen) != len(devs) {
		t.Fatalf("servers %v do not hold all %d ranks", p.Servers, len(devs))
	}
	start := 0.0
	for i, part := range p.Parts {
		if part.Share <= 0 {
			t.Fatalf("part %d has share %g", i, part.Share)
		}
		mid := start + part.Share/2
		for m, l := range p.Local {
			if len(l.Trees) == 0 {
				if part.Tree[m] != -1 || part.Root[m] != p.Servers[m][0] {
					t.Fatalf("part %d on one-rank server %d: tree %d root %d", i, m, part.Tree[m], part.Root[m])
				}
				continue
			}
			// The part must lie inside its tree's share on server m.
			lo := 0.0
			for k := range part.Tree[m] {
				lo += l.Trees[k].Weight / l.Rate
			}
			hi := lo + l.Trees[part.Tree[m]].Weight/l.Rate
			if mid < lo || mid > hi {
				t.Fatalf("part %d [%g, %g) on server %d: tree %d covers [%g, %g)", i, start, start+part.Share, m, part.Tree[m], lo, hi)
			}
			if root := p.Servers[m][l.Trees[part.Tree[m]].Root]; part.Root[m] != root {
				t.Fatalf("part %d server %d: root %d, tree root %d", i, m, part.Root[m], root)
			}
		}
		start += part.Share
	}
	if math.Abs(start-1) > 1e-9 {
		t.Fatalf("shares sum to %g", start)
	}
	r := p.Split(1000)
	if len(r) != len(p.Parts) || r[len(r)-1][1] != 1000 || r[0][0] != 0 {
		t.Fatalf("Split(1000) = %v", r)
	}
}

// TestThreePhase plans allreduces across servers (Blink §3.5): the 3 + 5
// GPU split over two DGX-1 V100 of Blink §5.4, a 1 + 2 split, whole
// clusters, and single switched or mixed nodes.
func TestThreePhase(t *testing.T) {
	for _, tc := range []struct {
		preset  string
		gpus    []int // GPU ordinals across the cluster; nil means all
		servers int
		oneHop  bool
	}{
		{"2xdgx1-v100", []int{0, 1, 2, 8, 9, 12, 13, 14}, 2, false},
		{"2xdgx1-p100", []int{3, 9, 10}, 2, false},
		{"2xdgx1-v100", nil, 2, false},
		{"4xhgx-h200", nil, 4, true},
		{"dgx2", nil, 1, true},
		{"mist", nil, 1, false},
		{"cedar", nil, 1, false},
	} {
		tp, err := topo.Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		all := tp.GPUs()
		devs := all
		if tc.gpus != nil {
			devs = nil
			for _, g := range tc.gpus {
				devs = append(devs, all[g])
			}
		}
		p, err := pack.PlanAllReduce(tp, devs, pack.Options{})
		if err != nil {
			t.Fatalf("%s %v: %v", tc.preset, tc.gpus, err)
		}
		if len(p.Servers) != tc.servers {
			t.Fatalf("%s: %d servers, want %d", tc.preset, len(p.Servers), tc.servers)
		}
		checkThreePhase(t, tp, devs, p)
		for m, l := range p.Local {
			// OneHop's trees are stars with no graph edges.
			oneHop := len(l.Trees) > 0 && l.Trees[0].Edge[(l.Trees[0].Root+1)%l.N] == -1
			if len(l.Trees) > 0 && oneHop != tc.oneHop {
				t.Errorf("%s server %d: one-hop %v, want %v:\n%v", tc.preset, m, oneHop, tc.oneHop, l)
			}
		}
		t.Logf("%s %v: %d parts, local rates %v", tc.preset, tc.gpus, len(p.Parts), rates(p.Local))
	}
}

func rates(ps []*pack.Plan) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%.4g", p.Rate))
	}
	return out
}

// TestMistFallback checks that Mist, whose GPUs are not all joined by
// NVLink, falls back to routes through the CPUs, bounded by the X-Bus.
func TestMistFallback(t *testing.T) {
	tp := topo.Mist()
	p, err := pack.PlanAllReduce(tp, tp.GPUs(), pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := p.Local[0].Rate; math.Abs(r-64) > 1e-9 {
		t.Errorf("Mist allreduce rate %g, want the X-Bus's 64 GB/s", r)
	}
}

// TestSplitHybrid checks Blink eq. 8: both sets finish together when the
// PCIe set starts tDPA late, and the split is clamped to the message.
func TestSplitHybrid(t *testing.T) {
	const total, bp, bn, tdpa = 100e6, 15.75e9, 50e9, 50e-6
	p, n := pack.SplitHybrid(total, bp, bn, tdpa)
	if math.Abs(p+n-total) > 1e-6 || math.Abs(p/bp+tdpa-n/bn) > 1e-12 {
		t.Errorf("split %g + %g: PCIe takes %g s + %g, NVLink %g s", p, n, p/bp, tdpa, n/bn)
	}
	if p, n := pack.SplitHybrid(1000, bp, bn, tdpa); p != 0 || n != 1000 {
		t.Errorf("small message: %g over PCIe, %g over NVLink", p, n)
	}
	if p, n := pack.SplitHybrid(total, bp, 0, tdpa); p != total || n != 0 {
		t.Errorf("no NVLink: %g over PCIe, %g over NVLink", p, n)
	}
}

// TestPlanHybrid checks the two tree sets of Blink §3.4 on a DGX-1 V100
// allocation and on Mist, where NVLink does not join GPUs across sockets.
func TestPlanHybrid(t *testing.T) {
	tp := topo.DGX1V100()
	g := tp.GPUs()
	h, err := pack.PlanHybrid(tp, []int{g[0], g[1], g[2]}, 0, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if h.NVLink == nil || h.PCIe == nil || h.NVLink.Rate != 50 || h.PCIe.Rate != 15.75 {
		t.Fatalf("DGX-1 V100 GPUs 0-2: NVLink %v PCIe %v", h.NVLink, h.PCIe)
	}
	p, n := h.Split(100e6, 50e-6)
	if wp, wn := pack.SplitHybrid(100e6, 15.75e9, 50e9, 50e-6); p != wp || n != wn {
		t.Errorf("Split gives %g/%g, SplitHybrid %g/%g", p, n, wp, wn)
	}
	mist := topo.Mist()
	h, err = pack.PlanHybrid(mist, mist.GPUs()[:3], 0, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if h.NVLink != nil || h.PCIe == nil || h.PCIe.Rate != 64 {
		t.Errorf("Mist GPUs 0-2: NVLink %v, host routes %v", h.NVLink, h.PCIe)
	}
}

// TestGolden compares printed plans with testdata (STYLE: packed trees on
// a DGX-1 allocation); go test -update rewrites them.
func TestGolden(t *testing.T) {
	tp := topo.DGX1V100()
	var b strings.Builder
	for _, a := range []allocation{{1, 4, 5, 6}, {0, 1, 2, 3, 4, 5, 6, 7}} {
		g, err := pack.FromTopology(tp, devices(tp, a), pack.Select{Classes: []topo.Class{topo.NVLink}})
		if err != nil {
			t.Fatal(err)
		}
		bc, err := pack.Broadcast(g, 0, pack.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ar, err := pack.AllReduce(g, -1, pack.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "# DGX-1 V100 GPUs %v over NVLink (rank r is GPU %v[r])\n%v%v\n", a, a, bc, ar)
	}
	got := b.String()
	path := filepath.Join("testdata", "dgx1v_trees.txt")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the plans made now (run go test -update if the change is intended):\n%s", path, got)
	}
}

// TestRootsSpread checks that allreduce trees rooted at their centres do
// not all share one root when the packing has several trees.
func TestRootsSpread(t *testing.T) {
	tp := topo.DGX1V100()
	g, err := pack.FromTopology(tp, tp.GPUs(), pack.Select{Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pack.AllReduce(g, -1, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var roots []int
	for _, tr := range p.Trees {
		roots = append(roots, tr.Root)
	}
	slices.Sort(roots)
	if len(slices.Compact(roots)) < 2 {
		t.Errorf("roots %v", roots)
	}
	fixed, err := pack.AllReduce(g, 3, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, g, fixed)
	for _, tr := range fixed.Trees {
		if tr.Root != 3 {
			t.Errorf("tree rooted at %d, want 3", tr.Root)
		}
	}
}
