package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(topoChainBcast{base{"topochain", sched.Bcast}}) }

// topoChainBcast is the topology-aware pipelined chain broadcast of Xin,
// Xie and Li (Computer Systems & Applications 2020) §4.3 (TA-PC): the
// pipelined chain of "chain", with the ranks put in an order that follows
// the machine instead of rank order. The chain starts at the root, goes
// through the rest of the root's NUMA node, then the root's other NUMA
// nodes, then every other host in turn (from the root's host onwards,
// cyclically), each host's ranks grouped by NUMA node. So the chain crosses
// each host boundary once and each NUMA boundary once (rank order on
// interleaved hosts, A B A B, would cross a host boundary at every hop),
// every link between two hosts carries the stream once, and every host but
// the first and last uses its network link in both directions at once, in
// from the previous host and out to the next: §4.3's point that a chain
// ordered by the topology keeps each link direction busy with one stream
// instead of leaving some idle and overloading others.
//
// The vector goes in segments of Params.Segment elements; when 0, the
// segment that minimises the cost below under cost.Default for float32
// elements (Tune finds it for the real model and element size).
//
// Cost, for s = ⌈M/C⌉ segments of C bytes of an M-byte vector and the
// chain's hops i with links (α_i, β_i) (treeTime, which Cost calls, also
// accounts for a shorter last segment, ports and network links):
//
//	T = Σ_i (α_i + C/β_i) + (s − 1)·max_i (α_i + C/β_i)
//
// which for one class of link is the paper's (M/C + n − 2)(α + C/β),
// minimised near C* = √(M·α·β/(n − 2)); with several classes, b the
// slowest hop, the optimum is near √(M·α_b / (Σ_i 1/β_i − 1/β_b)).
type topoChainBcast struct{ base }

// topoOrder returns the chain's order of the ranks of p: see topoChainBcast.
func topoOrder(p sched.Params) []int {
	groups := p.Layout.Groups(p.NRanks)
	rh := p.Layout.HostOf(p.Root)
	var order []int
	for i := range groups {
		h := (rh + i) % len(groups)
		first := -1
		if h == rh {
			first = p.Root
		}
		order = append(order, localOrder(p.Layout, groups[h], first)...)
	}
	return order
}

func topoChainTree(p sched.Params) bcastTree {
	t := newBcastTree(p.NRanks)
	t.chain(topoOrder(p))
	return t
}

// segment returns the segment Program uses for p.
func (topoChainBcast) segment(p sched.Params, t bcastTree) int {
	if p.Segment > 0 {
		return treeSegments(p.Count, p.Segment)
	}
	return treeSegments(p.Count, bestSegment(p, t, 4, cost.Default()))
}

func (a topoChainBcast) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	if p.Count == 0 {
		return g.program()
	}
	t := topoChainTree(p)
	pipeBcast(g, t.parent[r], t.children[r], p.Count, a.segment(p, t), 0)
	return g.program()
}

func (a topoChainBcast) Cost(p sched.Params, es int, m cost.Model) float64 {
	t := topoChainTree(p)
	return treeTime(p, t, es, a.segment(p, t), m)
}

func (topoChainBcast) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	if p.Segment == 0 && p.Count > 0 {
		p.Segment = bestSegment(p, topoChainTree(p), es, m)
	}
	return p
}
