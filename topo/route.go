package topo

import (
	"math"
	"slices"
)

// Route returns the device path from a to b that a transfer would take
// over the links for which allow returns true (nil allows every link),
// through devices whose index via accepts (nil accepts every device that
// is not a GPU): first the widest path (the greatest bottleneck capacity,
// summing parallel links of one hop), then among the widest the fewest
// hops, then the lowest device indices. It returns nil if b cannot be
// reached, and [a] if a == b. To find many routes over the same links,
// make a Router once, and to find the routes from one device to many,
// call Router.From once.
func (t *Topology) Route(a, b int, allow func(Link) bool, via func(int) bool) []int {
	return t.Router(allow).Route(a, b, via)
}

// Router finds routes over a fixed set of links of a topology. It is not
// safe for concurrent use, and sees the topology as it was when made.
type Router struct {
	t       *Topology
	out, in [][]hop // the hops out of and into each device, by increasing far end
}

// hop is one direction between two devices: to is the far end.
type hop struct {
	to  int
	cap float64 // GB/s, parallel links summed
}

// Router returns a Router over the links for which allow returns true
// (nil allows every link); self links never take part.
func (t *Topology) Router(allow func(Link) bool) *Router {
	n := len(t.Devices)
	r := &Router{t: t, out: make([][]hop, n), in: make([][]hop, n)}
	add := func(hs []hop, to int, c float64) []hop {
		k := slices.IndexFunc(hs, func(h hop) bool { return h.to == to })
		if k < 0 {
			return append(hs, hop{to: to, cap: c})
		}
		hs[k].cap += c
		return hs
	}
	for _, l := range t.Links {
		if l.From == l.To || allow != nil && !allow(l) {
			continue
		}
		r.out[l.From] = add(r.out[l.From], l.To, l.Capacity())
		r.in[l.To] = add(r.in[l.To], l.From, l.Capacity())
	}
	for i := range n {
		slices.SortFunc(r.out[i], func(x, y hop) int { return x.to - y.to })
		slices.SortFunc(r.in[i], func(x, y hop) int { return x.to - y.to })
	}
	return r
}

// Route is Topology.Route over the router's links.
func (r *Router) Route(a, b int, via func(int) bool) []int {
	if !r.valid(a) || !r.valid(b) {
		return nil
	}
	return r.From(a, via).Route(b)
}

// Relay is Route without the direct hop from a to b: the widest route
// through at least one other device, or nil.
func (r *Router) Relay(a, b int, via func(int) bool) []int {
	if !r.valid(a) || !r.valid(b) {
		return nil
	}
	return r.From(a, via).Relay(b)
}

func (r *Router) valid(d int) bool { return d >= 0 && d < len(r.t.Devices) }

// Routes are the routes from one device to every other over a Router's
// links (Router.From): what Router.Route and Router.Relay give for each
// destination, found with one widest-path search from the source and one
// breadth-first search per distinct width, instead of one of each per
// pair. Like its Router it is not safe for concurrent use.
type Routes struct {
	r     *Router
	a     int
	via   func(int) bool
	pass  []bool    // pass[i]: a route may cross device i (via)
	width []float64 // the widest route's bottleneck to each device; 0 if none
	trees map[float64]*hopTree
}

// hopTree is the breadth-first search from the source over the hops at
// least as wide as one width: prev[v] is the device that discovered v
// first (the source for itself, -1 if none), alt[v] the first that did
// other than the source (a relayed route's last hop).
type hopTree struct{ prev, alt []int32 }

// From returns the routes from device a over the router's links through
// the devices via accepts (nil: every device that is not a GPU). Its
// Route(b) and Relay(b) equal r.Route(a, b, via) and r.Relay(a, b, via).
// It calls via once per device, now.
func (r *Router) From(a int, via func(int) bool) *Routes {
	t := r.t
	n := len(t.Devices)
	if via == nil {
		via = func(i int) bool { return t.Devices[i].Kind != GPU }
	}
	rt := &Routes{r: r, a: a, via: via, pass: make([]bool, n), width: make([]float64, n), trees: map[float64]*hopTree{}}
	if !r.valid(a) {
		return rt
	}
	for i := range n {
		rt.pass[i] = via(i)
	}
	// Widest paths: Dijkstra on the bottleneck capacity, with a max-heap
	// (stale entries skipped). Only the source and the devices a route
	// may cross are expanded; the widths do not depend on the order in
	// which equally wide devices are taken.
	rt.width[a] = math.Inf(1)
	done := make([]bool, n)
	h := widthHeap{{a, rt.width[a]}}
	for len(h) > 0 {
		it := h.pop()
		u := it.dev
		if done[u] || it.w < rt.width[u] {
			continue
		}
		done[u] = true
		if u != a && !rt.pass[u] {
			continue
		}
		for _, o := range r.out[u] {
			if c := min(rt.width[u], o.cap); c > rt.width[o.to] && !done[o.to] {
				rt.width[o.to] = c
				h.push(widthItem{o.to, c})
			}
		}
	}
	return rt
}

// Route returns the route from the source to b, as Router.Route.
func (rt *Routes) Route(b int) []int {
	if !rt.r.valid(b) || !rt.r.valid(rt.a) {
		return nil
	}
	if b == rt.a {
		return []int{b}
	}
	w := rt.width[b]
	if w == 0 {
		return nil
	}
	return rt.tree(w).path(rt.a, b, false)
}

// Width returns the bottleneck capacity (GB/s) of the route from the
// source to b, the widest over the router's links: 0 if b cannot be
// reached, +Inf for the source itself.
func (rt *Routes) Width(b int) float64 {
	if !rt.r.valid(b) {
		return 0
	}
	return rt.width[b]
}

// Relay returns the route from the source to b through at least one
// other device, as Router.Relay.
func (rt *Routes) Relay(b int) []int {
	a := rt.a
	if !rt.r.valid(b) || !rt.r.valid(a) {
		return nil
	}
	if b == a {
		return []int{b}
	}
	if rt.pass[b] {
		// Routes to other devices may cross b, so leaving out the hop
		// a→b changes more than b's route: search for this pair alone.
		return rt.r.pairRoute(a, b, rt.via, false)
	}
	// b is crossed by no route, so the hop a→b serves b alone: b's
	// relayed width is the best over its other incoming hops from devices
	// a route may cross.
	var w float64
	for _, in := range rt.r.in[b] {
		if u := in.to; u != a && rt.pass[u] {
			w = max(w, min(rt.width[u], in.cap))
		}
	}
	if w == 0 {
		return nil
	}
	return rt.tree(w).path(a, b, true)
}

// tree returns the breadth-first search over the hops at least w wide.
func (rt *Routes) tree(w float64) *hopTree {
	if tr, ok := rt.trees[w]; ok {
		return tr
	}
	n := len(rt.width)
	tr := &hopTree{prev: make([]int32, n), alt: make([]int32, n)}
	for i := range n {
		tr.prev[i], tr.alt[i] = -1, -1
	}
	a := rt.a
	tr.prev[a] = int32(a)
	queue := []int32{int32(a)}
	for k := 0; k < len(queue); k++ {
		u := int(queue[k])
		if u != a && !rt.pass[u] {
			continue
		}
		for _, o := range rt.r.out[u] {
			if o.cap < w {
				continue
			}
			if tr.prev[o.to] < 0 {
				tr.prev[o.to] = int32(u)
				queue = append(queue, int32(o.to))
			}
			if u != a && tr.alt[o.to] < 0 {
				tr.alt[o.to] = int32(u)
			}
		}
	}
	rt.trees[w] = tr
	return tr
}

// path returns the tree's path from a to b; relayed, the one whose last
// hop comes from another device than a.
func (tr *hopTree) path(a, b int, relayed bool) []int {
	last := tr.prev[b]
	if relayed {
		last = tr.alt[b]
	}
	if last < 0 {
		return nil
	}
	path := []int{b}
	for v := int(last); v != a; v = int(tr.prev[v]) {
		path = append(path, v)
	}
	path = append(path, a)
	slices.Reverse(path)
	return path
}

type widthItem struct {
	dev int
	w   float64
}

// widthHeap is a binary max-heap on w (ties: the lower device first).
type widthHeap []widthItem

func (h widthHeap) less(i, j int) bool {
	return h[i].w > h[j].w || h[i].w == h[j].w && h[i].dev < h[j].dev
}

func (h *widthHeap) push(x widthItem) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *widthHeap) pop() widthItem {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, m) {
			m = l
		}
		if r < len(s) && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// pairRoute is the search for one pair that Routes does for many: a
// widest-path search that stops at b, then a breadth-first search over
// the hops at least that wide. With direct false the hop a→b is left out
// (Relay). Relay uses it where b is a device routes may cross; the tests
// check Routes against it everywhere.
func (r *Router) pairRoute(a, b int, via func(int) bool, direct bool) []int {
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
