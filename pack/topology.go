package pack

import (
	"fmt"
	"slices"

	"github.com/braid-ccl/braid/topo"
)

// Routes says which paths between two ranks become edges.
type Routes uint8

const (
	// Direct makes an edge of the links that join two ranks directly.
	Direct Routes = 1 << iota
	// Relayed makes an edge of the widest route (topo.Route) between two
	// ranks through devices that are neither ranks nor GPUs (PCIe
	// switches, CPUs, NICs, NVSwitches, network switches), other than the
	// direct link; it consumes every link direction it crosses.
	Relayed
	// Fallback makes an edge of the widest route through other devices,
	// as Relayed does, but only between two ranks that no selected link
	// joins directly: the paths of GPUs' copies to each other, which take
	// the pair's NVLink where it has one, whatever a schedule would rather
	// have, and cross PCIe switches and CPUs where it has none.
	Fallback
)

// Select says which links and paths of a topology a graph may use.
type Select struct {
	// Classes lists the link classes data may take; nil means every class.
	Classes []topo.Class
	// Routes says which paths become edges; 0 means Direct.
	Routes Routes
}

func (s Select) allows(l topo.Link) bool {
	return l.From != l.To && (s.Classes == nil || slices.Contains(s.Classes, l.Class))
}

// FromTopology returns the graph of the ranks placed on devices ranks[0],
// ranks[1], ... of t (vertex r is rank r): each direction of each pair of
// devices joined by selected links is a resource, with the summed
// capacity of those links in GB/s (two NVLinks make one resource of twice
// the bandwidth). With Direct, a direct link between two ranks is an edge
// on its resource; with Relayed, the widest route between two ranks
// through non-rank devices is an edge on the resources it crosses. Edges
// in opposite directions between the same ranks, direct or relayed, are
// paired (Rev).
func FromTopology(t *topo.Topology, ranks []int, sel Select) (*Graph, error) {
	isRank := make(map[int]int, len(ranks))
	for r, d := range ranks {
		if d < 0 || d >= len(t.Devices) {
			return nil, fmt.Errorf("pack: rank %d on device %d outside [0,%d)", r, d, len(t.Devices))
		}
		if q, ok := isRank[d]; ok {
			return nil, fmt.Errorf("pack: ranks %d and %d both on device %s", q, r, t.Devices[d].ID)
		}
		isRank[d] = r
	}
	g := NewGraph(len(ranks))
	res := map[[2]int]int{}
	// resource returns the resource of the selected links u → v, or -1
	// if there are none.
	resource := func(u, v int) int {
		if r, ok := res[[2]int{u, v}]; ok {
			return r
		}
		c := 0.0
		for _, i := range t.Between(u, v) {
			if sel.allows(t.Links[i]) {
				c += t.Links[i].Capacity()
			}
		}
		r := -1
		if c > 0 {
			r = g.AddResource(c)
		}
		res[[2]int{u, v}] = r
		return r
	}
	via := func(i int) bool {
		_, rank := isRank[i]
		return !rank && t.Devices[i].Kind != topo.GPU
	}
	router := t.Router(sel.allows)
	routes := sel.Routes
	if routes == 0 {
		routes = Direct
	}
	n := len(ranks)
	direct, relay := make([]int, n*n), make([]int, n*n)
	for a, da := range ranks {
		for b, db := range ranks {
			direct[a*n+b], relay[a*n+b] = -1, -1
			if a == b {
				continue
			}
			if routes&Direct != 0 {
				if r := resource(da, db); r >= 0 {
					direct[a*n+b] = g.AddEdge(a, b, r)
					g.Edges[direct[a*n+b]].Path = []int{da, db}
				}
			}
			if routes&(Relayed|Fallback) == 0 || routes&Relayed == 0 && resource(da, db) >= 0 {
				continue
			}
			path := router.Relay(da, db, via)
			if path == nil {
				continue
			}
			use := make([]int, 0, len(path)-1)
			for k := 1; k < len(path); k++ {
				use = append(use, resource(path[k-1], path[k]))
			}
			relay[a*n+b] = g.AddEdge(a, b, use...)
			g.Edges[relay[a*n+b]].Path = path
		}
	}
	for a := range n {
		for b := a + 1; b < n; b++ {
			for _, m := range [][]int{direct, relay} {
				if m[a*n+b] >= 0 && m[b*n+a] >= 0 {
					g.Pair(m[a*n+b], m[b*n+a])
				}
			}
		}
	}
	return g, g.Validate()
}
