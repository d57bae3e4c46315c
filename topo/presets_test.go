package topo_test

import (
	"strings"
	"testing"

	"github.com/braid-ccl/braid/topo"
)

// nvsmiDGX1V is the GPU block of nvidia-smi topo -m on a DGX-1 V100 (and
// an AWS p3.16xlarge), the source of the NVLink counts of Blink's Figure 1.
const nvsmiDGX1V = `
GPU0	 X 	NV1	NV1	NV2	NV2	SYS	SYS	SYS
GPU1	NV1	 X 	NV2	NV1	SYS	NV2	SYS	SYS
GPU2	NV1	NV2	 X 	NV2	SYS	SYS	NV1	SYS
GPU3	NV2	NV1	NV2	 X 	SYS	SYS	SYS	NV1
GPU4	NV2	SYS	SYS	SYS	 X 	NV1	NV1	NV2
GPU5	SYS	NV2	SYS	SYS	NV1	 X 	NV2	NV1
GPU6	SYS	SYS	NV1	SYS	NV1	NV2	 X 	NV2
GPU7	SYS	SYS	SYS	NV1	NV2	NV1	NV2	 X 
`

// TestDGX1 checks the hybrid cube-mesh of both DGX-1 models against the
// nvidia-smi matrix: the P100 has one NVLink wherever the V100 has one or
// two, four per GPU against six.
func TestDGX1(t *testing.T) {
	v, p := topo.DGX1V100(), topo.DGX1P100()
	rows := strings.Split(strings.TrimSpace(nvsmiDGX1V), "\n")
	for _, tp := range []*topo.Topology{v, p} {
		if err := tp.Validate(); err != nil {
			t.Fatal(err)
		}
		gpus := tp.GPUs()
		if len(gpus) != 8 {
			t.Fatalf("%s: %d GPUs", tp.Name, len(gpus))
		}
		for i, a := range gpus {
			cells := strings.Fields(rows[i])[1:]
			total := 0
			for j, b := range gpus {
				want := strings.TrimSpace(cells[j])
				if tp == p && strings.HasPrefix(want, "NV") {
					want = "NV1"
				}
				if got := tp.PathLabel(a, b); got != want {
					t.Errorf("%s: GPU%d-GPU%d is %s, nvidia-smi says %s", tp.Name, i, j, got, want)
				}
				if tp.Lanes(a, b, topo.NVLink) != tp.Lanes(b, a, topo.NVLink) {
					t.Errorf("%s: GPU%d-GPU%d NVLinks are not symmetric", tp.Name, i, j)
				}
				total += tp.Lanes(a, b, topo.NVLink)
			}
			want := 6
			if tp == p {
				want = 4
			}
			if total != want {
				t.Errorf("%s: GPU%d has %d NVLinks, want %d", tp.Name, i, total, want)
			}
			if d := tp.Devices[a]; d.NUMA != i/4 || tp.CPUOf(a) != tp.NUMANode(d.Host, i/4) {
				t.Errorf("%s: GPU%d on NUMA node %d", tp.Name, i, d.NUMA)
			}
		}
		// NVLink 2 is 25 GB/s per lane and direction, NVLink 1 20 GB/s.
		bw := map[*topo.Topology]float64{v: 50, p: 20}[tp]
		if c := tp.Capacity(gpus[0], gpus[3], topo.NVLink); c != bw {
			t.Errorf("%s: GPU0->GPU3 NVLink capacity %g, want %g", tp.Name, c, bw)
		}
		if n := len(tp.OfKind(topo.PCIeSwitch)); n != 4 {
			t.Errorf("%s: %d PCIe switches", tp.Name, n)
		}
	}
}

// TestSwitched checks the NVSwitch nodes: every GPU reaches every other
// through the switch at its full NVLink width.
func TestSwitched(t *testing.T) {
	for _, tc := range []struct {
		t     *topo.Topology
		gpus  int
		lanes int
		label string
	}{
		{topo.DGX2(), 16, 6, "NV6"},
		{topo.HGXH200(), 8, 18, "NV18"},
	} {
		if err := tc.t.Validate(); err != nil {
			t.Fatal(err)
		}
		gpus := tc.t.GPUs()
		sw := tc.t.OfKind(topo.NVSwitch)
		if len(gpus) != tc.gpus || len(sw) != 1 {
			t.Fatalf("%s: %d GPUs, %d NVSwitches", tc.t.Name, len(gpus), len(sw))
		}
		for _, g := range gpus {
			if n := tc.t.Lanes(g, sw[0], topo.NVLink); n != tc.lanes {
				t.Errorf("%s: %s has %d lanes to the switch", tc.t.Name, tc.t.Devices[g].ID, n)
			}
		}
		if l := tc.t.PathLabel(gpus[0], gpus[len(gpus)-1]); l != tc.label {
			t.Errorf("%s: path label %s, want %s", tc.t.Name, l, tc.label)
		}
	}
}

// TestMistCedarNodes checks Mist and Cedar against Temuçin's thesis
// (Queen's University 2021) §4.4.1: Mist's GPU pairs of a socket share
// three NVLinks and each GPU has three to its CPU, the sockets share the
// X-Bus; Cedar's four GPUs are fully connected by two NVLinks a pair and
// reach their CPU over PCIe.
func TestMistCedarNodes(t *testing.T) {
	m := topo.Mist()
	g := m.GPUs()
	if m.Lanes(g[0], g[1], topo.NVLink) != 3 || m.Lanes(g[2], g[3], topo.NVLink) != 3 || m.Lanes(g[0], g[2], topo.NVLink) != 0 {
		t.Error("Mist: wrong GPU NVLinks")
	}
	for i, x := range g {
		if m.Lanes(x, m.CPUOf(x), topo.NVLink) != 3 || m.Devices[x].NUMA != i/2 {
			t.Errorf("Mist: GPU%d to its CPU", i)
		}
	}
	if m.PathLabel(g[0], g[2]) != "SYS" || m.Capacity(m.NUMANode("mist", 0), m.NUMANode("mist", 1), topo.XBus) != 64 {
		t.Error("Mist: sockets")
	}
	c := topo.Cedar()
	g = c.GPUs()
	for _, x := range g {
		for _, y := range g {
			if x != y && c.Lanes(x, y, topo.NVLink) != 2 {
				t.Errorf("Cedar: %s-%s", c.Devices[x].ID, c.Devices[y].ID)
			}
		}
		if path := c.Route(x, c.CPUOf(x), func(l topo.Link) bool { return l.Class == topo.PCIe }, nil); len(path) != 2 {
			t.Errorf("Cedar: %s reaches its CPU by %v", c.Devices[x].ID, path)
		}
	}
}

// TestCluster checks clusters of presets on a switched network.
func TestCluster(t *testing.T) {
	c, err := topo.Cluster("dgx1-v100", 3, 25)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if hs := c.Hosts(); len(hs) != 3 || hs[2] != "node2" {
		t.Errorf("hosts %v", hs)
	}
	gpus := c.GPUs()
	if len(gpus) != 24 || c.Devices[gpus[8]].ID != "node1/gpu0" {
		t.Fatalf("%d GPUs, the ninth %q", len(gpus), c.Devices[gpus[8]].ID)
	}
	net := c.Find("net0")
	nics := c.OfKind(topo.NIC)
	if net < 0 || len(nics) != 12 {
		t.Fatalf("net0 at %d, %d NICs", net, len(nics))
	}
	for _, n := range nics {
		if c.Capacity(n, net, topo.Network) != 25 || c.Capacity(net, n, topo.Network) != 25 {
			t.Errorf("%s: network link", c.Devices[n].ID)
		}
	}
	if l := c.PathLabel(gpus[0], gpus[8]); l != "NET" {
		t.Errorf("path across hosts %s", l)
	}
	p, err := topo.Preset("2xhgx-h200")
	if err != nil || len(p.GPUs()) != 16 {
		t.Fatalf("2xhgx-h200: %v", err)
	}
	if n := p.Capacity(p.Find("node0/nic0"), p.Find("net0")); n != 50 {
		t.Errorf("H200 NIC rate %g, want 50 GB/s", n)
	}
	for _, bad := range []string{"dgx3", "0xdgx2", "xdgx2", "2xnothing"} {
		if _, err := topo.Preset(bad); err == nil {
			t.Errorf("Preset(%q) accepted", bad)
		}
	}
	for _, name := range topo.Presets() {
		if p, err := topo.Preset(name); err != nil || p.Validate() != nil {
			t.Errorf("Preset(%q): %v", name, err)
		}
	}
	if _, err := topo.Join("x", []*topo.Topology{topo.Mist(), topo.Mist()}, 10); err == nil {
		t.Error("Join accepted one host twice")
	}
	if _, err := topo.Join("x", []*topo.Topology{topo.Mist()}, 0); err == nil {
		t.Error("Join accepted a zero NIC rate")
	}
}

// TestClusterTooLarge: a cluster preset beyond MaxClusterNodes is an error
// at once, not an allocation that exhausts the memory (BRAID_TOPO=
// 100000000xdgx1-v100, a few digits too many, used to try).
func TestClusterTooLarge(t *testing.T) {
	for _, spec := range []string{"100000000xdgx1-v100", "4097xdgx1-v100", "0xdgx1-v100", "-3xdgx1-v100"} {
		if _, err := topo.Preset(spec); err == nil || !strings.Contains(err.Error(), "want 1 to 4096") {
			t.Errorf("Preset(%q): %v; want an error giving the bounds", spec, err)
		}
	}
}
