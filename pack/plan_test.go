package pack_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/topo"
)

// TestMWU checks the guarantee of Blink §3.2: the multiplicative-weight
// update alone returns a feasible packing within ε of the optimum, and its
// dual bound is never below the optimum.
func TestMWU(t *testing.T) {
	const eps = 0.05
	for _, tp := range []*topo.Topology{topo.DGX1P100(), topo.DGX1V100()} {
		for _, a := range uniqueAllocations(tp, 3, 8, true) {
			g, err := pack.FromTopology(tp, devices(tp, a), pack.Select{Classes: []topo.Class{topo.NVLink}})
			if err != nil {
				t.Fatal(err)
			}
			bound, err := pack.BroadcastBound(g, 0)
			if err != nil {
				t.Fatal(err)
			}
			p, err := pack.MWU(g, 0, false, eps, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, g, p)
			if p.Rate < (1-eps)*bound || p.Optimum < bound*(1-1e-9) {
				t.Errorf("%s GPUs %v: MWU rate %g, dual bound %g, optimum %g", tp.Name, a, p.Rate, p.Optimum, bound)
			}
		}
	}
}

// TestThreshold checks that a looser threshold trades rate for fewer,
// equal trees (Blink §3.2.1): on the 8-GPU DGX-1 P100 the exact allreduce
// packing (320/7 GB/s) needs 16 trees, while 5 % allows 9 trees or fewer
// of a quantum of 5 GB/s.
func TestThreshold(t *testing.T) {
	tp := topo.DGX1P100()
	g, err := pack.FromTopology(tp, tp.GPUs(), pack.Select{Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		t.Fatal(err)
	}
	exact, err := pack.AllReduce(g, -1, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	loose, err := pack.AllReduce(g, -1, pack.Options{Threshold: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, g, exact)
	checkPlan(t, g, loose)
	if math.Abs(exact.Rate-320.0/7) > 1e-9 || loose.Rate < 0.95*exact.Optimum || len(loose.Trees) >= len(exact.Trees) || len(loose.Trees) > 9 {
		t.Errorf("exact: %d trees at %g; 5 %%: %d trees at %g (quantum %g)", len(exact.Trees), exact.Rate, len(loose.Trees), loose.Rate, loose.Stats.Quantum)
	}
	for _, tr := range loose.Trees {
		if k := tr.Weight / loose.Stats.Quantum; math.Abs(k-math.Round(k)) > 1e-9 {
			t.Errorf("weight %g is not a multiple of the quantum %g", tr.Weight, loose.Stats.Quantum)
		}
	}
}

// TestTree checks the tree helpers on a hand-made tree.
func TestTree(t *testing.T) {
	tr := pack.Tree{Root: 2, Parent: []int{2, 0, -1, 2, 1}}
	if got := tr.Children(2); !slices.Equal(got, []int{0, 3}) {
		t.Errorf("Children(2) = %v", got)
	}
	if got := tr.Order(); !slices.Equal(got, []int{2, 0, 3, 1, 4}) {
		t.Errorf("Order() = %v", got)
	}
	if d := tr.Depth(); d != 3 {
		t.Errorf("Depth() = %d, want 3", d)
	}
}

// TestSplit checks that data splits follow the weights and cover every
// element once.
func TestSplit(t *testing.T) {
	p := &pack.Plan{Trees: []pack.Tree{{Weight: 1}, {Weight: 2}, {Weight: 1}}, Rate: 4}
	for _, count := range []int{0, 1, 3, 4, 7, 1000, 1001} {
		r := p.Split(count)
		next := 0
		for i, s := range r {
			if s[0] != next || s[1] < s[0] {
				t.Fatalf("count %d: range %d = %v after %d", count, i, s, next)
			}
			want := float64(count) * p.Trees[i].Weight / p.Rate
			if math.Abs(float64(s[1]-s[0])-want) > 1 {
				t.Errorf("count %d: tree %d gets %d elements, want about %g", count, i, s[1]-s[0], want)
			}
			next = s[1]
		}
		if next != count {
			t.Errorf("count %d: ranges end at %d", count, next)
		}
	}
	if got := p.Shares(); !slices.Equal(got, []float64{0.25, 0.5, 0.25}) {
		t.Errorf("Shares() = %v", got)
	}
}

// TestOneHop checks the one-hop trees of Blink §3.5 against the port
// bound: each of n ports carries 2(n-1) tree weights in each direction.
func TestOneHop(t *testing.T) {
	for _, n := range []int{2, 3, 16} {
		p := pack.OneHop(n, 150)
		if len(p.Trees) != n {
			t.Fatalf("n=%d: %d trees", n, len(p.Trees))
		}
		for i, tr := range p.Trees {
			if tr.Root != i || tr.Depth() != 1 || len(tr.Children(i)) != n-1 {
				t.Errorf("n=%d tree %d: root %d depth %d", n, i, tr.Root, tr.Depth())
			}
		}
		// Vertex 0's port sends to n-1 children in its own tree
		// (broadcast) and to its parent in each other tree (reduce).
		port := 0.0
		for i, tr := range p.Trees {
			if i == 0 {
				port += float64(n-1) * tr.Weight
			} else {
				port += tr.Weight
			}
		}
		want := 150 * float64(n) / float64(2*(n-1))
		if math.Abs(port-150) > 1e-9 || math.Abs(p.Rate-want) > 1e-9 {
			t.Errorf("n=%d: port load %g, rate %g; want 150 and %g", n, port, p.Rate, want)
		}
	}
	if p := pack.OneHop(1, 150); len(p.Trees) != 0 || !math.IsInf(p.Rate, 1) {
		t.Errorf("OneHop(1): %v", p)
	}
}

// TestOneHopIsOptimal checks that the generic undirected packing of a
// DGX-2's NVSwitch graph reaches the one-hop rate n·B/(2(n-1)): the
// one-hop trees lose nothing to it.
func TestOneHopIsOptimal(t *testing.T) {
	tp := topo.DGX2()
	g, err := pack.FromTopology(tp, tp.GPUs(), pack.Select{Routes: pack.Relayed, Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pack.AllReduce(g, -1, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, g, p)
	if want := pack.OneHop(16, 150).Rate; math.Abs(p.Optimum-want) > 1e-6 {
		t.Errorf("generic optimum %g, one-hop rate %g", p.Optimum, want)
	}
}

// TestErrors checks the errors of bad calls.
func TestErrors(t *testing.T) {
	g := pack.NewGraph(3)
	g.AddDuplex(0, 1, 10)
	if _, err := pack.Broadcast(g, 0, pack.Options{}); !errors.Is(err, pack.ErrDisconnected) {
		t.Errorf("disconnected broadcast: %v", err)
	}
	if _, err := pack.AllReduce(g, -1, pack.Options{}); !errors.Is(err, pack.ErrDisconnected) {
		t.Errorf("disconnected allreduce: %v", err)
	}
	if _, err := pack.Broadcast(g, 3, pack.Options{}); err == nil {
		t.Error("root out of range accepted")
	}
	bad := pack.NewGraph(2)
	bad.AddEdge(0, 0, bad.AddResource(1))
	if _, err := pack.Broadcast(bad, 0, pack.Options{}); err == nil {
		t.Error("loop accepted")
	}
	shared := pack.NewGraph(2)
	r := shared.AddResource(1)
	shared.AddEdge(0, 1, r)
	shared.AddEdge(1, 0, r)
	if _, err := pack.BroadcastBound(shared, 0); !errors.Is(err, pack.ErrShared) {
		t.Errorf("shared resources: %v", err)
	}
	one, err := pack.Broadcast(pack.NewGraph(1), 0, pack.Options{})
	if err != nil || len(one.Trees) != 0 || !math.IsInf(one.Rate, 1) {
		t.Errorf("one vertex: %v, %v", one, err)
	}
	tp := topo.DGX1V100()
	if _, err := pack.FromTopology(tp, []int{0, 0}, pack.Select{}); err == nil {
		t.Error("two ranks on one device accepted")
	}
}

// TestDirectedCapacity checks a broadcast on an asymmetric hand-made
// graph, where the bound is set by the edges into one vertex.
func TestDirectedCapacity(t *testing.T) {
	g := pack.NewGraph(4)
	g.AddLink(0, 1, 3)
	g.AddLink(0, 2, 2)
	g.AddLink(1, 2, 4)
	g.AddLink(2, 1, 1)
	g.AddLink(1, 3, 2)
	g.AddLink(2, 3, 2)
	g.AddLink(3, 0, 9)
	p, err := pack.Broadcast(g, 0, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, g, p)
	bound, err := pack.BroadcastBound(g, 0)
	if err != nil {
		t.Fatal(err)
	}
	if bound != 4 || math.Abs(p.Rate-4) > 1e-9 {
		t.Errorf("rate %g, bound %g, want 4", p.Rate, bound)
	}
}

// TestWriteDOT checks the drawing of a plan: every rank and one edge per
// tree edge.
func TestWriteDOT(t *testing.T) {
	tp := topo.DGX1V100()
	a := allocation{1, 4, 5, 6}
	g, err := pack.FromTopology(tp, devices(tp, a), pack.Select{Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pack.Broadcast(g, 0, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := p.WriteDOT(&b, []string{"gpu1", "gpu4", "gpu5", "gpu6"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, " -> "); n != len(p.Trees)*(g.N-1) {
		t.Errorf("%d edges for %d trees:\n%s", n, len(p.Trees), out)
	}
	if !strings.Contains(out, `3 [label="3: gpu6"]`) {
		t.Errorf("rank 3 unnamed:\n%s", out)
	}
	for _, e := range g.Edges {
		if len(e.Path) != 2 || e.Path[0] != devices(tp, a)[e.From] {
			t.Errorf("edge %d->%d has path %v", e.From, e.To, e.Path)
		}
	}
}
