package topo_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/topo"
)

// TestBuild checks AddDevice, AddLink and the queries on a small graph.
func TestBuild(t *testing.T) {
	var tp topo.Topology
	a, err := tp.AddDevice(topo.Device{ID: "a", Kind: topo.GPU, Host: "h", NUMA: 0})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tp.AddDevice(topo.Device{ID: "b", Kind: topo.GPU, Host: "h", NUMA: 1})
	c, _ := tp.AddDevice(topo.Device{ID: "c", Kind: topo.CPU, Host: "h", Index: 1, NUMA: 1})
	if _, err := tp.AddDevice(topo.Device{ID: "a", Kind: topo.NIC}); !errors.Is(err, topo.ErrDuplicate) {
		t.Errorf("duplicate id: %v", err)
	}
	if _, err := tp.AddDevice(topo.Device{Kind: topo.NIC}); err == nil {
		t.Error("empty id accepted")
	}
	if err := tp.AddDuplex(a, b, topo.NVLink, 2, 25, 1); err != nil {
		t.Fatal(err)
	}
	if err := tp.AddLink(topo.Link{From: a, To: b, Class: topo.PCIe, Count: 1, Bandwidth: 16}); err != nil {
		t.Fatal(err)
	}
	if err := tp.AddDuplex(c, c, topo.SHM, 1, 100, 0.1); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []topo.Link{
		{From: a, To: 9, Count: 1, Bandwidth: 1},
		{From: a, To: b, Count: 0, Bandwidth: 1},
		{From: a, To: b, Count: 1, Bandwidth: 0},
		{From: a, To: b, Count: 1, Bandwidth: 1, Latency: -1},
		{From: a, To: a, Class: topo.NVLink, Count: 1, Bandwidth: 1},
		{From: a, To: b, Class: 99, Count: 1, Bandwidth: 1},
	} {
		if err := tp.AddLink(bad); err == nil {
			t.Errorf("bad link %+v accepted", bad)
		}
	}
	if err := tp.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := tp.Between(a, b); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("Between(a, b) = %v", got)
	}
	if got := tp.Capacity(a, b); got != 66 {
		t.Errorf("Capacity = %g, want 66", got)
	}
	if got := tp.Capacity(a, b, topo.NVLink); got != 50 {
		t.Errorf("NVLink capacity = %g, want 50", got)
	}
	if got := tp.Lanes(b, a, topo.NVLink); got != 2 {
		t.Errorf("Lanes = %d", got)
	}
	if got := tp.GPUs(); !slices.Equal(got, []int{a, b}) {
		t.Errorf("GPUs() = %v", got)
	}
	if tp.CPUOf(b) != c || tp.CPUOf(a) != -1 || tp.CPUOf(c) != c {
		t.Errorf("CPUOf: %d %d %d", tp.CPUOf(b), tp.CPUOf(a), tp.CPUOf(c))
	}
	if got := tp.Out(c); len(got) != 1 {
		t.Errorf("Out(c) = %v: a duplex self link is one link", got)
	}
	l := tp.Links[0]
	if cl := l.Cost(); cl.Beta != 50e9 || cl.Alpha != 1e-6 {
		t.Errorf("Cost() = %+v", cl)
	}
	if topo.Network.Cost() != cost.Inter || topo.XBus.Cost() != cost.Cross || topo.NVLink.Cost() != cost.Intra {
		t.Error("class to cost class")
	}
	clone := tp.Clone()
	clone.Devices[0].ID = "z"
	if tp.Devices[0].ID != "a" {
		t.Error("Clone shares devices")
	}
	tp.Devices = append(tp.Devices, topo.Device{ID: "b", Kind: topo.NIC})
	if err := tp.Validate(); !errors.Is(err, topo.ErrDuplicate) {
		t.Errorf("Validate with a duplicate: %v", err)
	}
}

// TestNames checks that kind and class names parse back.
func TestNames(t *testing.T) {
	for k := topo.GPU; k <= topo.NetSwitch; k++ {
		if got, err := topo.ParseKind(k.String()); err != nil || got != k {
			t.Errorf("kind %v: %v %v", k, got, err)
		}
	}
	for c := topo.NVLink; c <= topo.Network; c++ {
		if got, err := topo.ParseClass(c.String()); err != nil || got != c {
			t.Errorf("class %v: %v %v", c, got, err)
		}
	}
	if _, err := topo.ParseKind("tpu"); err == nil {
		t.Error("ParseKind(tpu) accepted")
	}
	if _, err := topo.ParseClass("infinity"); err == nil {
		t.Error("ParseClass(infinity) accepted")
	}
}

// TestSub checks induced sub-topologies: the relays kept are those on
// paths between allocated devices.
func TestSub(t *testing.T) {
	tp := topo.DGX1V100()
	g := tp.GPUs()
	// GPUs 0 and 1 share PCIe switch 0: it is kept, the CPUs are not on
	// any simple path between them, and the other GPUs are dropped.
	s, idx, err := tp.Sub([]int{g[0], g[1]})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range s.Devices {
		ids = append(ids, d.ID)
	}
	if !slices.Equal(ids, []string{"gpu0", "gpu1", "pcie0"}) {
		t.Errorf("Sub(gpu0, gpu1) keeps %v", ids)
	}
	if idx[g[2]] != -1 || s.Lanes(idx[g[0]], idx[g[1]], topo.NVLink) != 1 {
		t.Errorf("index map %v", idx)
	}
	// GPUs 1 and 4 meet only across the sockets.
	s, _, err = tp.Sub([]int{g[1], g[4]})
	if err != nil {
		t.Fatal(err)
	}
	ids = ids[:0]
	for _, d := range s.Devices {
		ids = append(ids, d.ID)
	}
	if !slices.Equal(ids, []string{"cpu0", "cpu1", "gpu1", "gpu4", "pcie0", "pcie2"}) {
		t.Errorf("Sub(gpu1, gpu4) keeps %v", ids)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	// Across hosts, the other hosts' devices are dropped.
	c, err := topo.Cluster("dgx1-p100", 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	cg := c.GPUs()
	s, _, err = c.Sub([]int{cg[0], cg[8]})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Devices {
		if d.Host == "node2" {
			t.Errorf("Sub keeps %s", d.ID)
		}
	}
	if s.Find("net0") < 0 || s.PathLabel(s.Find("node0/gpu0"), s.Find("node1/gpu0")) != "NET" {
		t.Error("Sub loses the network path")
	}
	if _, _, err := tp.Sub([]int{g[0], g[0]}); err == nil {
		t.Error("Sub accepted a device twice")
	}
	if _, _, err := tp.Sub([]int{-1}); err == nil {
		t.Error("Sub accepted a bad index")
	}
}

// TestRoute checks widest-then-shortest routing.
func TestRoute(t *testing.T) {
	var tp topo.Topology
	add := func(id string, k topo.Kind) int {
		i, err := tp.AddDevice(topo.Device{ID: id, Kind: k, NUMA: -1})
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	a, b := add("a", topo.GPU), add("b", topo.GPU)
	s1, s2, s3 := add("s1", topo.PCIeSwitch), add("s2", topo.PCIeSwitch), add("s3", topo.PCIeSwitch)
	g := add("g", topo.GPU)
	for _, l := range [][3]float64{{float64(a), float64(s1), 10}, {float64(s1), float64(b), 10},
		{float64(a), float64(s2), 20}, {float64(s2), float64(s3), 20}, {float64(s3), float64(b), 20},
		{float64(a), float64(g), 99}, {float64(g), float64(b), 99}} {
		if err := tp.AddDuplex(int(l[0]), int(l[1]), topo.PCIe, 1, l[2], 0); err != nil {
			t.Fatal(err)
		}
	}
	// The widest route through non-GPUs is via s2 and s3, not the
	// shorter s1 nor the wider route through GPU g.
	if got := tp.Route(a, b, nil, nil); !slices.Equal(got, []int{a, s2, s3, b}) {
		t.Errorf("Route = %v", got)
	}
	if got := tp.Route(a, b, func(l topo.Link) bool { return l.Bandwidth < 15 }, nil); !slices.Equal(got, []int{a, s1, b}) {
		t.Errorf("Route over narrow links = %v", got)
	}
	if got := tp.Route(a, b, nil, func(int) bool { return true }); !slices.Equal(got, []int{a, g, b}) {
		t.Errorf("Route through anything = %v", got)
	}
	if err := tp.AddDuplex(a, b, topo.NVLink, 1, 5, 0); err != nil {
		t.Fatal(err)
	}
	r := tp.Router(nil)
	if got := r.Route(a, b, nil); !slices.Equal(got, []int{a, s2, s3, b}) {
		t.Errorf("Route with a narrow direct link = %v", got)
	}
	r = tp.Router(func(l topo.Link) bool { return l.Class == topo.NVLink || l.Bandwidth == 10 })
	if got := r.Route(a, b, nil); !slices.Equal(got, []int{a, s1, b}) {
		t.Errorf("Route = %v", got)
	}
	if got := r.Relay(a, b, func(i int) bool { return false }); got != nil {
		t.Errorf("Relay through nothing = %v", got)
	}
	if got := tp.Route(a, a, nil, nil); !slices.Equal(got, []int{a}) {
		t.Errorf("Route to itself = %v", got)
	}
}

// TestLayout checks the sched.Layout of ranks placed on devices.
func TestLayout(t *testing.T) {
	c, err := topo.Cluster("dgx1-v100", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := c.GPUs()
	l := c.Layout([]int{g[9], g[4], g[0], g[15]})
	if !slices.Equal(l.Host, []int{0, 1, 1, 0}) || !slices.Equal(l.NUMA, []int{0, 1, 0, 1}) {
		t.Errorf("layout %+v", l)
	}
	if err := l.Check(4); err != nil {
		t.Error(err)
	}
	if cost.ClassOf(l, 0, 3) != cost.Cross || cost.ClassOf(l, 0, 1) != cost.Inter {
		t.Error("layout classes")
	}
}
