package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/braid-ccl/braid/topo"
)

// FromTopology returns the network of ranks placed on devices of a
// topology: rank r runs on device devs[r] of t (indices into t.Devices,
// distinct). It is built from the part of t the allocation can use
// (topo.Topology.Sub): the rank's devices are the rank nodes, named "rR
// ID" after the device; every other device that lies between two of them
// (PCIe and NVLink switches, CPUs, NICs, network switches; never another
// GPU) is a transit node named by its ID.
//
// Each ordered pair of devices joined by links becomes one link of the
// network, named "FROM->TO", whose bandwidth is the sum of their
// capacities (topo's lanes × GB/s per lane, in bytes per second) and whose
// latency is that of the widest of them (µs, in seconds); shared-memory
// links of a device to itself are left out. The route between two ranks
// is the one topo's Router gives over every link: the widest path, then
// the fewest hops, through devices that are not GPUs, which is how pack
// sees the machine too. Pairs with no such path get no route, and a
// schedule that makes them talk fails in Run with ErrNoRoute. The relayed
// route of a pair (SetRelayedRoute: the channels of tree edges marked
// relayed, Blink's PCIe trees) is the widest path through devices that are
// neither GPUs nor the direct link, the one package pack's relayed edges
// take (pack.FromTopology with pack.Relayed).
func FromTopology(t *topo.Topology, devs []int) (*Network, error) {
	if len(devs) == 0 {
		return nil, fmt.Errorf("sim: FromTopology: no ranks")
	}
	for r, d := range devs {
		if d < 0 || d >= len(t.Devices) {
			return nil, fmt.Errorf("sim: FromTopology: rank %d on device %d outside [0,%d)", r, d, len(t.Devices))
		}
		if q := slices.Index(devs[:r], d); q >= 0 {
			return nil, fmt.Errorf("sim: FromTopology: ranks %d and %d both on device %s", q, r, t.Devices[d].ID)
		}
	}
	sub, idx, err := t.Sub(devs)
	if err != nil {
		return nil, fmt.Errorf("sim: FromTopology: %w", err)
	}
	n := len(devs)
	net := NewNetwork(n)
	node := make([]int, len(sub.Devices)) // sub device -> network node
	for i := range node {
		node[i] = -1
	}
	for r, d := range devs {
		node[idx[d]] = r
		if err := net.SetNodeName(r, fmt.Sprintf("r%d %s", r, t.Devices[d].ID)); err != nil {
			return nil, err
		}
	}
	for i, d := range sub.Devices {
		if node[i] < 0 {
			node[i] = net.AddNode(d.ID)
		}
	}
	// One network link per ordered pair of devices, in order of first
	// appearance among the topology's links.
	type pair struct{ from, to int }
	link := map[pair]int{}
	var order []pair
	widest := map[pair]topo.Link{}
	capacity := map[pair]float64{}
	for _, l := range sub.Links {
		if l.From == l.To {
			continue
		}
		k := pair{l.From, l.To}
		if _, ok := capacity[k]; !ok {
			order = append(order, k)
		}
		capacity[k] += l.Capacity()
		if w, ok := widest[k]; !ok || l.Capacity() > w.Capacity() {
			widest[k] = l
		}
	}
	for _, k := range order {
		id, err := net.AddLink(Link{
			Name:      sub.Devices[k.from].ID + "->" + sub.Devices[k.to].ID,
			From:      node[k.from],
			To:        node[k.to],
			Bandwidth: capacity[k] * 1e9,
			Latency:   widest[k].Latency * 1e-6,
		})
		if err != nil {
			return nil, fmt.Errorf("sim: FromTopology: %w", err)
		}
		link[k] = id
	}
	router := sub.Router(nil)
	for a, da := range devs {
		from := router.From(idx[da], nil)
		for b, db := range devs {
			if a == b {
				continue
			}
			path := from.Route(idx[db])
			if path == nil {
				continue
			}
			ids := make([]int, len(path)-1)
			for k := 1; k < len(path); k++ {
				ids[k-1] = link[pair{path[k-1], path[k]}]
			}
			if err := net.SetRoute(a, b, ids); err != nil {
				return nil, fmt.Errorf("sim: FromTopology: %w", err)
			}
			if path = from.Relay(idx[db]); path == nil {
				continue
			}
			ids = make([]int, len(path)-1)
			for k := 1; k < len(path); k++ {
				ids[k-1] = link[pair{path[k-1], path[k]}]
			}
			if err := net.SetRelayedRoute(a, b, ids); err != nil {
				return nil, fmt.Errorf("sim: FromTopology: %w", err)
			}
		}
	}
	return net, nil
}

// RouteString returns the route from rank src to rank dst as the names of
// the nodes it crosses, "r0 gpu0 -> pcie0 -> r1 gpu1", or the error of
// Route.
func (n *Network) RouteString(src, dst int) (string, error) {
	ids, err := n.Route(src, dst, 0)
	if err != nil {
		return "", err
	}
	names := []string{n.Node(src).Name}
	for _, id := range ids {
		names = append(names, n.Node(n.Link(id).To).Name)
	}
	return strings.Join(names, " -> "), nil
}
