package sim_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
	"github.com/braid-ccl/braid/topo"
)

// gpus returns the device indices of GPU ordinals of t.
func gpus(t *topo.Topology, ords ...int) []int {
	all := t.GPUs()
	out := make([]int, len(ords))
	for i, o := range ords {
		out[i] = all[o]
	}
	return out
}

// TestFromTopologyRoutes checks the network of a DGX-1 V100 allocation:
// NVLinked pairs talk over their NVLinks (two lanes: 50 GB/s), the others
// through the PCIe switches and, across sockets, the QPI links, as
// topo's Router routes them.
func TestFromTopologyRoutes(t *testing.T) {
	tp := topo.DGX1V100()
	net, err := sim.FromTopology(tp, gpus(tp, 1, 4, 5, 6))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src, dst int
		want     string
		bw       float64 // the route's narrowest link, GB/s
		lat      float64 // µs
	}{
		{0, 2, "r0 gpu1 -> r2 gpu5", 50, 1},
		{2, 1, "r2 gpu5 -> r1 gpu4", 25, 1},
		{0, 3, "r0 gpu1 -> pcie0 -> cpu0 -> cpu1 -> pcie3 -> r3 gpu6", 15.75, 2.5},
		{1, 0, "r1 gpu4 -> pcie2 -> cpu1 -> cpu0 -> pcie0 -> r0 gpu1", 15.75, 2.5},
	} {
		got, err := net.RouteString(tc.src, tc.dst)
		if err != nil || got != tc.want {
			t.Errorf("route %d->%d = %q, %v; want %q", tc.src, tc.dst, got, err, tc.want)
			continue
		}
		ids, _ := net.Route(tc.src, tc.dst, 0)
		bw, lat := math.Inf(1), 0.0
		for _, id := range ids {
			l := net.Link(id)
			bw, lat = min(bw, l.Bandwidth), lat+l.Latency
		}
		if math.Abs(bw-tc.bw*1e9) > 1 || math.Abs(lat-tc.lat*1e-6) > 1e-12 {
			t.Errorf("route %d->%d: %g B/s, %g s; want %g GB/s, %g µs", tc.src, tc.dst, bw, lat, tc.bw, tc.lat)
		}
	}
	// Other GPUs are no part of the network: only the allocation's four,
	// its two CPUs and the three PCIe switches its GPUs hang off.
	if got := net.NumNodes(); got != 4+2+3 {
		for i := range net.NumNodes() {
			t.Log(net.Node(i).Name)
		}
		t.Errorf("%d nodes, want 9", got)
	}
}

// TestFromTopologyTimes runs one message over an NVLink pair and one over
// PCIe and checks α + M/β with the topology's figures.
func TestFromTopologyTimes(t *testing.T) {
	tp := topo.DGX1V100()
	net, err := sim.FromTopology(tp, gpus(tp, 0, 3, 5))
	if err != nil {
		t.Fatal(err)
	}
	const count = 1 << 20 // float32: 4 MiB
	for _, tc := range []struct {
		dst  int
		want float64
	}{
		{1, 1e-6 + 4*count/50e9},      // gpu0 -> gpu3: two NVLinks
		{2, 2.5e-6 + 4*count/15.75e9}, // gpu0 -> gpu5: PCIe and QPI
	} {
		progs := make([]sched.Program, 3)
		for r := range progs {
			progs[r].Rank = r
		}
		progs[0].Steps = []sched.Step{{Kind: sched.KindSend, Peer: tc.dst, Src: sched.Chunk{Buf: sched.In, Len: count}}}
		progs[tc.dst].Steps = []sched.Step{{Kind: sched.KindRecv, Peer: 0, Dst: sched.Chunk{Buf: sched.Out, Len: count}}}
		p := sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: count}
		res, err := sim.Run(context.Background(), p, progs, net, sim.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(res.Time-tc.want) > 1e-9*tc.want {
			t.Errorf("0->%d: %g s, want %g s", tc.dst, res.Time, tc.want)
		}
	}
}

// TestFromTopologyErrors checks bad allocations and a pair with no path.
func TestFromTopologyErrors(t *testing.T) {
	tp := topo.DGX1P100()
	g := tp.GPUs()
	for _, devs := range [][]int{nil, {g[0], g[0]}, {g[0], len(tp.Devices)}} {
		if _, err := sim.FromTopology(tp, devs); err == nil {
			t.Errorf("FromTopology(%v) succeeded", devs)
		}
	}
	// Two GPUs joined by nothing.
	var lone topo.Topology
	for _, id := range []string{"gpu0", "gpu1"} {
		if _, err := lone.AddDevice(topo.Device{ID: id, Kind: topo.GPU, Host: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	net, err := sim.FromTopology(&lone, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Route(0, 1, 0); !errors.Is(err, sim.ErrNoRoute) {
		t.Errorf("route between unconnected GPUs: %v", err)
	}
	if _, err := net.RouteString(0, 1); err == nil || !strings.Contains(err.Error(), "no route") {
		t.Errorf("RouteString: %v", err)
	}
}

// TestRelayedRoutesFollowPack checks that the simulator sends a relayed
// tree edge where the packer placed it: on every pair of GPUs of the
// DGX-1s (and of a few allocations), the relayed route of FromTopology
// crosses the same devices as the relayed edge of pack.FromTopology, and
// the channels below sched.RelayedChannel keep the direct route.
func TestRelayedRoutesFollowPack(t *testing.T) {
	for _, tp := range []*topo.Topology{topo.DGX1V100(), topo.DGX1P100()} {
		for _, ords := range [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 4}, {2, 3, 5, 6}, {1, 2, 3, 4, 6}} {
			devs := gpus(tp, ords...)
			net, err := sim.FromTopology(tp, devs)
			if err != nil {
				t.Fatal(err)
			}
			g, err := pack.FromTopology(tp, devs, pack.Select{Routes: pack.Relayed})
			if err != nil {
				t.Fatal(err)
			}
			if len(g.Edges) != len(devs)*(len(devs)-1) {
				t.Fatalf("%s %v: %d relayed edges, want one per ordered pair", tp.Name, ords, len(g.Edges))
			}
			for _, e := range g.Edges {
				want := []string{net.Node(e.From).Name}
				for _, d := range e.Path[1:] {
					want = append(want, tp.Devices[d].ID)
				}
				want[len(want)-1] = net.Node(e.To).Name
				ids, err := net.Route(e.From, e.To, sched.RelayedChannel+3)
				if err != nil {
					t.Fatal(err)
				}
				got := []string{net.Node(e.From).Name}
				for _, id := range ids {
					got = append(got, net.Node(net.Link(id).To).Name)
				}
				if strings.Join(got, " -> ") != strings.Join(want, " -> ") {
					t.Errorf("%s %v: relayed route %d->%d is %s, pack's edge crosses %s", tp.Name, ords, e.From, e.To, strings.Join(got, " -> "), strings.Join(want, " -> "))
				}
				direct, err := net.Route(e.From, e.To, 0)
				if err != nil {
					t.Fatal(err)
				}
				if tp.Lanes(devs[e.From], devs[e.To], topo.NVLink) > 0 && len(direct) != 1 {
					t.Errorf("%s %v: channel 0 of %d->%d takes %d links, want the NVLink", tp.Name, ords, e.From, e.To, len(direct))
				}
			}
		}
	}
}
