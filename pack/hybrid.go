package pack

import (
	"errors"
	"fmt"
	"slices"

	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// Hybrid is a collective over two sets of trees that run at the same time
// on disjoint links (Blink, MLSys 2020, §3.4): one over the direct NVLinks
// between the ranks, one over the routes through switches and CPUs (PCIe
// on a DGX-1 or Cedar, the GPUs' NVLinks to the host on Mist). Either plan
// may be nil when its links do not reach every rank from the root; each
// graph is the one its plan was packed on (nil with it).
type Hybrid struct {
	NVLink *Plan
	PCIe   *Plan

	NVLinkGraph, PCIeGraph *Graph
}

// PlanHybrid returns the two tree sets of a broadcast from rank root among
// the ranks placed on devices ranks of t (HybridFor of sched.Bcast).
func PlanHybrid(t *topo.Topology, ranks []int, root int, o Options) (*Hybrid, error) {
	return HybridFor(t, ranks, sched.Bcast, root, o)
}

// HybridFor returns the two tree sets of collective coll (bcast, reduce
// or allreduce, packed as ForCollective packs them) among the ranks
// placed on devices ranks of t: one on the direct NVLink graph, one on the
// graph of relayed routes over every link class (FromTopology with
// Relayed). It fails only if neither set spans the ranks.
//
// The PCIe set is packed with the fewest trees within pcieThreshold of its
// optimum (o.Threshold is for the NVLink set): its trees share the few
// PCIe links of the switches and CPUs, where every tree pays the relayed
// route's latency on every piece, so that many light trees cost more than
// the rate they add. On the DGX-1 V100 (braid sim --sweep dgx1-v100 --coll
// allreduce --size 256M, segments searched by powers of two) the 1 % of
// the NVLink set made GPUs 0-6 a hybrid of 9 trees at 1.049× the rings,
// slower than the 2 NVLink trees alone (1.195×); 20 % made it 4 trees at
// 1.270×.
func HybridFor(t *topo.Topology, ranks []int, coll sched.Collective, root int, o Options) (*Hybrid, error) {
	var h Hybrid
	for _, s := range []struct {
		sel   Select
		plan  **Plan
		graph **Graph
	}{
		{Select{Classes: []topo.Class{topo.NVLink}, Routes: Direct}, &h.NVLink, &h.NVLinkGraph},
		{Select{Routes: Relayed}, &h.PCIe, &h.PCIeGraph},
	} {
		g, err := FromTopology(t, ranks, s.sel)
		if err != nil {
			return nil, err
		}
		oo := o
		if s.plan == &h.PCIe {
			oo.Threshold = pcieThreshold
		}
		p, err := packFor(g, coll, root, oo)
		if errors.Is(err, ErrDisconnected) {
			continue
		}
		if err != nil {
			return nil, err
		}
		*s.plan, *s.graph = p, g
	}
	if h.NVLink == nil && h.PCIe == nil {
		return nil, fmt.Errorf("pack: hybrid %v from rank %d: %w", coll, root, ErrDisconnected)
	}
	return &h, nil
}

// pcieThreshold is the Options.Threshold of the PCIe set of a hybrid.
const pcieThreshold = 0.2

// Split returns how many of total bytes go over the PCIe trees and how
// many over the NVLink trees (SplitHybrid with the two plans' rates in
// GB/s), where tDPA is the seconds it takes to switch peer access off
// before the PCIe transfers can start.
func (h *Hybrid) Split(total, tDPA float64) (pcie, nvl float64) {
	rate := func(p *Plan) float64 {
		if p == nil {
			return 0
		}
		return p.Rate * 1e9
	}
	return SplitHybrid(total, rate(h.PCIe), rate(h.NVLink), tDPA)
}

// Trees returns the trees of a call of total bytes split as Split does:
// the NVLink trees and the PCIe trees (their edges marked relayed) with
// their weights scaled so that each set's share of the data is its part of
// the split, in GB/s of the two sets together (so with tDPA 0 the weights
// are the plans' own), and the PCIe share in [0, 1]. A set whose part is
// empty is left out; a total of 0 or less splits the bytes in proportion
// to the rates (eq. 8 for large calls, or tDPA 0). The rate of the result, bytes over the slower set's
// time plus tDPA where PCIe trees are used, is returned too (GB/s).
func (h *Hybrid) Trees(total, tDPA float64) (ts *sched.Trees, pcieShare, rate float64) {
	if total <= 0 { // the split of the rates, which eq. 8 tends to
		total, tDPA = 1, 0
	}
	pcie, nvl := h.Split(total, tDPA)
	var sum float64
	for _, p := range []*Plan{h.NVLink, h.PCIe} {
		if p != nil {
			sum += p.Rate
		}
	}
	ts = &sched.Trees{}
	var time float64
	for _, s := range []struct {
		p     *Plan
		g     *Graph
		bytes float64
		delay float64
	}{{h.NVLink, h.NVLinkGraph, nvl, 0}, {h.PCIe, h.PCIeGraph, pcie, tDPA}} {
		if s.p == nil || s.bytes <= 0 {
			continue
		}
		scale := s.bytes / total * sum / s.p.Rate
		for _, t := range s.p.SchedTrees(s.g).Tree {
			t.Weight *= scale
			ts.Tree = append(ts.Tree, t)
		}
		time = max(time, s.delay+s.bytes/(s.p.Rate*1e9))
	}
	return ts, pcie / total, total / time / 1e9
}

// SplitHybrid divides total bytes between PCIe and NVLink tree sets of
// rates bwPCIe and bwNVL (bytes per second) so that both finish together
// when the PCIe set starts tDPA seconds late (Blink eq. 8):
//
//	D_PCIe = (D·B_PCIe − T_dpa·B_PCIe·B_NVL) / (B_PCIe + B_NVL),  D_NVL = D − D_PCIe,
//
// with D_PCIe clamped to [0, D] (a message too small to repay T_dpa goes
// over NVLink alone).
func SplitHybrid(total, bwPCIe, bwNVL, tDPA float64) (pcie, nvl float64) {
	if bwPCIe+bwNVL <= 0 {
		return 0, total
	}
	pcie = (total*bwPCIe - tDPA*bwPCIe*bwNVL) / (bwPCIe + bwNVL)
	pcie = min(max(pcie, 0), total)
	return pcie, total - pcie
}

// relayedFlags returns, for each rank of tree t of a plan packed on g,
// whether the edge from its parent is a relayed route (its Path crosses a
// device between the two ranks); nil if none is.
func relayedFlags(t Tree, g *Graph) []bool {
	if g == nil || !slices.ContainsFunc(t.Edge, func(e int) bool { return e >= 0 && len(g.Edges[e].Path) > 2 }) {
		return nil
	}
	out := make([]bool, len(t.Parent))
	for v, e := range t.Edge {
		out[v] = e >= 0 && v != t.Root && len(g.Edges[e].Path) > 2
	}
	return out
}

// Packed is the trees a tree-based collective runs on: what TreesFor
// decides.
type Packed struct {
	// Trees are the trees with their weights (GB/s) and relayed edges.
	Trees *sched.Trees
	// Links is what they were packed over: "nvlink", "nvlink+pcie" (the
	// hybrid) or "all".
	Links string
	// Plan and Graph are the packing of the NVLink set (the hybrid's) or
	// of every link ("all").
	Plan  *Plan
	Graph *Graph
	// Hybrid is the two sets, with Links "nvlink+pcie".
	Hybrid *Hybrid
	// Rate is the trees' rate together (GB/s) and PCIeShare the part of
	// the bytes on the PCIe trees.
	Rate, PCIeShare float64
}

// TreesFor decides the trees of collective coll (bcast, reduce or
// allreduce) among the ranks on devices devs of t for a call of bytes
// whose PCIe transfers start tDPA seconds late (the time to switch peer
// access off, Blink, MLSys 2020, §3.4): where the direct NVLinks span the
// ranks, the NVLink trees, with the PCIe trees beside them (HybridFor)
// carrying the part of the bytes that eq. 8 gives them where that part is
// not empty; where they do not, trees packed over every link and route
// (ForCollective's "all").
func TreesFor(t *topo.Topology, devs []int, coll sched.Collective, root int, bytes, tDPA float64) (*Packed, error) {
	h, err := HybridFor(t, devs, coll, root, Options{})
	if err != nil && !errors.Is(err, ErrDisconnected) {
		return nil, err
	}
	if err != nil || h.NVLink == nil {
		p, g, l, err := ForCollective(t, devs, coll, root, "all")
		if err != nil {
			return nil, err
		}
		return &Packed{Trees: p.SchedTrees(g), Links: l, Plan: p, Graph: g, Rate: p.Rate}, nil
	}
	pk := &Packed{Links: "nvlink", Plan: h.NVLink, Graph: h.NVLinkGraph, Rate: h.NVLink.Rate}
	if h.PCIe != nil {
		ts, share, rate := h.Trees(bytes, tDPA)
		if share > 0 {
			pk.Trees, pk.Links, pk.Hybrid, pk.Rate, pk.PCIeShare = ts, "nvlink+pcie", h, rate, share
			return pk, nil
		}
	}
	pk.Trees = h.NVLink.SchedTrees(h.NVLinkGraph)
	return pk, nil
}
