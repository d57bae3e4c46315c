package topo

import (
	"fmt"
	"math"
	"slices"
)

// Sub returns the sub-topology induced by an allocation: the devices in
// keep (typically GPUs, in any order), every device that is not a GPU and
// lies on a simple path between two kept devices whose inner vertices are
// all such non-GPU devices (the PCIe switches, CPUs, NICs and switches
// that data between the kept devices can cross), and the links among
// them. GPUs outside keep are dropped: a GPU never relays another's data.
//
// Devices keep their relative order. The second result maps each old
// device index to its new one, -1 for dropped devices.
func (t *Topology) Sub(keep []int) (*Topology, []int, error) {
	n := len(t.Devices)
	isKept := make([]bool, n)
	for _, k := range keep {
		if k < 0 || k >= n {
			return nil, nil, fmt.Errorf("topo: Sub: device index %d out of range [0,%d)", k, n)
		}
		if isKept[k] {
			return nil, nil, fmt.Errorf("topo: Sub: device %s given twice", t.Devices[k].ID)
		}
		isKept[k] = true
	}
	adj := t.undirected()
	relay := func(i int) bool { return !isKept[i] && t.Devices[i].Kind != GPU }
	in := slices.Clone(isKept)
	for v := range n {
		if relay(v) && onTerminalPath(adj, v, isKept, relay) {
			in[v] = true
		}
	}
	s := &Topology{Name: t.Name}
	idx := make([]int, n)
	for i, d := range t.Devices {
		idx[i] = -1
		if in[i] {
			idx[i] = len(s.Devices)
			s.Devices = append(s.Devices, d)
		}
	}
	for _, l := range t.Links {
		if in[l.From] && in[l.To] {
			l.From, l.To = idx[l.From], idx[l.To]
			s.Links = append(s.Links, l)
		}
	}
	return s, idx, nil
}

// undirected returns each device's neighbours over links in either
// direction, without self links or repeats.
func (t *Topology) undirected() [][]int {
	adj := make([][]int, len(t.Devices))
	for _, l := range t.Links {
		if l.From == l.To {
			continue
		}
		if !slices.Contains(adj[l.From], l.To) {
			adj[l.From] = append(adj[l.From], l.To)
		}
		if !slices.Contains(adj[l.To], l.From) {
			adj[l.To] = append(adj[l.To], l.From)
		}
	}
	return adj
}

// onTerminalPath reports whether relay vertex v lies on a simple path
// between two distinct terminals whose inner vertices are relays: by
// Menger's theorem, whether two paths from v to distinct terminals exist
// that share no vertex but v. It runs a unit-capacity max-flow with split
// vertices and stops at a flow of two.
func onTerminalPath(adj [][]int, v int, terminal []bool, relay func(int) bool) bool {
	n := len(adj)
	// Vertex i is split into in(i) = 2i and out(i) = 2i+1; the sink is 2n.
	sink := 2 * n
	type arc struct{ to, cap, rev int }
	g := make([][]arc, 2*n+1)
	add := func(a, b, c int) {
		g[a] = append(g[a], arc{b, c, len(g[b])})
		g[b] = append(g[b], arc{a, 0, len(g[a]) - 1})
	}
	for i := range n {
		switch {
		case terminal[i]:
			add(2*i, sink, 1)
		case relay(i) && i != v:
			add(2*i, 2*i+1, 1)
		}
		if i != v && !relay(i) {
			continue // only v and relays have outgoing arcs
		}
		for _, j := range adj[i] {
			if terminal[j] || relay(j) {
				add(2*i+1, 2*j, 1)
			}
		}
	}
	src := 2*v + 1
	flow := 0
	prev := make([][2]int, len(g))
	for flow < 2 {
		for i := range prev {
			prev[i] = [2]int{-1, -1}
		}
		prev[src] = [2]int{src, -1}
		queue := []int{src}
		for len(queue) > 0 && prev[sink][0] < 0 {
			a := queue[0]
			queue = queue[1:]
			for k, e := range g[a] {
				if e.cap > 0 && prev[e.to][0] < 0 {
					prev[e.to] = [2]int{a, k}
					queue = append(queue, e.to)
				}
			}
		}
		if prev[sink][0] < 0 {
			return false
		}
		for b := sink; b != src; {
			a, k := prev[b][0], prev[b][1]
			g[a][k].cap--
			g[b][g[a][k].rev].cap++
			b = a
		}
		flow++
	}
	return true
}

// Route returns the device path from a to b that a transfer would take
// over the links for which allow returns true (nil allows every link),
// through devices whose index via accepts (nil accepts every device that
// is not a GPU): first the widest path (the greatest bottleneck capacity,
// summing parallel links of one hop), then among the widest the fewest
// hops, then the lowest device indices. It returns nil if b cannot be
// reached, and [a] if a == b. To find many routes over the same links,
// make a Router once.
func (t *Topology) Route(a, b int, allow func(Link) bool, via func(int) bool) []int {
	return t.Router(allow).Route(a, b, via)
}

// Router finds routes over a fixed set of links of a topology. It is not
// safe for concurrent use, and sees the topology as it was when made.
type Router struct {
	t   *Topology
	out [][]hop // the hops out of each device, by increasing target
}

type hop struct {
	to  int
	cap float64 // GB/s, parallel links summed
}

// Router returns a Router over the links for which allow returns true
// (nil allows every link); self links never take part.
func (t *Topology) Router(allow func(Link) bool) *Router {
	r := &Router{t: t, out: make([][]hop, len(t.Devices))}
	for _, l := range t.Links {
		if l.From == l.To || allow != nil && !allow(l) {
			continue
		}
		hs := r.out[l.From]
		k := slices.IndexFunc(hs, func(h hop) bool { return h.to == l.To })
		if k < 0 {
			hs = append(hs, hop{to: l.To})
			k = len(hs) - 1
		}
		hs[k].cap += l.Capacity()
		r.out[l.From] = hs
	}
	for _, hs := range r.out {
		slices.SortFunc(hs, func(x, y hop) int { return x.to - y.to })
	}
	return r
}

// Route is Topology.Route over the router's links.
func (r *Router) Route(a, b int, via func(int) bool) []int { return r.route(a, b, via, true) }

// Relay is Route without the direct hop from a to b: the widest route
// through at least one other device, or nil.
func (r *Router) Relay(a, b int, via func(int) bool) []int { return r.route(a, b, via, false) }

func (r *Router) route(a, b int, via func(int) bool, direct bool) []int {
	t := r.t
	n := len(t.Devices)
	if a < 0 || a >= n || b < 0 || b >= n {
		return nil
	}
	if a == b {
		return []int{a}
	}
	if via == nil {
		via = func(i int) bool { return t.Devices[i].Kind != GPU }
	}
	passable := func(i int) bool { return i == b || via(i) }
	usable := func(u int, h hop) bool { return direct || u != a || h.to != b }
	// Widest path: a Dijkstra on the bottleneck capacity.
	width := make([]float64, n)
	done := make([]bool, n)
	width[a] = math.Inf(1)
	for {
		u := -1
		for i := range n {
			if !done[i] && width[i] > 0 && (u < 0 || width[i] > width[u]) {
				u = i
			}
		}
		if u < 0 || u == b {
			break
		}
		done[u] = true
		if u != a && !passable(u) {
			continue
		}
		for _, h := range r.out[u] {
			if c := min(width[u], h.cap); c > width[h.to] && !done[h.to] && usable(u, h) {
				width[h.to] = c
			}
		}
	}
	if width[b] == 0 {
		return nil
	}
	// Fewest hops over the hops at least as wide as the widest path.
	prev := make([]int, n)
	for i := range prev {
		prev[i] = -1
	}
	prev[a] = a
	queue := []int{a}
	for len(queue) > 0 && prev[b] < 0 {
		u := queue[0]
		queue = queue[1:]
		if u != a && !passable(u) {
			continue
		}
		for _, h := range r.out[u] {
			if prev[h.to] < 0 && h.cap >= width[b] && usable(u, h) {
				prev[h.to] = u
				queue = append(queue, h.to)
			}
		}
	}
	var path []int
	for v := b; v != a; v = prev[v] {
		path = append(path, v)
	}
	path = append(path, a)
	slices.Reverse(path)
	return path
}
