package pack

import (
	"fmt"
	"math"
	"slices"
)

// Graph is a directed graph on vertices 0..N-1 whose edges consume
// capacitated resources. A resource is a physical link direction; an edge
// is a hop a tree may take between two vertices (ranks). A direct link is
// an edge that consumes its own resource (AddLink); a route through
// switches that are not ranks is an edge that consumes every link
// direction it crosses (AddEdge), so that trees sharing a PCIe uplink
// share its capacity. A tree that uses an edge at weight w loads each
// resource of the edge by w (twice if the edge lists it twice).
//
// Capacities are in any unit of rate (GB/s when the graph comes from
// package topo); tree weights come out in the same unit.
type Graph struct {
	N     int
	Edges []Edge
	Cap   []float64 // capacity of each resource
}

// Edge is a directed hop From → To that consumes the resources Use.
type Edge struct {
	From, To int
	Use      []int
	// Rev is the index of the edge that carries the other direction of
	// this hop, for undirected trees (AllReduce); -1 if none.
	Rev int
	// Path lists the topology devices the hop crosses, from the source
	// rank's device to the target's, for graphs made by FromTopology (nil
	// otherwise): two devices for a direct link, more for a relayed route,
	// so a schedule can tell a peer copy from a host-staged one.
	Path []int
}

// NewGraph returns a graph of n vertices and no edges.
func NewGraph(n int) *Graph { return &Graph{N: n} }

// AddResource adds a resource of capacity c and returns its index.
func (g *Graph) AddResource(c float64) int {
	g.Cap = append(g.Cap, c)
	return len(g.Cap) - 1
}

// AddEdge adds the edge from → to consuming the given resources and
// returns its index.
func (g *Graph) AddEdge(from, to int, use ...int) int {
	g.Edges = append(g.Edges, Edge{From: from, To: to, Use: slices.Clone(use), Rev: -1})
	return len(g.Edges) - 1
}

// AddLink adds an edge from → to with a resource of its own of capacity c,
// and returns the edge's index.
func (g *Graph) AddLink(from, to int, c float64) int {
	return g.AddEdge(from, to, g.AddResource(c))
}

// AddDuplex adds links a → b and b → a of capacity c each, paired as each
// other's Rev, and returns their indices.
func (g *Graph) AddDuplex(a, b int, c float64) (int, int) {
	e, f := g.AddLink(a, b, c), g.AddLink(b, a, c)
	g.Pair(e, f)
	return e, f
}

// Pair records that edges e and f carry the two directions of one hop.
func (g *Graph) Pair(e, f int) {
	g.Edges[e].Rev = f
	g.Edges[f].Rev = e
}

// Validate returns an error unless every edge joins two distinct vertices
// in range, uses resources in range, and pairs with an edge in the other
// direction (or none), and every capacity is finite and non-negative.
func (g *Graph) Validate() error {
	if g.N < 1 {
		return fmt.Errorf("pack: graph of %d vertices", g.N)
	}
	for r, c := range g.Cap {
		if !(c >= 0) || math.IsInf(c, 0) {
			return fmt.Errorf("pack: resource %d has capacity %g", r, c)
		}
	}
	for i, e := range g.Edges {
		switch {
		case e.From < 0 || e.From >= g.N || e.To < 0 || e.To >= g.N:
			return fmt.Errorf("pack: edge %d: %d->%d outside [0,%d)", i, e.From, e.To, g.N)
		case e.From == e.To:
			return fmt.Errorf("pack: edge %d: loop at %d", i, e.From)
		case len(e.Use) == 0:
			return fmt.Errorf("pack: edge %d: %d->%d uses no resource", i, e.From, e.To)
		}
		for _, r := range e.Use {
			if r < 0 || r >= len(g.Cap) {
				return fmt.Errorf("pack: edge %d: resource %d outside [0,%d)", i, r, len(g.Cap))
			}
		}
		if e.Rev >= 0 {
			if e.Rev >= len(g.Edges) || g.Edges[e.Rev].Rev != i || g.Edges[e.Rev].From != e.To || g.Edges[e.Rev].To != e.From {
				return fmt.Errorf("pack: edge %d: %d->%d has Rev %d that is not its mirror", i, e.From, e.To, e.Rev)
			}
		}
	}
	return nil
}

// Exclusive reports whether every edge uses exactly one resource that no
// other edge uses: the graph is a plain capacitated digraph, for which
// BroadcastBound gives the optimum.
func (g *Graph) Exclusive() bool {
	used := make([]bool, len(g.Cap))
	for _, e := range g.Edges {
		if len(e.Use) != 1 || used[e.Use[0]] {
			return false
		}
		used[e.Use[0]] = true
	}
	return true
}

// capacity returns the capacity of edge e on its own: its scarcest
// resource, divided by how often the edge uses it.
func (g *Graph) capacity(e int) float64 {
	c := math.Inf(1)
	use := g.Edges[e].Use
	for _, r := range use {
		k := 0
		for _, s := range use {
			if s == r {
				k++
			}
		}
		c = min(c, g.Cap[r]/float64(k))
	}
	return c
}

// usable reports whether edge e can carry anything: all its resources
// have capacity.
func (g *Graph) usable(e int) bool { return g.capacity(e) > 0 }
