package topo_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/topo"
)

// TestDiscoverSysfs reads a copy of a two-socket machine's sysfs
// (testdata/sysfs-2node: NUMA nodes 0 and 1 with CPUs, node 2 with memory
// only, an InfiniBand NIC on node 1 at 100 Gb/s, an Ethernet NIC of
// unknown node and speed, and lo).
func TestDiscoverSysfs(t *testing.T) {
	tp, err := topo.Discover(topo.DiscoverOptions{Root: "testdata/sysfs-2node", Host: "testhost"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range tp.Devices {
		ids = append(ids, d.ID)
		if d.Host != "testhost" {
			t.Errorf("%s on host %q", d.ID, d.Host)
		}
	}
	if !slices.Equal(ids, []string{"cpu0", "cpu1", "cpu2", "eth0", "ib0"}) {
		t.Fatalf("devices %v", ids)
	}
	if d := tp.Devices[0]; d.Kind != topo.CPU || d.CPUs != "0-3,8-11" || d.NUMA != 0 {
		t.Errorf("cpu0: %+v", d)
	}
	def := cost.Default()
	cpu0, cpu1, cpu2 := 0, 1, 2
	if c := tp.Capacity(cpu0, cpu0, topo.SHM); c != def.Links[cost.Intra].Beta/1e9 {
		t.Errorf("cpu0 shared memory %g GB/s", c)
	}
	for _, p := range [][2]int{{cpu0, cpu1}, {cpu0, cpu2}, {cpu1, cpu2}} {
		if c := tp.Capacity(p[0], p[1], topo.XBus); c != def.Links[cost.Cross].Beta/1e9 {
			t.Errorf("xbus %v: %g GB/s", p, c)
		}
	}
	ib := tp.Find("ib0")
	if d := tp.Devices[ib]; d.NUMA != 1 || d.BusID != "0000:3b:00.0" || tp.Capacity(ib, cpu1, topo.PCIe) != 12.5 {
		t.Errorf("ib0: %+v, %g GB/s to cpu1", d, tp.Capacity(ib, cpu1))
	}
	eth := tp.Find("eth0")
	if d := tp.Devices[eth]; d.NUMA != -1 || tp.Capacity(eth, cpu0) != def.Links[cost.Inter].Beta/1e9 {
		t.Errorf("eth0: %+v, %g GB/s to cpu0", d, tp.Capacity(eth, cpu0))
	}
	if topo.PCINode("testdata/sysfs-2node", "0000:3b:00.0") != 1 || topo.PCINode("testdata/sysfs-2node", "0000:99:00.0") != -1 {
		t.Error("PCINode")
	}
	if tp.NodeOfCPU("testhost", 13) != cpu1 || tp.NodeOfCPU("testhost", 99) != -1 {
		t.Error("NodeOfCPU")
	}
	if l := tp.Layout([]int{cpu1, cpu0, ib}); !slices.Equal(l.NUMA, []int{1, 0, 1}) {
		t.Errorf("layout %+v", l)
	}
}

// TestDiscoverFlat reads a sysfs with no NUMA directory: one node with the
// online CPUs.
func TestDiscoverFlat(t *testing.T) {
	tp, err := topo.Discover(topo.DiscoverOptions{Root: "testdata/sysfs-flat", Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tp.Devices) != 1 || tp.Devices[0].CPUs != "0-1" || len(tp.Links) != 1 {
		t.Errorf("got %v", tp)
	}
	if _, err := topo.Discover(topo.DiscoverOptions{Root: t.TempDir(), Host: "h"}); err == nil {
		t.Error("Discover of an empty tree succeeded")
	}
}

// fakeGPUs is a GPUProbe that adds two NVLinked GPUs on NUMA node 0, as
// the NVML probe will.
func fakeGPUs(t *topo.Topology, host string) error {
	cpu := t.NUMANode(host, 0)
	if cpu < 0 {
		return errors.New("no NUMA node 0")
	}
	var gpus []int
	for i := range 2 {
		g, err := t.AddDevice(topo.Device{ID: fmt.Sprintf("gpu%d", i), Kind: topo.GPU, Host: host, Index: i, NUMA: 0, BusID: fmt.Sprintf("0000:%02x:00.0", i+1)})
		if err != nil {
			return err
		}
		if err := t.AddDuplex(g, cpu, topo.PCIe, 1, 15.75, 1); err != nil {
			return err
		}
		gpus = append(gpus, g)
	}
	return t.AddDuplex(gpus[0], gpus[1], topo.NVLink, 4, 25, 1)
}

// TestDiscoverGPUProbe checks the NVML hook: what the probe adds is kept,
// ErrNoGPU means no GPUs, and other errors fail discovery.
func TestDiscoverGPUProbe(t *testing.T) {
	tp, err := topo.Discover(topo.DiscoverOptions{Root: "testdata/sysfs-2node", Host: "h", GPU: fakeGPUs})
	if err != nil {
		t.Fatal(err)
	}
	g := tp.GPUs()
	if len(g) != 2 || tp.Lanes(g[0], g[1], topo.NVLink) != 4 || tp.PathLabel(g[0], g[1]) != "NV4" {
		t.Errorf("GPUs %v:\n%v", g, tp)
	}
	noGPU := func(*topo.Topology, string) error { return fmt.Errorf("nvml: %w", topo.ErrNoGPU) }
	if tp, err := topo.Discover(topo.DiscoverOptions{Root: "testdata/sysfs-2node", Host: "h", GPU: noGPU}); err != nil || len(tp.GPUs()) != 0 {
		t.Errorf("ErrNoGPU: %v", err)
	}
	broken := func(*topo.Topology, string) error { return errors.New("nvml: driver too old") }
	if _, err := topo.Discover(topo.DiscoverOptions{Root: "testdata/sysfs-2node", Host: "h", GPU: broken}); err == nil {
		t.Error("a failing probe did not fail discovery")
	}
	bad := func(t *topo.Topology, host string) error {
		t.Devices = append(t.Devices, topo.Device{ID: "cpu0", Kind: topo.GPU})
		return nil
	}
	if _, err := topo.Discover(topo.DiscoverOptions{Root: "testdata/sysfs-2node", Host: "h", GPU: bad}); !errors.Is(err, topo.ErrDuplicate) {
		t.Errorf("a probe that breaks the topology: %v", err)
	}
}

// TestDiscoverHere runs discovery on this machine.
func TestDiscoverHere(t *testing.T) {
	tp, err := topo.Discover(topo.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	cpus := tp.OfKind(topo.CPU)
	if len(cpus) == 0 || tp.Devices[cpus[0]].Host != host {
		t.Fatalf("no CPU device of host %q:\n%v", host, tp)
	}
	list, err := topo.ParseCPUList(tp.Devices[cpus[0]].CPUs)
	if err != nil || len(list) == 0 {
		t.Errorf("cpu list %q: %v", tp.Devices[cpus[0]].CPUs, err)
	}
	t.Logf("\n%v", tp)
}

// TestParseCPUList checks the sysfs CPU list syntax.
func TestParseCPUList(t *testing.T) {
	got, err := topo.ParseCPUList("0-2,8,10-11\n")
	if err != nil || !slices.Equal(got, []int{0, 1, 2, 8, 10, 11}) {
		t.Errorf("got %v, %v", got, err)
	}
	if got, err := topo.ParseCPUList(""); err != nil || got != nil {
		t.Errorf("empty list: %v, %v", got, err)
	}
	for _, bad := range []string{"a", "3-1", "1-", "-1", "1,,2", "0-99999999"} {
		if _, err := topo.ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) accepted", bad)
		}
	}
}
