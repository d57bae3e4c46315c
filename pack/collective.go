package pack

import (
	"errors"
	"fmt"
	"slices"

	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// ForCollective packs trees for collective coll among the ranks on devices
// devs of t (rank i on devs[i]): arborescences out of root for a
// broadcast; for a reduce, whose data flows from the leaves to the root,
// the arborescences out of root of the graph with every edge reversed, so
// that each tree loads the link directions its sends take; for an
// allreduce, undirected trees rooted at their centres (AllReduce).
//
// links lists, in order of preference, what to pack over: "nvlink" (the
// direct NVLinks), "all" (every link, with routes through switches, CPUs
// and NICs) or "peer" (every direct link, and routes only between ranks
// that no direct link joins: the paths a GPU's copy to a peer takes,
// Fallback). The first under which every rank is reachable wins;
// ForCollective returns its plan, graph and name.
func ForCollective(t *topo.Topology, devs []int, coll sched.Collective, root int, links ...string) (*Plan, *Graph, string, error) {
	err := fmt.Errorf("pack: no links to pack over")
	for _, l := range links {
		var sel Select
		switch l {
		case "nvlink":
			sel = Select{Classes: []topo.Class{topo.NVLink}, Routes: Direct}
		case "all":
			sel = Select{Routes: Direct | Relayed}
		case "peer":
			sel = Select{Routes: Direct | Fallback}
		default:
			return nil, nil, "", fmt.Errorf("pack: links %q: want nvlink, all or peer", l)
		}
		var g *Graph
		if g, err = FromTopology(t, devs, sel); err != nil {
			return nil, nil, "", err
		}
		var p *Plan
		if p, err = packFor(g, coll, root, Options{}); err == nil {
			return p, g, l, nil
		}
		if !errors.Is(err, ErrDisconnected) {
			return nil, nil, "", err
		}
	}
	return nil, nil, "", err
}

// packFor packs g for coll as ForCollective does.
func packFor(g *Graph, coll sched.Collective, root int, o Options) (*Plan, error) {
	switch coll {
	case sched.Allreduce:
		return AllReduce(g, -1, o)
	case sched.Reduce:
		return Broadcast(Reversed(g), root, o)
	}
	return Broadcast(g, root, o)
}

// Reversed returns g with every edge turned around: the edge u → v that
// uses resources R becomes v → u using R, with the same index, pairing
// and (reversed) path.
func Reversed(g *Graph) *Graph {
	r := &Graph{N: g.N, Cap: slices.Clone(g.Cap), Edges: make([]Edge, len(g.Edges))}
	for i, e := range g.Edges {
		path := slices.Clone(e.Path)
		slices.Reverse(path)
		r.Edges[i] = Edge{From: e.To, To: e.From, Use: slices.Clone(e.Use), Rev: e.Rev, Path: path}
	}
	return r
}

// SchedTrees returns the plan's trees as the sched.Trees that algo's
// treepack schedules take, packed on g (nil for a plan without one): an
// edge that g routes through other devices (a relayed edge, whose Path
// crosses more than the two ranks' devices) is marked relayed, so that
// the schedule sends it on the relayed route rather than the direct link.
func (p *Plan) SchedTrees(g *Graph) *sched.Trees {
	ts := &sched.Trees{}
	for _, t := range p.Trees {
		ts.Tree = append(ts.Tree, sched.Tree{Root: t.Root, Parent: slices.Clone(t.Parent), Weight: t.Weight, Relayed: relayedFlags(t, g)})
	}
	return ts
}
