package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// Node is a vertex of a Network: one rank, or a device that only forwards
// traffic (a switch, a PCIe bridge, a NIC).
type Node struct {
	Name string
	// Rank is the rank the node stands for, or -1.
	Rank int
	// Transit says whether routes that the Network computes may pass
	// through the node. NewNetwork makes rank nodes non-transit and AddNode
	// makes its nodes transit; SetTransit changes it.
	Transit bool
}

// Link is a directed link between two nodes.
type Link struct {
	Name     string
	From, To int // node indices
	// Bandwidth is in bytes per second. +Inf means the link never limits
	// a flow (an attachment with no cost of its own).
	Bandwidth float64
	// Latency is in seconds, paid once per message that crosses the link.
	Latency float64
}

// Network is a directed graph of nodes and links on which the simulator
// runs a schedule, with a route for every (source rank, destination rank)
// pair.
//
// Build one with NewNetwork, then AddNode and AddLink, or with FromModel.
// The route of a message from rank a to rank b on channel ch is, in order of
// precedence: the one SetChannelRoute gave for (a, b, ch), for a channel
// from sched.RelayedChannel up the one SetRelayedRoute gave for (a, b), the
// one SetRoute gave for (a, b), or the path the Network computes (see
// Route).
//
// The methods are safe for concurrent use; routes computed are cached until
// the next change to the graph.
type Network struct {
	mu     sync.Mutex
	nranks int
	nodes  []Node
	links  []Link
	out    [][]int // node -> indices of the links leaving it, in order of addition

	pairRoutes map[pairKey][]int
	chanRoutes map[chanKey][]int
	relayed    map[pairKey][]int
	computed   map[pairKey][]int
	// direct, when set (FromModel), gives the default route of a pair
	// without a graph search.
	direct func(a, b int) []int
}

type pairKey struct{ src, dst int }

type chanKey struct {
	src, dst int
	ch       uint8
}

// NewNetwork returns a network with nranks nodes, 0 to nranks−1, that stand
// for the ranks (named "r0", "r1", ...) and no links.
func NewNetwork(nranks int) *Network {
	n := &Network{nranks: nranks}
	for r := range nranks {
		n.nodes = append(n.nodes, Node{Name: fmt.Sprintf("r%d", r), Rank: r})
		n.out = append(n.out, nil)
	}
	return n
}

// NRanks returns the number of ranks.
func (n *Network) NRanks() int { return n.nranks }

// NumNodes returns the number of nodes.
func (n *Network) NumNodes() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.nodes)
}

// NumLinks returns the number of links.
func (n *Network) NumLinks() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.links)
}

// Node returns node i.
func (n *Network) Node(i int) Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodes[i]
}

// Link returns link i.
func (n *Network) Link(i int) Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[i]
}

// Links returns a copy of the links, indexed as Result.Links is.
func (n *Network) Links() []Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Link(nil), n.links...)
}

// AddNode adds a transit node named name and returns its index.
func (n *Network) AddNode(name string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes = append(n.nodes, Node{Name: name, Rank: -1, Transit: true})
	n.out = append(n.out, nil)
	n.computed = nil
	return len(n.nodes) - 1
}

// SetNodeName renames node i. Links added afterwards without a name are
// named after it; names already given do not change.
func (n *Network) SetNodeName(i int, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i < 0 || i >= len(n.nodes) {
		return fmt.Errorf("sim: node %d out of range [0, %d)", i, len(n.nodes))
	}
	n.nodes[i].Name = name
	return nil
}

// SetTransit sets whether computed routes may pass through node i.
func (n *Network) SetTransit(i int, transit bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i < 0 || i >= len(n.nodes) {
		return fmt.Errorf("sim: node %d out of range [0, %d)", i, len(n.nodes))
	}
	n.nodes[i].Transit = transit
	n.computed = nil
	return nil
}

// AddLink adds l and returns its index. It fails unless l joins two
// distinct existing nodes with a positive bandwidth (+Inf allowed) and a
// finite, non-negative latency. An empty name becomes "FROM->TO".
func (n *Network) AddLink(l Link) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addLink(l)
}

func (n *Network) addLink(l Link) (int, error) {
	switch {
	case l.From < 0 || l.From >= len(n.nodes) || l.To < 0 || l.To >= len(n.nodes):
		return -1, fmt.Errorf("sim: link %q from node %d to node %d: node out of range [0, %d)", l.Name, l.From, l.To, len(n.nodes))
	case l.From == l.To:
		return -1, fmt.Errorf("sim: link %q from node %d to itself", l.Name, l.From)
	case !(l.Bandwidth > 0): // also NaN
		return -1, fmt.Errorf("sim: link %q: bandwidth %g B/s must be positive", l.Name, l.Bandwidth)
	case !(l.Latency >= 0) || math.IsInf(l.Latency, 0):
		return -1, fmt.Errorf("sim: link %q: latency %g s must be finite and non-negative", l.Name, l.Latency)
	}
	if l.Name == "" {
		l.Name = n.nodes[l.From].Name + "->" + n.nodes[l.To].Name
	}
	n.links = append(n.links, l)
	id := len(n.links) - 1
	n.out[l.From] = append(n.out[l.From], id)
	n.computed = nil
	return id, nil
}

// checkPath returns an error unless links is a path of existing links from
// rank src's node to rank dst's node.
func (n *Network) checkPath(src, dst int, links []int) error {
	if src < 0 || src >= n.nranks || dst < 0 || dst >= n.nranks || src == dst {
		return fmt.Errorf("sim: route from rank %d to rank %d: need two distinct ranks in [0, %d)", src, dst, n.nranks)
	}
	if len(links) == 0 {
		return fmt.Errorf("sim: route from rank %d to rank %d is empty", src, dst)
	}
	at := src
	for k, id := range links {
		if id < 0 || id >= len(n.links) {
			return fmt.Errorf("sim: route from rank %d to rank %d: link %d out of range [0, %d)", src, dst, id, len(n.links))
		}
		if n.links[id].From != at {
			return fmt.Errorf("sim: route from rank %d to rank %d: link %d (%s) at position %d starts at node %d, not %d",
				src, dst, id, n.links[id].Name, k, n.links[id].From, at)
		}
		at = n.links[id].To
	}
	if at != dst {
		return fmt.Errorf("sim: route from rank %d to rank %d ends at node %d", src, dst, at)
	}
	return nil
}

// SetRoute fixes the route of every message from rank src to rank dst: the
// links, in order, from src's node to dst's node. The network keeps its own
// copy of links.
func (n *Network) SetRoute(src, dst int, links []int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.checkPath(src, dst, links); err != nil {
		return err
	}
	if n.pairRoutes == nil {
		n.pairRoutes = map[pairKey][]int{}
	}
	n.pairRoutes[pairKey{src, dst}] = append([]int(nil), links...)
	return nil
}

// SetChannelRoute fixes the route of the messages from rank src to rank dst
// on channel ch (sched.Step.Channel); it takes precedence over SetRoute.
func (n *Network) SetChannelRoute(src, dst int, ch uint8, links []int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.checkPath(src, dst, links); err != nil {
		return err
	}
	if n.chanRoutes == nil {
		n.chanRoutes = map[chanKey][]int{}
	}
	n.chanRoutes[chanKey{src, dst, ch}] = append([]int(nil), links...)
	return nil
}

// SetRelayedRoute fixes the relayed route from rank src to rank dst: the
// route of its messages on the channels from sched.RelayedChannel up
// (tree edges marked relayed, sched.Tree.Relayed: Blink's PCIe trees,
// MLSys 2020, §3.4), unless SetChannelRoute gave one for the channel.
// Without a relayed route, those channels take the pair's route as the
// others do.
func (n *Network) SetRelayedRoute(src, dst int, links []int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.checkPath(src, dst, links); err != nil {
		return err
	}
	if n.relayed == nil {
		n.relayed = map[pairKey][]int{}
	}
	n.relayed[pairKey{src, dst}] = append([]int(nil), links...)
	return nil
}

// ErrNoRoute is returned (wrapped) by Route when no path joins two ranks.
var ErrNoRoute = errors.New("no route")

// Route returns the links that messages from rank src to rank dst on
// channel ch cross, in order. Without a route set by SetChannelRoute,
// SetRelayedRoute (for ch ≥ sched.RelayedChannel) or SetRoute it is the
// shortest path from src's node to dst's node whose
// inner nodes are all transit: fewest links first, then least total
// latency, then the largest bottleneck bandwidth, then a fixed choice that
// depends only on the order in which nodes and links were added. The slice
// is shared: do not modify it.
func (n *Network) Route(src, dst int, ch uint8) ([]int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if src < 0 || src >= n.nranks || dst < 0 || dst >= n.nranks || src == dst {
		return nil, fmt.Errorf("sim: route from rank %d to rank %d: need two distinct ranks in [0, %d)", src, dst, n.nranks)
	}
	if r, ok := n.chanRoutes[chanKey{src, dst, ch}]; ok {
		return r, nil
	}
	if r, ok := n.relayed[pairKey{src, dst}]; ok && ch >= sched.RelayedChannel {
		return r, nil
	}
	if r, ok := n.pairRoutes[pairKey{src, dst}]; ok {
		return r, nil
	}
	if n.direct != nil {
		return n.direct(src, dst), nil
	}
	if r, ok := n.computed[pairKey{src, dst}]; ok {
		return r, nil
	}
	r := n.shortest(src, dst)
	if r == nil {
		return nil, fmt.Errorf("sim: from rank %d to rank %d: %w", src, dst, ErrNoRoute)
	}
	if n.computed == nil {
		n.computed = map[pairKey][]int{}
	}
	n.computed[pairKey{src, dst}] = r
	return r, nil
}

// label orders paths: fewer hops, then less latency, then a larger
// bottleneck. The order is isotone (extending two paths by the same link
// keeps their order), so Dijkstra's algorithm finds a least path.
type label struct {
	hops int
	lat  float64
	bw   float64
}

func (a label) less(b label) bool {
	if a.hops != b.hops {
		return a.hops < b.hops
	}
	if a.lat != b.lat {
		return a.lat < b.lat
	}
	return a.bw > b.bw
}

type pqItem struct {
	node int
	l    label
	seq  int
}

type pq []pqItem

func (q pq) Len() int { return len(q) }
func (q pq) Less(i, j int) bool {
	if q[i].l.less(q[j].l) {
		return true
	}
	if q[j].l.less(q[i].l) {
		return false
	}
	return q[i].seq < q[j].seq
}
func (q pq) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *pq) Push(x any)   { *q = append(*q, x.(pqItem)) }
func (q *pq) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// shortest returns the least path from src to dst, or nil.
func (n *Network) shortest(src, dst int) []int {
	best := make([]label, len(n.nodes))
	via := make([]int, len(n.nodes)) // link into the node on its best path
	final := make([]bool, len(n.nodes))
	for i := range best {
		best[i] = label{hops: math.MaxInt}
		via[i] = -1
	}
	best[src] = label{bw: math.Inf(1)}
	q := &pq{{node: src, l: best[src]}}
	seq := 0
	for q.Len() > 0 {
		it := heap.Pop(q).(pqItem)
		u := it.node
		if final[u] {
			continue
		}
		final[u] = true
		if u == dst {
			break
		}
		if u != src && !n.nodes[u].Transit {
			continue
		}
		for _, id := range n.out[u] {
			l := &n.links[id]
			v := l.To
			if final[v] {
				continue
			}
			cand := label{hops: best[u].hops + 1, lat: best[u].lat + l.Latency, bw: min(best[u].bw, l.Bandwidth)}
			if cand.less(best[v]) {
				best[v], via[v] = cand, id
				seq++
				heap.Push(q, pqItem{node: v, l: cand, seq: seq})
			}
		}
	}
	if via[dst] < 0 {
		return nil
	}
	var path []int
	for at := dst; at != src; at = n.links[via[at]].From {
		path = append(path, via[at])
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return path
}

// MeshOption changes the network FromModel builds.
type MeshOption uint8

const (
	// SharedNIC sends the traffic between hosts through one network port
	// per host, so that the ranks of a host share its bandwidth: every host
	// gets a node "hH" joined to a switch node "net" by a link each way,
	// "hH up" and "hH down" (the cost model's inter-host bandwidth; the
	// way up carries its latency), and every rank a link of unlimited
	// bandwidth and no latency each way to its host's node. Ranks of one
	// host keep their direct links.
	SharedNIC MeshOption = 1 + iota
	// RankPorts makes every rank send through one port and receive through
	// another, so that the messages a rank sends (or receives) at once
	// share a bandwidth: the one-port model that closed forms of direct
	// algorithms assume. Rank R gets nodes "rR out" and "rR in", joined to
	// it by links "rR tx" and "rR rx" of the model's largest bandwidth and
	// no latency; the direct links (and SharedNIC's) start at the out node
	// and end at the in node.
	RankPorts
)

// FromModel returns the network of n ranks placed by layout (nil: one host,
// one NUMA node) as the cost model m sees it: a direct link each way
// between every two ranks with the latency α and bandwidth β of their class
// (cost.ClassOf), named "rA->rB". With SharedNIC the ranks of different
// hosts are joined through their hosts' ports instead, and with RankPorts
// every rank's traffic passes its own ports as well (see the options).
// Routes are fixed: the direct link, or the path through the ports;
// SetRoute and SetChannelRoute still override them.
//
// The full mesh has n(n−1) links: about 60 MB for a thousand ranks.
func FromModel(m cost.Model, layout *sched.Layout, n int, opts ...MeshOption) (*Network, error) {
	if err := m.Valid(); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("sim: %d ranks: need at least 1", n)
	}
	if err := layout.Check(n); err != nil {
		return nil, err
	}
	shared, ports := false, false
	for _, o := range opts {
		switch o {
		case SharedNIC:
			shared = true
		case RankPorts:
			ports = true
		default:
			return nil, fmt.Errorf("sim: unknown mesh option %d", o)
		}
	}
	net := NewNetwork(n)
	addNode := func(name string) int {
		net.nodes = append(net.nodes, Node{Name: name, Rank: -1, Transit: true})
		net.out = append(net.out, nil)
		return len(net.nodes) - 1
	}
	var addErr error // the first link the model's figures cannot make
	mustAdd := func(l Link) int {
		id, err := net.addLink(l)
		if err != nil && addErr == nil {
			addErr = err
		}
		return id
	}
	// Where rank r's traffic leaves and arrives: r itself, or its ports.
	src, dst := make([]int, n), make([]int, n)
	var tx, rx []int
	for r := range n {
		src[r], dst[r] = r, r
	}
	if ports {
		bw := 0.0
		for _, c := range cost.Classes() {
			bw = max(bw, m.Link(c).Beta)
		}
		for r := range n {
			src[r], dst[r] = addNode(fmt.Sprintf("r%d out", r)), addNode(fmt.Sprintf("r%d in", r))
			tx = append(tx, mustAdd(Link{Name: fmt.Sprintf("r%d tx", r), From: r, To: src[r], Bandwidth: bw}))
			rx = append(rx, mustAdd(Link{Name: fmt.Sprintf("r%d rx", r), From: dst[r], To: r, Bandwidth: bw}))
		}
	}
	// pair[a*n+b] is the direct link from a to b, or -1.
	pair := make([]int32, n*n)
	for a := range n {
		for b := range n {
			pair[a*n+b] = -1
			if a == b {
				continue
			}
			c := cost.ClassOf(layout, a, b)
			if shared && c == cost.Inter {
				continue
			}
			l := m.Link(c)
			pair[a*n+b] = int32(mustAdd(Link{Name: fmt.Sprintf("r%d->r%d", a, b), From: src[a], To: dst[b], Bandwidth: l.Beta, Latency: l.Alpha}))
		}
	}
	var up, down, attach, detach []int // per host: host->net, net->host; per rank: rank->host, host->rank
	if shared && layout.NHosts() > 1 {
		inter := m.Link(cost.Inter)
		sw := addNode("net")
		host0 := len(net.nodes)
		for h := range layout.NHosts() {
			addNode(fmt.Sprintf("h%d", h))
		}
		for h := range layout.NHosts() {
			up = append(up, mustAdd(Link{Name: fmt.Sprintf("h%d up", h), From: host0 + h, To: sw, Bandwidth: inter.Beta, Latency: inter.Alpha}))
			down = append(down, mustAdd(Link{Name: fmt.Sprintf("h%d down", h), From: sw, To: host0 + h, Bandwidth: inter.Beta}))
		}
		for r := range n {
			h := host0 + layout.HostOf(r)
			attach = append(attach, mustAdd(Link{From: src[r], To: h, Bandwidth: math.Inf(1)}))
			detach = append(detach, mustAdd(Link{From: h, To: dst[r], Bandwidth: math.Inf(1)}))
		}
	}
	if addErr != nil {
		return nil, addErr
	}
	// Routes are built once, on first use, and shared.
	routes := make([][]int, n*n)
	net.direct = func(a, b int) []int {
		k := a*n + b
		if routes[k] == nil {
			var r []int
			if ports {
				r = append(r, tx[a])
			}
			if id := pair[k]; id >= 0 {
				r = append(r, int(id))
			} else {
				r = append(r, attach[a], up[layout.HostOf(a)], down[layout.HostOf(b)], detach[b])
			}
			if ports {
				r = append(r, rx[b])
			}
			routes[k] = r
		}
		return routes[k]
	}
	return net, nil
}
