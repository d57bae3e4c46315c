package pack

import (
	"errors"
	"fmt"
	"math"
)

// maxFlow returns the value of a maximum s-t flow in the digraph on n
// vertices with the given arcs (w is the capacity), by Dinic's algorithm.
func maxFlow(n, s, t int, arcs []arc) float64 {
	type fe struct {
		to  int
		cap float64
		rev int
	}
	g := make([][]fe, n)
	for _, a := range arcs {
		if a.from == a.to || a.w <= 0 {
			continue
		}
		g[a.from] = append(g[a.from], fe{a.to, a.w, len(g[a.to])})
		g[a.to] = append(g[a.to], fe{a.from, 0, len(g[a.from]) - 1})
	}
	const eps = 1e-12
	level := make([]int, n)
	next := make([]int, n)
	var push func(u int, f float64) float64
	push = func(u int, f float64) float64 {
		if u == t {
			return f
		}
		for ; next[u] < len(g[u]); next[u]++ {
			e := &g[u][next[u]]
			if e.cap > eps && level[e.to] == level[u]+1 {
				if d := push(e.to, min(f, e.cap)); d > 0 {
					e.cap -= d
					g[e.to][e.rev].cap += d
					return d
				}
			}
		}
		return 0
	}
	total := 0.0
	for {
		for i := range level {
			level[i] = -1
		}
		level[s] = 0
		queue := []int{s}
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			for _, e := range g[u] {
				if e.cap > eps && level[e.to] < 0 {
					level[e.to] = level[u] + 1
					queue = append(queue, e.to)
				}
			}
		}
		if level[t] < 0 {
			return total
		}
		clear(next)
		for {
			f := push(s, math.Inf(1))
			if f <= 0 {
				break
			}
			total += f
		}
	}
}

// ErrShared is returned by BroadcastBound for a graph whose edges share
// resources, where the max-flow bound does not hold.
var ErrShared = errors.New("edges share resources")

// BroadcastBound returns the greatest rate at which root can broadcast on
// g, computed independently of the packing: by Edmonds' branching theorem
// the largest fractional packing of spanning arborescences rooted at root
// equals the smallest root-v cut over the vertices v ≠ root, that is
// min over v of the maximum flow from root to v. It needs a graph whose
// edges each have a resource of their own (Exclusive); a graph of one
// vertex gives +Inf.
func BroadcastBound(g *Graph, root int) (float64, error) {
	if err := g.Validate(); err != nil {
		return 0, err
	}
	if root < 0 || root >= g.N {
		return 0, fmt.Errorf("pack: root %d outside [0,%d)", root, g.N)
	}
	if !g.Exclusive() {
		return 0, fmt.Errorf("pack: BroadcastBound: %w", ErrShared)
	}
	arcs := make([]arc, len(g.Edges))
	for i, e := range g.Edges {
		arcs[i] = arc{from: e.From, to: e.To, w: g.Cap[e.Use[0]]}
	}
	best := math.Inf(1)
	for v := range g.N {
		if v != root {
			best = min(best, maxFlow(g.N, root, v, arcs))
		}
	}
	return best, nil
}
