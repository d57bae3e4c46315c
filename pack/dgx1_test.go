package pack_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// allocation is a set of GPUs of a machine, by GPU ordinal.
type allocation []int

// nvlinkMatrix returns the NVLink lane counts between the GPUs of t.
func nvlinkMatrix(t *topo.Topology) [][]int {
	gpus := t.GPUs()
	m := make([][]int, len(gpus))
	for i, a := range gpus {
		m[i] = make([]int, len(gpus))
		for j, b := range gpus {
			if i != j {
				m[i][j] = t.Lanes(a, b, topo.NVLink)
			}
		}
	}
	return m
}

// permutations calls f with every permutation of 0..k-1.
func permutations(k int, f func(p []int)) {
	p := make([]int, k)
	for i := range p {
		p[i] = i
	}
	var rec func(i int)
	rec = func(i int) {
		if i == k {
			f(p)
			return
		}
		for j := i; j < k; j++ {
			p[i], p[j] = p[j], p[i]
			rec(i + 1)
			p[i], p[j] = p[j], p[i]
		}
	}
	rec(0)
}

// canonical returns a canonical form of the NVLink multigraph induced by
// the allocation: the smallest adjacency matrix over all orderings of its
// GPUs, so two allocations have the same form exactly when their NVLink
// graphs (with lane counts) are isomorphic.
func canonical(m [][]int, a allocation) string {
	best := ""
	b := make([]byte, 0, len(a)*len(a))
	permutations(len(a), func(p []int) {
		b = b[:0]
		for _, i := range p {
			for _, j := range p {
				b = append(b, byte('0'+m[a[i]][a[j]]))
			}
		}
		if best == "" || string(b) < best {
			best = string(b)
		}
	})
	return best
}

// connected reports whether the allocation's NVLink graph is connected.
func connected(m [][]int, a allocation) bool {
	seen := map[int]bool{a[0]: true}
	stack := []int{a[0]}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, v := range a {
			if !seen[v] && m[u][v] > 0 {
				seen[v] = true
				stack = append(stack, v)
			}
		}
	}
	return len(seen) == len(a)
}

// uniqueAllocations returns one representative (the first in order of
// the bit mask) of each isomorphism class of allocations of lo to hi GPUs
// of t, optionally only those whose NVLink graph is connected.
func uniqueAllocations(t *topo.Topology, lo, hi int, onlyConnected bool) []allocation {
	m := nvlinkMatrix(t)
	n := len(m)
	seen := map[string]bool{}
	var out []allocation
	for mask := 1; mask < 1<<n; mask++ {
		var a allocation
		for i := range n {
			if mask>>i&1 == 1 {
				a = append(a, i)
			}
		}
		if len(a) < lo || len(a) > hi || onlyConnected && !connected(m, a) {
			continue
		}
		if c := canonical(m, a); !seen[c] {
			seen[c] = true
			out = append(out, a)
		}
	}
	return out
}

// TestUniqueAllocations checks the counts of Blink §5.2: 14 distinct
// topologies of 3 to 8 GPUs on the DGX-1 P100 and 46 on the DGX-1 V100.
// They are the isomorphism classes of allocations whose NVLink graph is
// connected; counting every allocation (Blink leaves out those NVLink does
// not join, where it falls back to PCIe) gives 17 and 53.
func TestUniqueAllocations(t *testing.T) {
	for _, tc := range []struct {
		t              *topo.Topology
		connected, all int
		sizes          map[int]int // connected classes by size
	}{
		{topo.DGX1P100(), 14, 17, map[int]int{3: 2, 4: 4, 5: 3, 6: 3, 7: 1, 8: 1}},
		{topo.DGX1V100(), 46, 53, nil},
	} {
		conn := uniqueAllocations(tc.t, 3, 8, true)
		if len(conn) != tc.connected {
			t.Errorf("%s: %d unique NVLink-connected allocations of 3-8 GPUs, want %d", tc.t.Name, len(conn), tc.connected)
		}
		if all := uniqueAllocations(tc.t, 3, 8, false); len(all) != tc.all {
			t.Errorf("%s: %d unique allocations of 3-8 GPUs, want %d", tc.t.Name, len(all), tc.all)
		}
		if tc.sizes != nil {
			got := map[int]int{}
			for _, a := range conn {
				got[len(a)]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.sizes) {
				t.Errorf("%s: classes by size %v, want %v", tc.t.Name, got, tc.sizes)
			}
		}
	}
}

// devices returns the device indices of GPU ordinals a of t.
func devices(t *topo.Topology, a allocation) []int {
	gpus := t.GPUs()
	out := make([]int, len(a))
	for i, g := range a {
		out[i] = gpus[g]
	}
	return out
}

// checkPlan checks that p's trees span g from their roots over its edges,
// and that the load they put on every resource fits its capacity.
func checkPlan(t *testing.T, g *pack.Graph, p *pack.Plan) {
	t.Helper()
	load := make([]float64, len(g.Cap))
	rate := 0.0
	for i, tr := range p.Trees {
		if len(tr.Parent) != g.N || tr.Parent[tr.Root] != -1 || tr.Weight <= 0 {
			t.Fatalf("tree %d: root %d parents %v weight %g", i, tr.Root, tr.Parent, tr.Weight)
		}
		if p.Op == pack.OpBroadcast && tr.Root != p.Root {
			t.Fatalf("tree %d: root %d in a broadcast from %d", i, tr.Root, p.Root)
		}
		if len(tr.Order()) != g.N {
			t.Fatalf("tree %d does not span: order %v parents %v", i, tr.Order(), tr.Parent)
		}
		for v := range g.N {
			if v == tr.Root {
				continue
			}
			e := g.Edges[tr.Edge[v]]
			if e.From != tr.Parent[v] || e.To != v {
				t.Fatalf("tree %d: vertex %d has parent %d but edge %d is %d->%d", i, v, tr.Parent[v], tr.Edge[v], e.From, e.To)
			}
			for _, r := range e.Use {
				load[r] += tr.Weight
			}
			if p.Op == pack.OpAllReduce {
				for _, r := range g.Edges[e.Rev].Use {
					load[r] += tr.Weight
				}
			}
		}
		rate += tr.Weight
	}
	for r, l := range load {
		if l > g.Cap[r]*(1+1e-7)+1e-9 {
			t.Fatalf("resource %d loaded %g over its capacity %g", r, l, g.Cap[r])
		}
	}
	if math.Abs(rate-p.Rate) > 1e-9*p.Rate {
		t.Fatalf("rate %g, trees sum to %g", p.Rate, rate)
	}
}

// TestBroadcastDGX1 is the acceptance test of the packing (Blink §3.1-3.2,
// §5.2): for every unique NVLink-connected allocation of 3 to 8 GPUs on the
// DGX-1 P100 and V100, from every root, the packed broadcast rate over the
// NVLinks is within 1 % of the optimum computed independently by max-flow
// (Edmonds' theorem), and at 8 GPUs on the V100 at most 6 trees remain.
func TestBroadcastDGX1(t *testing.T) {
	for _, tp := range []*topo.Topology{topo.DGX1P100(), topo.DGX1V100()} {
		maxTrees := map[int]int{}
		worst := math.Inf(1)
		for _, a := range uniqueAllocations(tp, 3, 8, true) {
			g, err := pack.FromTopology(tp, devices(tp, a), pack.Select{Classes: []topo.Class{topo.NVLink}})
			if err != nil {
				t.Fatal(err)
			}
			for root := range a {
				bound, err := pack.BroadcastBound(g, root)
				if err != nil {
					t.Fatal(err)
				}
				p, err := pack.Broadcast(g, root, pack.Options{})
				if err != nil {
					t.Fatalf("%s %v root %d: %v", tp.Name, a, root, err)
				}
				checkPlan(t, g, p)
				if p.Rate < 0.99*bound || p.Optimum > bound*(1+1e-9) || p.Optimum < bound*(1-1e-9) {
					t.Errorf("%s GPUs %v root GPU %d: rate %g, LP optimum %g, max-flow bound %g", tp.Name, a, a[root], p.Rate, p.Optimum, bound)
				}
				worst = min(worst, p.Rate/bound)
				maxTrees[len(a)] = max(maxTrees[len(a)], len(p.Trees))
			}
		}
		t.Logf("%s: worst rate/optimum %.6f; most trees by allocation size %v", tp.Name, worst, maxTrees)
		if tp.Name == "dgx1-v100" && maxTrees[8] > 6 {
			t.Errorf("%s: %d trees at 8 GPUs, want at most 6 (Blink §3.2.1)", tp.Name, maxTrees[8])
		}
	}
}

// TestBroadcastDGX1V8 checks the figures of Blink §3.2.1 on all 8 GPUs of
// the DGX-1 V100: the optimum is 6 NVLinks' worth (150 GB/s) from any root,
// reached by 6 trees of one NVLink (25 GB/s) each.
func TestBroadcastDGX1V8(t *testing.T) {
	tp := topo.DGX1V100()
	g, err := pack.FromTopology(tp, tp.GPUs(), pack.Select{Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		t.Fatal(err)
	}
	for root := range 8 {
		p, err := pack.Broadcast(g, root, pack.Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, g, p)
		if math.Abs(p.Rate-150) > 1e-6 || len(p.Trees) > 6 {
			t.Errorf("root %d: rate %g with %d trees, want 150 with at most 6:\n%v", root, p.Rate, len(p.Trees), p)
		}
	}
}

// partitions calls f with every partition of 0..n-1 as a block number per
// element.
func partitions(n int, f func(block []int, blocks int)) {
	b := make([]int, n)
	var rec func(i, k int)
	rec = func(i, k int) {
		if i == n {
			f(b, k)
			return
		}
		for j := 0; j <= k; j++ {
			b[i] = j
			nk := k
			if j == k {
				nk++
			}
			rec(i+1, nk)
		}
	}
	rec(0, 0)
}

// treeBound returns the largest fractional packing of undirected spanning
// trees of a graph of duplex links, by the theorem of Nash-Williams and
// Tutte: the minimum over partitions P of the vertices into at least two
// blocks of the capacity crossing P divided by |P| - 1. An undirected edge
// carries its smaller direction's capacity (a tree loads both).
func treeBound(g *pack.Graph) float64 {
	best := math.Inf(1)
	partitions(g.N, func(block []int, k int) {
		if k < 2 {
			return
		}
		c := 0.0
		for i, e := range g.Edges {
			if e.Rev > i && block[e.From] != block[e.To] {
				c += min(g.Cap[e.Use[0]], g.Cap[g.Edges[e.Rev].Use[0]])
			}
		}
		best = min(best, c/float64(k-1))
	})
	return best
}

// TestAllReduceDGX1 checks the undirected packing of Blink §3.3 on every
// unique allocation against the Nash-Williams-Tutte bound, computed by
// enumerating partitions.
func TestAllReduceDGX1(t *testing.T) {
	for _, tp := range []*topo.Topology{topo.DGX1P100(), topo.DGX1V100()} {
		most := 0
		for _, a := range uniqueAllocations(tp, 3, 8, true) {
			g, err := pack.FromTopology(tp, devices(tp, a), pack.Select{Classes: []topo.Class{topo.NVLink}})
			if err != nil {
				t.Fatal(err)
			}
			p, err := pack.AllReduce(g, -1, pack.Options{})
			if err != nil {
				t.Fatalf("%s %v: %v", tp.Name, a, err)
			}
			checkPlan(t, g, p)
			bound := treeBound(g)
			if p.Rate < 0.99*bound || math.Abs(p.Optimum-bound) > 1e-9*bound {
				t.Errorf("%s GPUs %v: rate %g, LP optimum %g, partition bound %g", tp.Name, a, p.Rate, p.Optimum, bound)
			}
			most = max(most, len(p.Trees))
		}
		t.Logf("%s: at most %d allreduce trees", tp.Name, most)
	}
}

// TestRelayedDGX1 packs broadcasts on the graphs that add PCIe routes
// through the switches and CPUs (shared resources): every plan fits the
// capacities, reaches its LP optimum within 1 %, and beats NVLink alone by
// exactly the root's PCIe uplink when NVLink is the bottleneck elsewhere.
func TestRelayedDGX1(t *testing.T) {
	tp := topo.DGX1V100()
	for _, a := range []allocation{{0, 1, 2}, {1, 4, 5, 6}, {0, 5, 6}, {0, 1, 2, 3, 4, 5, 6, 7}} {
		g, err := pack.FromTopology(tp, devices(tp, a), pack.Select{Routes: pack.Direct | pack.Relayed})
		if err != nil {
			t.Fatal(err)
		}
		p, err := pack.Broadcast(g, 0, pack.Options{})
		if err != nil {
			t.Fatalf("GPUs %v: %v", a, err)
		}
		checkPlan(t, g, p)
		if p.Rate < 0.99*p.Optimum {
			t.Errorf("GPUs %v: rate %g of optimum %g", a, p.Rate, p.Optimum)
		}
		t.Logf("GPUs %v: %d trees, rate %g GB/s; %v", a, len(p.Trees), p.Rate, p.Stats)
	}
}

// TestPlanSummary logs the paper's figures of merit for the 8-GPU DGX-1
// V100: MWU's tree count and rate, and the trees that remain.
func TestPlanSummary(t *testing.T) {
	tp := topo.DGX1V100()
	g, err := pack.FromTopology(tp, tp.GPUs(), pack.Select{Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := pack.MWU(g, 0, false, 0.01, 100000)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, g, m)
	if m.Rate < 0.99*150 || m.Optimum < 150*(1-1e-9) {
		t.Errorf("MWU at ε = 0.01: rate %g, dual bound %g; want at least 148.5 and 150", m.Rate, m.Optimum)
	}
	weights := make([]float64, len(m.Trees))
	for i, tr := range m.Trees {
		weights[i] = tr.Weight
	}
	t.Logf("MWU ε=0.01: %d trees, rate %.4f GB/s (bound %.4f), weights %.3g to %.3g GB/s, %d steps",
		len(m.Trees), m.Rate, m.Optimum, slices.Min(weights), slices.Max(weights), m.Stats.MWUIterations)
	p, err := pack.Broadcast(g, 0, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, tr := range p.Trees {
		fmt.Fprintf(&b, " %.4g", tr.Weight)
	}
	t.Logf("Broadcast: %d trees of weights%s GB/s; %v", len(p.Trees), b.String(), p.Stats)
}

// TestFallbackDGX1 checks the graph of GPUs' peer copies (Fallback) on
// the DGX-1 V100: a direct edge for every NVLinked pair and a route
// through the switches and CPUs for every other pair only, so that on
// GPUs 0, 1 and 5 a broadcast from 1 adds the route 5 → 0 (PCIe and QPI,
// 15.75 GB/s) to the NVLink 1 → 0 (25 GB/s) that bounds NVLink alone.
func TestFallbackDGX1(t *testing.T) {
	tp := topo.DGX1V100()
	for _, a := range []allocation{{0, 1, 5}, {0, 1, 2, 3}, {1, 4, 5, 6}, {0, 5, 6}} {
		devs := devices(tp, a)
		g, err := pack.FromTopology(tp, devs, pack.Select{Routes: pack.Direct | pack.Fallback})
		if err != nil {
			t.Fatal(err)
		}
		hops := map[[2]int]int{}
		for _, e := range g.Edges {
			hops[[2]int{e.From, e.To}]++
			linked := tp.Lanes(devs[e.From], devs[e.To], topo.NVLink) > 0
			if routed := len(e.Path) > 2; routed == linked {
				t.Errorf("GPUs %v: edge %d → %d crosses %v, NVLinked %v", a, e.From, e.To, e.Path, linked)
			}
		}
		for x := range a {
			for y := range a {
				if x != y && hops[[2]int{x, y}] != 1 {
					t.Errorf("GPUs %v: %d edges %d → %d, want 1", a, hops[[2]int{x, y}], x, y)
				}
			}
		}
	}
	p, g, links, err := pack.ForCollective(tp, devices(tp, allocation{0, 1, 5}), sched.Bcast, 1, "peer")
	if err != nil || links != "peer" {
		t.Fatalf("peer packing: %v (%s)", err, links)
	}
	checkPlan(t, g, p)
	if math.Abs(p.Rate-(25+15.75)) > 0.01*(25+15.75) {
		t.Errorf("GPUs 0 1 5 from 1: rate %g GB/s, want 25 + 15.75", p.Rate)
	}
}
