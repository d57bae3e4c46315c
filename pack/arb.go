package pack

import "math"

// arc is an edge of the arborescence problem: from → to at cost w; id is
// the caller's name for it.
type arc struct {
	from, to int
	w        float64
	id       int
}

// minArborescence returns, for each vertex v of a graph on n vertices, the
// index into arcs of the arc entering v in a minimum-cost spanning
// arborescence rooted at root (-1 at the root), by the algorithm of
// Chu-Liu and Edmonds: take the cheapest arc into every vertex; if they
// close a cycle, contract it, lower the cost of arcs entering it by the
// cost of the cycle arc they would replace, solve the smaller problem and
// expand. It runs in O(n·m). It returns nil if some vertex cannot be
// reached from root.
func minArborescence(n, root int, arcs []arc) []int {
	best := make([]int, n)
	for v := range best {
		best[v] = -1
	}
	for i, a := range arcs {
		if a.to == root || a.from == a.to {
			continue
		}
		if b := best[a.to]; b < 0 || a.w < arcs[b].w {
			best[a.to] = i
		}
	}
	for v := range n {
		if v != root && best[v] < 0 {
			return nil
		}
	}
	// Find the cycles of the cheapest-arc graph; comp numbers the
	// vertices of the contracted graph.
	comp := make([]int, n)
	mark := make([]int, n) // 0 unvisited, else the walk that reached it + 1
	for v := range comp {
		comp[v] = -1
	}
	nc := 0
	cyclic := false
	for s := range n {
		if mark[s] != 0 {
			continue
		}
		v := s
		for v != root && mark[v] == 0 {
			mark[v] = s + 1
			v = arcs[best[v]].from
		}
		if v != root && mark[v] == s+1 && comp[v] < 0 {
			// v lies on a cycle first closed by this walk.
			cyclic = true
			for u := v; comp[u] < 0; u = arcs[best[u]].from {
				comp[u] = nc
			}
			nc++
		}
	}
	if !cyclic {
		return best
	}
	inCycle := make([]bool, n)
	for v := range n {
		if comp[v] >= 0 {
			inCycle[v] = true
		} else {
			comp[v] = nc
			nc++
		}
	}
	sub := make([]arc, 0, len(arcs))
	for i, a := range arcs {
		cu, cv := comp[a.from], comp[a.to]
		if cu == cv || a.to == root {
			continue
		}
		w := a.w
		if inCycle[a.to] {
			w -= arcs[best[a.to]].w
		}
		sub = append(sub, arc{from: cu, to: cv, w: w, id: i})
	}
	subSel := minArborescence(nc, comp[root], sub)
	if subSel == nil {
		return nil
	}
	sel := make([]int, n)
	for v := range sel {
		sel[v] = -1
		if inCycle[v] {
			sel[v] = best[v]
		}
	}
	for _, s := range subSel {
		if s >= 0 {
			i := sub[s].id
			sel[arcs[i].to] = i // replaces the cycle arc into the entry vertex
		}
	}
	sel[root] = -1
	return sel
}

// minSpanningTree returns the indices into arcs (read as undirected) of a
// minimum-cost spanning tree of a graph on n vertices, by Prim's
// algorithm, or nil if the graph is not connected.
func minSpanningTree(n int, arcs []arc) []int {
	bestW := make([]float64, n)
	bestA := make([]int, n)
	in := make([]bool, n)
	adj := make([][]int, n)
	for i, a := range arcs {
		if a.from != a.to {
			adj[a.from] = append(adj[a.from], i)
			adj[a.to] = append(adj[a.to], i)
		}
	}
	for v := range bestW {
		bestW[v] = math.Inf(1)
		bestA[v] = -1
	}
	bestW[0] = 0
	out := make([]int, 0, n)
	for range n {
		u := -1
		for v := range n {
			if !in[v] && !math.IsInf(bestW[v], 1) && (u < 0 || bestW[v] < bestW[u]) {
				u = v
			}
		}
		if u < 0 {
			return nil
		}
		in[u] = true
		if u != 0 {
			out = append(out, bestA[u])
		}
		for _, i := range adj[u] {
			a := arcs[i]
			w := a.from
			if w == u {
				w = a.to
			}
			if !in[w] && a.w < bestW[w] {
				bestW[w] = a.w
				bestA[w] = i
			}
		}
	}
	return out
}
