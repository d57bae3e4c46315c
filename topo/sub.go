package topo

import (
	"fmt"
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
