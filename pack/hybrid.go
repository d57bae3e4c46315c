package pack

import (
	"errors"
	"fmt"

	"github.com/braid-ccl/braid/topo"
)

// Hybrid is a broadcast over two sets of trees that run at the same time
// on disjoint links (Blink §3.4): one over the direct NVLinks between the
// ranks, one over the routes through switches and CPUs (PCIe on a DGX-1 or
// Cedar, the GPUs' NVLinks to the host on Mist). Either plan may be nil
// when its links do not reach every rank from the root.
type Hybrid struct {
	NVLink *Plan
	PCIe   *Plan
}

// PlanHybrid returns the two tree sets of a broadcast from rank root among
// the ranks placed on devices ranks of t: Broadcast on the direct NVLink
// graph, and Broadcast on the graph of relayed routes over every link
// class (FromTopology with Relayed). It fails only if neither set reaches
// every rank.
func PlanHybrid(t *topo.Topology, ranks []int, root int, o Options) (*Hybrid, error) {
	var h Hybrid
	for _, s := range []struct {
		sel  Select
		plan **Plan
	}{
		{Select{Classes: []topo.Class{topo.NVLink}, Routes: Direct}, &h.NVLink},
		{Select{Routes: Relayed}, &h.PCIe},
	} {
		g, err := FromTopology(t, ranks, s.sel)
		if err != nil {
			return nil, err
		}
		p, err := Broadcast(g, root, o)
		if errors.Is(err, ErrDisconnected) {
			continue
		}
		if err != nil {
			return nil, err
		}
		*s.plan = p
	}
	if h.NVLink == nil && h.PCIe == nil {
		return nil, fmt.Errorf("pack: hybrid broadcast from rank %d: %w", root, ErrDisconnected)
	}
	return &h, nil
}

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
