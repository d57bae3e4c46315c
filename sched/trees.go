package sched

import (
	"fmt"
	"math"
	"slices"
)

// Trees is a set of weighted spanning trees over the ranks of a call, for
// the tree-packing algorithms (algo's "treepack", after Blink, MLSys 2020
// §3): the data is split among the trees in proportion to their weights,
// and each tree carries its part from its root to every rank (broadcast),
// toward its root (reduce), or both (allreduce: reduced up the tree, then
// broadcast back down the same edges).
//
// A Trees is plain data, shared and never modified once a Params refers
// to it. The planner makes one from a packing of a topology (package
// pack); algorithms that do not use trees ignore it.
type Trees struct {
	// Tree lists the trees, in the order their parts take in the data.
	Tree []Tree
}

// Tree is one spanning tree over ranks 0..n−1.
type Tree struct {
	// Root is the rank at the root.
	Root int
	// Parent[r] is rank r's parent, -1 at the root.
	Parent []int
	// Weight is the tree's rate in any unit (GB/s for packings of a
	// topology); its share of the data is Weight over the sum of the
	// weights. It must be positive and finite.
	Weight float64
	// Relayed[r] says that the edge Parent[r] → r takes the relayed
	// route between the two ranks, through switches and CPUs (PCIe on a
	// DGX-1: the PCIe trees of Blink, MLSys 2020, §3.4), rather than
	// their direct link; its messages go on channels from RelayedChannel
	// up. Nil means every edge is direct; false at the root.
	Relayed []bool
}

// RelayedChannel is the first channel of relayed routes: a message on a
// channel from RelayedChannel up crosses the relayed route between its
// two ranks (through switches and CPUs, not their direct link), where the
// transport or the simulator knows one; below it, the pair's default
// (widest) route.
const RelayedChannel uint8 = 128

// IsRelayed reports whether the edge Parent[r] → r is relayed.
func (tr *Tree) IsRelayed(r int) bool { return r < len(tr.Relayed) && tr.Relayed[r] }

// Validate returns an error unless t holds at least one tree, and every
// tree spans ranks 0..n−1: a root in range, a parent per rank, -1 at the
// root only, every other rank's parent a rank in range, no cycle (every
// rank reaches the root), and a positive, finite weight.
func (t *Trees) Validate(n int) error {
	if t == nil || len(t.Tree) == 0 {
		return fmt.Errorf("sched: no trees")
	}
	for i := range t.Tree {
		if err := t.Tree[i].validate(n); err != nil {
			return fmt.Errorf("sched: tree %d: %w", i, err)
		}
	}
	return nil
}

func (tr *Tree) validate(n int) error {
	switch {
	case tr.Root < 0 || tr.Root >= n:
		return fmt.Errorf("root %d outside [0,%d)", tr.Root, n)
	case len(tr.Parent) != n:
		return fmt.Errorf("%d parents for %d ranks", len(tr.Parent), n)
	case tr.Parent[tr.Root] != -1:
		return fmt.Errorf("root %d has parent %d, want -1", tr.Root, tr.Parent[tr.Root])
	case !(tr.Weight > 0) || math.IsInf(tr.Weight, 0):
		return fmt.Errorf("weight %g, want a positive finite number", tr.Weight)
	case tr.Relayed != nil && len(tr.Relayed) != n:
		return fmt.Errorf("%d relayed flags for %d ranks", len(tr.Relayed), n)
	case tr.IsRelayed(tr.Root):
		return fmt.Errorf("root %d has a relayed edge to its parent, but no parent", tr.Root)
	}
	for r, p := range tr.Parent {
		if r != tr.Root && (p < 0 || p >= n || p == r) {
			return fmt.Errorf("rank %d has parent %d", r, p)
		}
	}
	// Every rank reaches the root in fewer than n steps.
	for r := range n {
		u, k := r, 0
		for u != tr.Root {
			if k++; k >= n {
				return fmt.Errorf("rank %d does not reach the root %d (cycle)", r, tr.Root)
			}
			u = tr.Parent[u]
		}
	}
	return nil
}

// Rate returns the sum of the trees' weights.
func (t *Trees) Rate() float64 {
	s := 0.0
	for _, tr := range t.Tree {
		s += tr.Weight
	}
	return s
}

// Split divides count elements among the trees in proportion to their
// weights, as contiguous ranges [start, end) in tree order that cover
// 0..count exactly: tree i's range ends at count·(w_0+…+w_i)/(Σw),
// rounded to the nearest element (the last at count). Empty ranges are
// possible when count is smaller than the number of trees.
func (t *Trees) Split(count int) [][2]int {
	out := make([][2]int, len(t.Tree))
	rate := t.Rate()
	acc, start := 0.0, 0
	for i, tr := range t.Tree {
		acc += tr.Weight
		end := int(math.Round(float64(count) * acc / rate))
		if i == len(t.Tree)-1 {
			end = count
		}
		end = min(max(end, start), count)
		out[i] = [2]int{start, end}
		start = end
	}
	return out
}

// Children returns rank v's children in increasing order.
func (tr *Tree) Children(v int) []int {
	var out []int
	for u, p := range tr.Parent {
		if p == v && u != tr.Root {
			out = append(out, u)
		}
	}
	return out
}

// Depth returns rank v's distance from the root, in edges.
func (tr *Tree) Depth(v int) int {
	k := 0
	for u := v; u != tr.Root; u = tr.Parent[u] {
		k++
	}
	return k
}

// Height returns the depth of the deepest rank: the hops data takes from
// the root to the farthest rank.
func (tr *Tree) Height() int {
	h := 0
	for v := range tr.Parent {
		h = max(h, tr.Depth(v))
	}
	return h
}

// String formats t as one line per tree.
func (t *Trees) String() string {
	s := ""
	for i, tr := range t.Tree {
		s += fmt.Sprintf("tree %d root %d weight %.6g parents %v", i, tr.Root, tr.Weight, tr.Parent)
		if slices.Contains(tr.Relayed, true) {
			s += fmt.Sprintf(" relayed %v", tr.Relayed)
		}
		s += "\n"
	}
	return s
}
