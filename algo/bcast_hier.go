package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(hierBcast{base{"hier", sched.Bcast}}) }

// hierBcast is the two-level broadcast: the root sends to one leader on
// every other host (the host's lowest rank), and each leader, the root
// included, broadcasts within its host. Leaders send across hosts before
// they send within their host. Within a host the ranks are ordered as in
// "topochain" (the leader's NUMA node first), so each level crosses a NUMA
// boundary as little as it can.
//
// Two shapes, both from the same two levels:
//
//   - one segment: a binomial tree over the leaders (host order from the
//     root's host onwards), then a binomial tree within each host. For
//     small vectors.
//   - pipelined: a chain over the leaders and a chain within each host, the
//     vector cut into segments that every rank forwards as soon as it has
//     them (the pipelined chain of Xin, Xie and Li, Computer Systems &
//     Applications 2020, two levels deep, so the fill is
//     H − 1 + L − 1 hops instead of n − 1). For large vectors.
//
// Params.Segment ≥ Count picks the first, a smaller one the second with
// that segment; 0 lets the model choose shape and segment (cost.Default,
// float32 elements; Tune does it for the real model and element size).
//
// Cost, for an M-byte vector on H hosts joined by (α_n, β_n), host h with
// L_h ranks joined by (α_h, β_h), on one NUMA node each:
//
//	one segment: T ≈ B(H; α_n, β_n) + max_h B(L_h; α_h, β_h),
//	             B(L; α, β) = Σ_{j=1..⌈log2 L⌉} (α + j·M/β)
//	pipelined, s segments of C bytes:
//	             T = (H − 1)(α_n + C/β_n) + max_h (L_h − 1)(α_h + C/β_h)
//	               + (s − 1)·max(α_n + C/β_n, max_h (α_h + C/β_h))
//
// A rank sends to all its children at once, so they share its port: in a
// binomial tree a rank j levels above the leaves feeds j children, hence
// B's j·M/β rather than the textbook ⌈log2 L⌉(α + M/β), which assumes sends
// one after another. A leader's sends across hosts and within its host use
// different links and go side by side, sharing only its port (β_p, the
// model's best bandwidth): the pipelined form leaves out that a leader
// then forwards a segment every max(α + C/β, 2C/β_p). Cost calls treeTime,
// which counts every link and port on the way.
type hierBcast struct{ base }

// hierBcastTree returns the two-level tree of p: chains if chain is set,
// binomial trees otherwise.
func hierBcastTree(p sched.Params, chain bool) bcastTree {
	groups := p.Layout.Groups(p.NRanks)
	rh := p.Layout.HostOf(p.Root)
	leaders := make([]int, len(groups))
	locals := make([][]int, len(groups))
	for i := range groups {
		h := (rh + i) % len(groups)
		first := groups[h][0]
		if h == rh {
			first = p.Root
		}
		leaders[i] = first
		locals[i] = localOrder(p.Layout, groups[h], first)
	}
	shape := bcastTree.binomial
	if chain {
		shape = bcastTree.chain
	}
	t := newBcastTree(p.NRanks)
	shape(t, leaders)
	for _, lo := range locals {
		shape(t, lo)
	}
	return t
}

// hierBcastBest returns the tree and segment that minimise treeTime for p
// under m with es-byte elements.
func hierBcastBest(p sched.Params, es int, m cost.Model) (bcastTree, int) {
	tb, tc := hierBcastTree(p, false), hierBcastTree(p, true)
	seg := treeSegments(p.Count, bestSegment(p, tc, es, m))
	if seg >= p.Count || treeTime(p, tb, es, p.Count, m) <= treeTime(p, tc, es, seg, m) {
		return tb, max(1, p.Count)
	}
	return tc, seg
}

// plan returns the tree and segment Program uses for p.
func (hierBcast) plan(p sched.Params) (bcastTree, int) {
	if p.Segment > 0 {
		seg := treeSegments(p.Count, p.Segment)
		return hierBcastTree(p, seg < p.Count), seg
	}
	return hierBcastBest(p, 4, cost.Default())
}

func (a hierBcast) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	if p.Count == 0 {
		return g.program()
	}
	t, seg := a.plan(p)
	pipeBcast(g, t.parent[r], t.children[r], p.Count, seg, 0)
	return g.program()
}

func (a hierBcast) Cost(p sched.Params, es int, m cost.Model) float64 {
	t, seg := a.plan(p)
	return treeTime(p, t, es, seg, m)
}

func (hierBcast) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	if p.Segment == 0 && p.Count > 0 {
		_, p.Segment = hierBcastBest(p, es, m)
	}
	return p
}
