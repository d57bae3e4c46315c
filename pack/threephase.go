package pack

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/braid-ccl/braid/topo"
)

// ThreePhase is the allreduce of Blink §3.5 for ranks spread over servers:
//
//  1. within each server, every part of the data is reduced toward the
//     part's server-local root over one of the server's trees;
//  2. across servers, each part is reduced and broadcast among its
//     server-local roots by one-hop trees: the part is cut into as many
//     pieces as there are servers, and piece j is reduced to server j's
//     root by the other roots, then sent back from it (OneHop over the
//     roots);
//  3. within each server, every part is broadcast from its server-local
//     root over the same tree as in phase 1.
//
// With one server phase 2 is empty and this is the server's Local plan.
// It is plain data: a schedule generator turns it into steps.
type ThreePhase struct {
	// Servers lists the ranks on each server, servers in order of first
	// appearance, ranks in increasing order. Rank r is the r-th of the
	// ranks the plan was made for.
	Servers [][]int
	// Local[m] is server m's allreduce plan: vertex k of it is rank
	// Servers[m][k]. A one-rank server has a plan of no trees.
	Local []*Plan
	// Parts cut the data into consecutive pieces, in order: every local
	// plan's tree shares are unions of parts (the parts are the common
	// refinement of the servers' shares), so each part has one tree, and
	// one root, on every server.
	Parts []Part
}

// Part is a piece of the data and the tree it takes on each server.
type Part struct {
	Share float64 // the fraction of the data; the parts' shares sum to 1
	// Tree[m] is the index of the part's tree in Local[m].Trees, -1 on a
	// one-rank server.
	Tree []int
	// Root[m] is the part's server-local root on server m, as a rank.
	Root []int
}

// Split divides count elements among the parts as contiguous ranges
// [start, end) in part order that cover 0..count exactly.
func (p *ThreePhase) Split(count int) [][2]int {
	out := make([][2]int, len(p.Parts))
	acc, start := 0.0, 0
	for i, part := range p.Parts {
		acc += part.Share
		end := int(math.Round(float64(count) * acc))
		if i == len(p.Parts)-1 {
			end = count
		}
		end = min(max(end, start), count)
		out[i] = [2]int{start, end}
		start = end
	}
	return out
}

func (p *ThreePhase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "three-phase allreduce: %d servers, %d parts\n", len(p.Servers), len(p.Parts))
	for m, s := range p.Servers {
		fmt.Fprintf(&b, "server %d ranks %v: %d local trees, rate %.6g\n", m, s, len(p.Local[m].Trees), p.Local[m].Rate)
	}
	for i, part := range p.Parts {
		fmt.Fprintf(&b, "  part %d share %.6f trees %v roots %v\n", i, part.Share, part.Tree, part.Root)
	}
	return b.String()
}

// PlanAllReduce returns the allreduce plan for ranks placed on devices
// ranks of t (rank r on device ranks[r]), grouped by host into servers.
// Each server's local plan is OneHop when its ranks all hang off one
// NVSwitch (DGX-2, HGX H200); else AllReduce over the direct NVLinks
// between them; else, when NVLink does not join them all, AllReduce over
// direct links and relayed routes of every class but the network. Roots
// are spread over each tree's centre (AllReduce with root -1).
func PlanAllReduce(t *topo.Topology, ranks []int, o Options) (*ThreePhase, error) {
	if len(ranks) == 0 {
		return nil, errors.New("pack: PlanAllReduce of no ranks")
	}
	p := &ThreePhase{}
	var hosts []string
	for r, d := range ranks {
		if d < 0 || d >= len(t.Devices) {
			return nil, fmt.Errorf("pack: rank %d on device %d outside [0,%d)", r, d, len(t.Devices))
		}
		h := t.Devices[d].Host
		m := slices.Index(hosts, h)
		if m < 0 {
			m = len(hosts)
			hosts = append(hosts, h)
			p.Servers = append(p.Servers, nil)
		}
		p.Servers[m] = append(p.Servers[m], r)
	}
	for m, s := range p.Servers {
		devs := make([]int, len(s))
		for k, r := range s {
			devs[k] = ranks[r]
		}
		local, err := localAllReduce(t, devs, o)
		if err != nil {
			return nil, fmt.Errorf("pack: server %s: %w", hosts[m], err)
		}
		p.Local = append(p.Local, local)
	}
	p.refine()
	return p, nil
}

// localAllReduce plans an allreduce among devices of one host.
func localAllReduce(t *topo.Topology, devs []int, o Options) (*Plan, error) {
	if len(devs) == 1 {
		return &Plan{Op: OpAllReduce, N: 1, Root: -1, Rate: math.Inf(1), Optimum: math.Inf(1)}, nil
	}
	if sw, bw := commonSwitch(t, devs); sw >= 0 {
		return OneHop(len(devs), bw), nil
	}
	g, err := FromTopology(t, devs, Select{Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		return nil, err
	}
	plan, err := AllReduce(g, -1, o)
	if !errors.Is(err, ErrDisconnected) {
		return plan, err
	}
	classes := []topo.Class{topo.NVLink, topo.PCIe, topo.XBus, topo.SHM}
	if g, err = FromTopology(t, devs, Select{Classes: classes, Routes: Direct | Relayed}); err != nil {
		return nil, err
	}
	return AllReduce(g, -1, o)
}

// commonSwitch returns the NVSwitch that every device has NVLinks to and
// from, with no direct NVLink between the devices, and the smallest
// per-direction NVLink capacity of a device to it; -1 if there is none.
func commonSwitch(t *topo.Topology, devs []int) (int, float64) {
	for _, sw := range t.OfKind(topo.NVSwitch) {
		bw := math.Inf(1)
		for _, d := range devs {
			bw = min(bw, t.Capacity(d, sw, topo.NVLink), t.Capacity(sw, d, topo.NVLink))
		}
		if bw <= 0 {
			continue
		}
		direct := false
		for _, a := range devs {
			for _, b := range devs {
				if a != b && t.Lanes(a, b, topo.NVLink) > 0 {
					direct = true
				}
			}
		}
		if !direct {
			return sw, bw
		}
	}
	return -1, 0
}

// refine cuts the data into the common refinement of the servers' tree
// shares.
func (p *ThreePhase) refine() {
	var cuts []float64
	for _, l := range p.Local {
		acc := 0.0
		for _, s := range l.Shares() {
			acc += s
			cuts = append(cuts, acc)
		}
	}
	cuts = append(cuts, 1)
	slices.Sort(cuts)
	prev := 0.0
	for _, c := range cuts {
		c = min(c, 1)
		if c-prev <= 1e-9 {
			continue
		}
		mid := (prev + c) / 2
		part := Part{Share: c - prev}
		for m, l := range p.Local {
			tree, root := -1, p.Servers[m][0]
			acc := 0.0
			for i, s := range l.Shares() {
				acc += s
				if mid < acc || i == len(l.Trees)-1 {
					tree, root = i, p.Servers[m][l.Trees[i].Root]
					break
				}
			}
			part.Tree = append(part.Tree, tree)
			part.Root = append(part.Root, root)
		}
		p.Parts = append(p.Parts, part)
		prev = c
	}
	// Shares sum to 1 up to rounding; make the last part absorb it.
	if n := len(p.Parts); n > 0 {
		p.Parts[n-1].Share += 1 - prev
	}
}
