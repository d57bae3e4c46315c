// Package pack packs spanning trees into a machine's links, after Blink
// (Blink, MLSys 2020, §3): it finds how to split a broadcast or an
// allreduce among weighted trees so that together they use the links at the
// best rate the topology allows, with few trees.
//
// A Graph has one vertex per rank and edges that consume capacitated
// resources (link directions); FromTopology builds one from a topo
// allocation, with direct links only (NVLink) or also routes through PCIe
// switches, CPUs, NVSwitches and NICs, whose shared links the trees then
// share. On a graph:
//
//   - Broadcast packs arborescences out of a root (§3.1-3.2): a
//     multiplicative-weight update (MWU) with a Chu-Liu/Edmonds
//     minimum-cost arborescence per step proposes trees; column generation
//     with the same oracle makes the packing LP exact; an integer program
//     over the candidates, branch and bound on the LP, relaxed quantum by
//     quantum, keeps few trees within Options.Threshold of the optimum.
//   - AllReduce packs undirected spanning trees (§3.3), each reduced toward
//     its root and broadcast back on the same edges.
//   - MWU is the first step alone, a (1-ε)-approximate packing.
//   - BroadcastBound computes the optimum independently: by Edmonds'
//     branching theorem, the minimum over v of the max-flow from the root
//     to v.
//
// On a topology: OneHop gives the one-hop trees of a switch (§3.5, DGX-2),
// PlanHybrid the NVLink and PCIe tree sets of a hybrid broadcast with
// SplitHybrid its data split (eq. 8), and PlanAllReduce the three-phase
// multi-server allreduce (§3.5), which falls back to one server's plan.
//
// Rates and weights are in the unit of the graph's capacities: GB/s for
// graphs from package topo. A Plan is plain data: vertex r of its trees
// is rank r, Parent[v] is v's parent in a tree (-1 at the root), Edge[v]
// the graph edge Parent[v] → v, and a tree's share of the data is its
// Weight over the plan's Rate (Split cuts a count of elements into
// per-tree ranges).
//
// Example, the six trees of a broadcast on a DGX-1 V100:
//
//	t := topo.DGX1V100()
//	g, err := pack.FromTopology(t, t.GPUs(), pack.Select{Classes: []topo.Class{topo.NVLink}})
//	if err != nil { ... }
//	p, err := pack.Broadcast(g, 0, pack.Options{})
//	if err != nil { ... }
//	fmt.Print(p) // 6 trees of 25 GB/s, rate 150 GB/s
//	for i, r := range p.Split(count) {
//		// elements r[0]:r[1] travel down p.Trees[i]
//	}
//
// Of Braid, pack imports only topo (and so sched and cost), never algo
// or exec.
package pack
