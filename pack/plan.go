package pack

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Op says how a plan's trees carry data.
type Op uint8

const (
	// OpBroadcast trees are arborescences out of one root: data flows from
	// parent to child.
	OpBroadcast Op = iota
	// OpAllReduce trees are undirected spanning trees, each with a root of
	// its own: data is reduced from child to parent up to the root, then
	// broadcast back down the same edges (Blink §3.3). Each tree edge
	// carries the tree's weight in both directions.
	OpAllReduce
)

func (o Op) String() string {
	switch o {
	case OpBroadcast:
		return "broadcast"
	case OpAllReduce:
		return "allreduce"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Tree is one spanning tree of a plan, over the plan's vertices (ranks).
type Tree struct {
	Root int
	// Parent[v] is v's parent, -1 at the root.
	Parent []int
	// Edge[v] is the index in the graph's Edges of the edge Parent[v] → v
	// (for an allreduce tree, the reduction runs on that edge's Rev), -1
	// at the root and in plans built without a graph (OneHop).
	Edge []int
	// Weight is the rate the tree carries, in the unit of the graph's
	// capacities (GB/s for graphs from package topo); a tree's share of
	// the data is its weight over the plan's Rate.
	Weight float64
}

// Children returns v's children in increasing order.
func (t Tree) Children(v int) []int {
	var out []int
	for u, p := range t.Parent {
		if p == v {
			out = append(out, u)
		}
	}
	return out
}

// Order returns the vertices in breadth-first order from the root,
// children in increasing order: an order in which every vertex comes
// after its parent.
func (t Tree) Order() []int {
	order := []int{t.Root}
	for k := 0; k < len(order); k++ {
		order = append(order, t.Children(order[k])...)
	}
	return order
}

// Depth returns the number of edges on the longest path from the root.
func (t Tree) Depth() int {
	d := 0
	for v := range t.Parent {
		k := 0
		for u := v; t.Parent[u] >= 0; u = t.Parent[u] {
			k++
		}
		d = max(d, k)
	}
	return d
}

// Plan is a set of weighted spanning trees over N vertices: how to split a
// collective's data among trees, and which edges each tree's share takes.
// It is plain data; vertex v is rank v (the order of the allocation the
// graph was built from).
type Plan struct {
	Op    Op
	N     int
	Root  int // the broadcast root; -1 for allreduce plans
	Trees []Tree
	// Rate is the sum of the trees' weights: the rate of the whole
	// collective if every tree is pipelined at its weight.
	Rate float64
	// Optimum is the best rate any packing of such trees reaches on the
	// graph (the LP optimum, certified by its dual); Rate/Optimum is the
	// plan's efficiency.
	Optimum float64
	Stats   Stats
}

// Shares returns each tree's share of the data: its weight over the Rate.
func (p *Plan) Shares() []float64 {
	out := make([]float64, len(p.Trees))
	for i, t := range p.Trees {
		out[i] = t.Weight / p.Rate
	}
	return out
}

// Split divides count elements among the trees in proportion to their
// weights, as contiguous ranges [start, end) in tree order that cover
// 0..count exactly (boundaries rounded to the nearest element).
func (p *Plan) Split(count int) [][2]int {
	out := make([][2]int, len(p.Trees))
	acc, start := 0.0, 0
	for i, t := range p.Trees {
		acc += t.Weight
		end := int(math.Round(float64(count) * acc / p.Rate))
		if i == len(p.Trees)-1 {
			end = count
		}
		end = min(max(end, start), count)
		out[i] = [2]int{start, end}
		start = end
	}
	return out
}

func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v plan on %d vertices", p.Op, p.N)
	if p.Op == OpBroadcast {
		fmt.Fprintf(&b, " from %d", p.Root)
	}
	fmt.Fprintf(&b, ": %d trees, rate %.6g of optimum %.6g\n", len(p.Trees), p.Rate, p.Optimum)
	for i, t := range p.Trees {
		fmt.Fprintf(&b, "  tree %d weight %.6g root %d depth %d parents %v\n", i, t.Weight, t.Root, t.Depth(), t.Parent)
	}
	return b.String()
}

// WriteDOT draws the plan as a Graphviz digraph: one vertex per rank,
// labelled names[r] when names is given, and each tree's edges, parent to
// child, in a colour of its own and labelled with the tree's number and
// weight. Render with dot -Tsvg.
func (p *Plan) WriteDOT(w io.Writer, names []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n  label=%q;\n  node [shape=box, fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\", fontsize=8];\n",
		p.Op.String(), fmt.Sprintf("%v, %d trees, rate %.4g", p.Op, len(p.Trees), p.Rate))
	for v := range p.N {
		label := strconv.Itoa(v)
		if v < len(names) {
			label = fmt.Sprintf("%d: %s", v, names[v])
		}
		fmt.Fprintf(&b, "  %d [label=%q];\n", v, label)
	}
	for i, t := range p.Trees {
		hue := float64(i) / float64(max(len(p.Trees), 1))
		for _, v := range t.Order()[1:] {
			fmt.Fprintf(&b, "  %d -> %d [color=\"%.3f 0.8 0.7\", label=\"t%d %.4g\"];\n", t.Parent[v], v, hue, i, t.Weight)
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Options tunes the packing; the zero value is the defaults.
type Options struct {
	// Epsilon is the accuracy the MWU packing aims at (it stops at a
	// packing within Epsilon of its dual bound); 0 means 0.1. MWU only
	// seeds the exact LP, so a coarse Epsilon costs no rate.
	Epsilon float64
	// Threshold is how far below the optimum the fewest-trees packing may
	// fall; 0 means 0.01 (1 %). Blink suggests 5 %.
	Threshold float64
	// MWUSteps caps the MWU steps; 0 means 5000.
	MWUSteps int
	// Nodes caps the branch-and-bound nodes over all quanta tried (at
	// most 25 each); 0 means 100.
	Nodes int
}

func (o Options) withDefaults() Options {
	if o.Epsilon == 0 {
		o.Epsilon = 0.1
	}
	if o.Threshold == 0 {
		o.Threshold = 0.01
	}
	if o.MWUSteps == 0 {
		o.MWUSteps = 5000
	}
	if o.Nodes == 0 {
		o.Nodes = 100
	}
	return o
}

// ErrDisconnected is returned when some vertex cannot be reached.
var ErrDisconnected = errors.New("not every vertex can be reached")

// Broadcast packs spanning arborescences rooted at root into g (Blink
// §3.1-3.2): a multiplicative-weight-update packing gives candidate trees,
// column generation with the same minimum-cost arborescence oracle makes
// the packing LP exact (Optimum), and an integer program over the
// candidates, relaxed quantum by quantum, looks for a packing of fewer
// trees than the LP's optimal basic solution whose rate is within
// o.Threshold of the optimum. When there is none the LP's packing, at the
// optimum with at most one tree per saturated resource, is the plan. A
// graph of one vertex gives a plan of no trees and an infinite rate.
func Broadcast(g *Graph, root int, o Options) (*Plan, error) {
	if root < 0 || root >= g.N {
		return nil, fmt.Errorf("pack: root %d outside [0,%d)", root, g.N)
	}
	return solve(g, root, false, o)
}

// AllReduce packs undirected spanning trees into g (Blink §3.3): each tree
// edge uses an edge with a Rev, and loads both, since the tree reduces
// toward its root on one direction and broadcasts back on the other. The
// packing runs as for Broadcast with a minimum spanning tree as the
// oracle. Every tree is rooted at root, or with root = -1 at its own
// centre (the vertex that minimises its depth; ties go to the vertex that
// roots the fewest trees so far, then the lowest), which spreads the roots.
func AllReduce(g *Graph, root int, o Options) (*Plan, error) {
	if root < -1 || root >= g.N {
		return nil, fmt.Errorf("pack: root %d outside [-1,%d)", root, g.N)
	}
	return solve(g, root, true, o)
}

func solve(g *Graph, root int, undirected bool, o Options) (*Plan, error) {
	o = o.withDefaults()
	p, err := newPacker(g, max(root, 0), undirected)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Op: OpBroadcast, N: g.N, Root: root}
	if undirected {
		plan.Op, plan.Root = OpAllReduce, -1
	}
	if g.N == 1 {
		plan.Rate, plan.Optimum = math.Inf(1), math.Inf(1)
		return plan, nil
	}
	unit := make([]float64, len(p.cap))
	for r := range unit {
		unit[r] = 1
	}
	if items, _ := p.oracle(unit); items == nil {
		return nil, fmt.Errorf("pack: %v on %d vertices: %w", plan.Op, g.N, ErrDisconnected)
	}
	xm, mrate, _ := p.mwu(o.Epsilon, o.MWUSteps)
	p.stats.MWUTrees = len(p.cols)
	p.stats.MWURate = mrate * p.scale
	// Seed the LP with MWU's heaviest trees; column generation adds any
	// others the optimum needs.
	js := make([]int, len(p.cols))
	for j := range js {
		js[j] = j
	}
	slices.SortStableFunc(js, func(a, b int) int { return cmp.Compare(xm[b], xm[a]) })
	_, _, rows := p.master()
	p.keep(js[:min(len(js), 2*len(rows)+8)])
	x, opt, price, err := p.colgen(200)
	if err != nil {
		return nil, err
	}
	p.stats.Columns = len(p.cols)
	plan.Optimum = opt * p.scale
	// The LP's basic solution is a packing at the optimum; the integer
	// program is worth running only for fewer trees than it has, and only
	// over the trees the optimal prices make tight (any optimal packing
	// uses only those).
	used := 0
	for _, v := range x {
		if v > 1e-9 {
			used++
		}
	}
	var tight []int
	for j, c := range p.cols {
		cost := 0.0
		for _, u := range c.use {
			cost += u.k * price[u.r]
		}
		if cost <= 1+1e-7 {
			tight = append(tight, j)
		}
	}
	weights := make([]float64, len(p.cols))
	n, q := p.minimise(tight, opt, o.Threshold, used, o.Nodes, price)
	trees := 0
	for _, k := range n {
		if k > 0 {
			trees++
		}
	}
	if n != nil && trees < used {
		for j, k := range n {
			weights[j] = float64(k) * q * p.scale
		}
	} else {
		p.stats.Quantum = 0
		for j, v := range x {
			if v > 1e-9 {
				weights[j] = v * p.scale
			}
		}
	}
	roots := make([]int, g.N)
	for j, w := range weights {
		if w <= 0 {
			continue
		}
		t := p.tree(p.cols[j].items, root, roots)
		t.Weight = w
		roots[t.Root]++
		plan.Trees = append(plan.Trees, t)
		plan.Rate += w
	}
	plan.Stats = p.stats
	return plan, nil
}

// tree turns a column's items into a Tree rooted at root, or for
// undirected trees with root -1 at the tree's centre (rooted counts the
// trees each vertex already roots, to break ties).
func (p *packer) tree(items []int, root int, rooted []int) Tree {
	n := p.g.N
	t := Tree{Root: root, Parent: make([]int, n), Edge: make([]int, n)}
	for v := range n {
		t.Parent[v], t.Edge[v] = -1, -1
	}
	if !p.undirected {
		for _, i := range items {
			e := p.g.Edges[i]
			t.Parent[e.To], t.Edge[e.To] = e.From, i
		}
		return t
	}
	adj := make([][]int, n) // items at each vertex
	for _, i := range items {
		e := p.g.Edges[i]
		adj[e.From] = append(adj[e.From], i)
		adj[e.To] = append(adj[e.To], i)
	}
	orient := func(r int) (Tree, int) {
		t := Tree{Root: r, Parent: slices.Repeat([]int{-1}, n), Edge: slices.Repeat([]int{-1}, n)}
		depth := make([]int, n)
		seen := make([]bool, n)
		seen[r] = true
		queue, far := []int{r}, 0
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			for _, i := range adj[u] {
				e := p.g.Edges[i]
				if e.From != u {
					i = e.Rev // the direction from u
					e = p.g.Edges[i]
				}
				if !seen[e.To] {
					seen[e.To] = true
					t.Parent[e.To], t.Edge[e.To] = u, i
					depth[e.To] = depth[u] + 1
					far = max(far, depth[e.To])
					queue = append(queue, e.To)
				}
			}
		}
		return t, far
	}
	if root >= 0 {
		t, _ = orient(root)
		return t
	}
	best, bestD := -1, 0
	for r := range n {
		_, d := orient(r)
		if best < 0 || d < bestD || d == bestD && rooted[r] < rooted[best] {
			best, bestD = r, d
		}
	}
	t, _ = orient(best)
	return t
}

// MWU returns the packing of the multiplicative-weight update alone (Blink
// §3.2 before the tree count is minimised): arborescences rooted at root
// (or, with undirected, spanning trees for allreduce, rooted at their
// centres), with weights that fit the capacities. It stops once the rate
// is within eps of the dual bound the prices give, which it reports as
// Optimum (an upper bound on the true optimum), or after steps steps.
func MWU(g *Graph, root int, undirected bool, eps float64, steps int) (*Plan, error) {
	if root < 0 || root >= g.N {
		return nil, fmt.Errorf("pack: root %d outside [0,%d)", root, g.N)
	}
	p, err := newPacker(g, root, undirected)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Op: OpBroadcast, N: g.N, Root: root}
	if undirected {
		plan.Op, plan.Root, root = OpAllReduce, -1, -1
	}
	if g.N == 1 {
		plan.Rate, plan.Optimum = math.Inf(1), math.Inf(1)
		return plan, nil
	}
	x, _, bound := p.mwu(eps, steps)
	if x == nil {
		return nil, fmt.Errorf("pack: %v on %d vertices: %w", plan.Op, g.N, ErrDisconnected)
	}
	roots := make([]int, g.N)
	for j, v := range x {
		if v > 0 {
			t := p.tree(p.cols[j].items, root, roots)
			t.Weight = v * p.scale
			roots[t.Root]++
			plan.Trees = append(plan.Trees, t)
			plan.Rate += t.Weight
		}
	}
	p.stats.MWUTrees = len(plan.Trees)
	p.stats.MWURate = plan.Rate
	plan.Optimum = bound * p.scale
	plan.Stats = p.stats
	return plan, nil
}

// OneHop returns the allreduce plan of Blink §3.5 for n vertices that all
// reach each other in one hop through a switch (DGX-2's NVSwitch, a
// network switch): n trees, tree i rooted at vertex i with every other
// vertex its child, so vertex i reduces and broadcasts the i-th n-th of the
// data. Each vertex sends (and receives) 2(n-1) shares, so with bw the
// bandwidth of each vertex's port (each direction) every tree weighs
// bw/(2(n-1)) and the plan's rate is n·bw/(2(n-1)), the optimum for a
// switch (Optimum: the same bound by counting port loads). Edges are -1:
// there is no graph.
func OneHop(n int, bw float64) *Plan {
	p := &Plan{Op: OpAllReduce, N: n, Root: -1}
	if n == 1 {
		p.Rate, p.Optimum = math.Inf(1), math.Inf(1)
		return p
	}
	w := bw / float64(2*(n-1))
	for i := range n {
		t := Tree{Root: i, Parent: make([]int, n), Edge: slices.Repeat([]int{-1}, n), Weight: w}
		for v := range n {
			t.Parent[v] = i
		}
		t.Parent[i] = -1
		p.Trees = append(p.Trees, t)
		p.Rate += w
	}
	p.Optimum = p.Rate
	return p
}
