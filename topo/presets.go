package topo

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Nominal figures of the presets, per lane and direction (GB/s) and per hop
// (µs). Bandwidths are the interfaces' signalling rates; latencies are
// round hardware figures, not measurements: a topology file with measured
// values replaces them (braid topo --dump, then edit).
const (
	nvlink1GBps = 20    // NVLink 1 (P100), per link
	nvlink2GBps = 25    // NVLink 2 (V100), per link
	nvlink4GBps = 25    // NVLink 4 (H100, H200), per link
	pcie3GBps   = 15.75 // PCIe 3.0 x16
	pcie4GBps   = 31.5  // PCIe 4.0 x16
	pcie5GBps   = 63    // PCIe 5.0 x16
	qpi96GBps   = 19.2  // one QPI or UPI link at 9.6 GT/s
	upi104GBps  = 20.8  // one UPI link at 10.4 GT/s
	upi16GBps   = 32    // one UPI link at 16 GT/s
	xbusGBps    = 64    // POWER9 X-Bus between the sockets of an AC922 (Temuçin, MASc thesis, Queen's University 2021, §4.4)
	edrGBps     = 12.5  // InfiniBand EDR or Omni-Path, 100 Gb/s
	ndrGBps     = 50    // InfiniBand NDR, 400 Gb/s

	nvlinkUs = 1.0
	pcieUs   = 0.5
	xbusUs   = 0.5
	shmUs    = 0.2
	netUs    = 1.0
)

// builder adds the devices and links of a preset; presets are fixed data,
// so an error is a bug and panics (the preset tests build every one).
type builder struct{ t *Topology }

func (b builder) dev(d Device) int {
	i, err := b.t.AddDevice(d)
	if err != nil {
		panic(err)
	}
	return i
}

func (b builder) duplex(x, y int, c Class, count int, bw, lat float64) {
	if err := b.t.AddDuplex(x, y, c, count, bw, lat); err != nil {
		panic(err)
	}
}

func (b builder) cpu(host string, node int, cpus string, memGBps float64) int {
	i := b.dev(Device{ID: fmt.Sprintf("cpu%d", node), Kind: CPU, Host: host, Index: node, NUMA: node, CPUs: cpus})
	b.duplex(i, i, SHM, 1, memGBps, shmUs)
	return i
}

func (b builder) gpu(host string, index, numa int, model string) int {
	return b.dev(Device{ID: fmt.Sprintf("gpu%d", index), Kind: GPU, Host: host, Index: index, NUMA: numa, Model: model})
}

func (b builder) other(host string, k Kind, prefix string, index, numa int) int {
	return b.dev(Device{ID: fmt.Sprintf("%s%d", prefix, index), Kind: k, Host: host, Index: index, NUMA: numa})
}

// dgx1 builds a DGX-1: two Broadwell sockets joined by two QPI links, four
// PCIe switches (two per socket) with two GPUs and one EDR InfiniBand NIC
// each (GPUs 2k and 2k+1 and NIC k on switch k, as nvidia-smi topo -m shows
// on the machine), and the hybrid cube-mesh of NVLinks of Figure 1 of Blink
// (MLSys 2020): GPUs 0-3 and 4-7 each fully connected, plus the links 0-4,
// 1-5, 2-6 and 3-7. On the V100 model every GPU has six NVLinks, so the
// pairs 0-3, 0-4, 1-2, 1-5, 2-3, 4-7, 5-6 and 6-7 have two.
func dgx1(name, host, model string, nvGBps float64, doubled bool) *Topology {
	t := &Topology{Name: name}
	b := builder{t}
	cpus := []int{
		b.cpu(host, 0, "0-19,40-59", 76.8),
		b.cpu(host, 1, "20-39,60-79", 76.8),
	}
	b.duplex(cpus[0], cpus[1], XBus, 2, qpi96GBps, xbusUs)
	gpus := make([]int, 8)
	for g := range gpus {
		gpus[g] = b.gpu(host, g, g/4, model)
	}
	for s := range 4 {
		sw := b.other(host, PCIeSwitch, "pcie", s, s/2)
		b.duplex(sw, cpus[s/2], PCIe, 1, pcie3GBps, pcieUs)
		b.duplex(gpus[2*s], sw, PCIe, 1, pcie3GBps, pcieUs)
		b.duplex(gpus[2*s+1], sw, PCIe, 1, pcie3GBps, pcieUs)
		nic := b.other(host, NIC, "nic", s, s/2)
		b.duplex(nic, sw, PCIe, 1, pcie3GBps, pcieUs)
	}
	for _, p := range dgx1Pairs {
		n := 1
		if doubled && p[2] == 2 {
			n = 2
		}
		b.duplex(gpus[p[0]], gpus[p[1]], NVLink, n, nvGBps, nvlinkUs)
	}
	return t
}

// dgx1Pairs lists the NVLinked GPU pairs of a DGX-1 and their link count
// on the V100 model (one on the P100 model).
var dgx1Pairs = [][3]int{
	{0, 1, 1}, {0, 2, 1}, {0, 3, 2}, {0, 4, 2},
	{1, 2, 2}, {1, 3, 1}, {1, 5, 2},
	{2, 3, 2}, {2, 6, 1},
	{3, 7, 1},
	{4, 5, 1}, {4, 6, 1}, {4, 7, 2},
	{5, 6, 2}, {5, 7, 1},
	{6, 7, 2},
}

// DGX1P100 returns the DGX-1 with eight P100 GPUs: four NVLink 1 links per
// GPU, one per NVLinked pair (20 GB/s per direction).
func DGX1P100() *Topology {
	return dgx1("dgx1-p100", "dgx1p", "Tesla P100-SXM2-16GB", nvlink1GBps, false)
}

// DGX1V100 returns the DGX-1 with eight V100 GPUs: six NVLink 2 links per
// GPU (25 GB/s per direction each), two between the pairs 0-3, 0-4, 1-2,
// 1-5, 2-3, 4-7, 5-6 and 6-7 (nvidia-smi topo -m on a DGX-1V or an AWS
// p3.16xlarge shows NV2 there).
func DGX1V100() *Topology {
	return dgx1("dgx1-v100", "dgx1v", "Tesla V100-SXM2-16GB", nvlink2GBps, true)
}

// switchedNode describes a node whose GPUs all hang off one NVSwitch
// fabric (modelled as one switch device: the fabric is non-blocking), with
// pcieSwitches PCIe switches shared evenly by the GPUs and NICs and split
// evenly between the two sockets.
type switchedNode struct {
	name, host, model     string
	gpus, lanes           int
	nvGBps                float64
	cpus                  [2]string
	memGBps               float64
	xbusLanes             int
	xbusGBps              float64
	pcieSwitches, nics    int
	pcieGBps, nicPCIeGBps float64
}

func (s switchedNode) build() *Topology {
	t := &Topology{Name: s.name}
	b := builder{t}
	cpus := []int{b.cpu(s.host, 0, s.cpus[0], s.memGBps), b.cpu(s.host, 1, s.cpus[1], s.memGBps)}
	b.duplex(cpus[0], cpus[1], XBus, s.xbusLanes, s.xbusGBps, xbusUs)
	nvs := b.other(s.host, NVSwitch, "nvswitch", 0, -1)
	perSw, nicPerSw := s.gpus/s.pcieSwitches, s.nics/s.pcieSwitches
	for k := range s.pcieSwitches {
		numa := k * 2 / s.pcieSwitches
		sw := b.other(s.host, PCIeSwitch, "pcie", k, numa)
		b.duplex(sw, cpus[numa], PCIe, 1, s.pcieGBps, pcieUs)
		for j := range perSw {
			g := b.gpu(s.host, k*perSw+j, numa, s.model)
			b.duplex(g, sw, PCIe, 1, s.pcieGBps, pcieUs)
			b.duplex(g, nvs, NVLink, s.lanes, s.nvGBps, nvlinkUs)
		}
		for j := range nicPerSw {
			nic := b.other(s.host, NIC, "nic", k*nicPerSw+j, numa)
			b.duplex(nic, sw, PCIe, 1, s.nicPCIeGBps, pcieUs)
		}
	}
	return t
}

// DGX2 returns the DGX-2: sixteen V100 GPUs, each with six NVLink 2 links
// into the NVSwitch fabric (twelve NVSwitch chips on two baseboards,
// non-blocking, modelled as one switch: 150 GB/s per direction per GPU),
// two Skylake sockets with three UPI links, and eight PCIe switches with
// two GPUs and one 100 Gb/s NIC each (the real machine has two levels of
// PCIe switches; one level is modelled).
func DGX2() *Topology {
	return switchedNode{
		name: "dgx2", host: "dgx2", model: "Tesla V100-SXM3-32GB",
		gpus: 16, lanes: 6, nvGBps: nvlink2GBps,
		cpus: [2]string{"0-23,48-71", "24-47,72-95"}, memGBps: 128,
		xbusLanes: 3, xbusGBps: upi104GBps,
		pcieSwitches: 8, nics: 8, pcieGBps: pcie3GBps, nicPCIeGBps: pcie3GBps,
	}.build()
}

// HGXH200 returns an eight-GPU H200 node laid out like a DGX H200: each GPU
// with eighteen NVLink 4 links into the NVSwitch fabric (four NVSwitch
// chips, modelled as one switch: 450 GB/s per direction per GPU), two
// Sapphire Rapids sockets with four UPI links, and four PCIe 5.0 switches
// with two GPUs and two 400 Gb/s NICs each.
func HGXH200() *Topology {
	return switchedNode{
		name: "hgx-h200", host: "hgx", model: "NVIDIA H200",
		gpus: 8, lanes: 18, nvGBps: nvlink4GBps,
		cpus: [2]string{"0-55,112-167", "56-111,168-223"}, memGBps: 307,
		xbusLanes: 4, xbusGBps: upi16GBps,
		pcieSwitches: 4, nics: 8, pcieGBps: pcie5GBps, nicPCIeGBps: pcie5GBps,
	}.build()
}

// Mist returns a node of SciNet's Mist (Temuçin, MASc thesis, Queen's
// University 2021, §4.4.1, Figures 4.2 and 5.1): an IBM AC922 with two
// POWER9 sockets joined by the X-Bus (64 GB/s) and four V100 GPUs, two per
// socket. The GPUs of a socket are joined by three NVLink 2 links (75 GB/s
// per direction), and each GPU has three more to its own CPU: there is no
// PCIe path between GPUs. One EDR InfiniBand NIC hangs off socket 0 by PCIe
// 4.0.
func Mist() *Topology {
	const host = "mist"
	t := &Topology{Name: "mist"}
	b := builder{t}
	cpus := []int{b.cpu(host, 0, "0-63", 170), b.cpu(host, 1, "64-127", 170)}
	b.duplex(cpus[0], cpus[1], XBus, 1, xbusGBps, xbusUs)
	var gpus []int
	for g := range 4 {
		i := b.gpu(host, g, g/2, "Tesla V100-SXM2-32GB")
		gpus = append(gpus, i)
		b.duplex(i, cpus[g/2], NVLink, 3, nvlink2GBps, nvlinkUs)
	}
	b.duplex(gpus[0], gpus[1], NVLink, 3, nvlink2GBps, nvlinkUs)
	b.duplex(gpus[2], gpus[3], NVLink, 3, nvlink2GBps, nvlinkUs)
	nic := b.other(host, NIC, "nic", 0, 0)
	b.duplex(nic, cpus[0], PCIe, 1, pcie4GBps, pcieUs)
	return t
}

// Cedar returns a GPU node of Compute Canada's Cedar (Temuçin, MASc thesis,
// Queen's University 2021, §4.4.1, Figure 4.2): a Dell C4140 with two
// Cascade Lake sockets joined by two UPI links at 9.6 GT/s and four V100
// GPUs, fully connected by two NVLink 2 links per pair (50 GB/s per
// direction), two GPUs on each socket's PCIe 3.0 root ports, and one 100
// Gb/s Omni-Path NIC on socket 0.
func Cedar() *Topology {
	const host = "cedar"
	t := &Topology{Name: "cedar"}
	b := builder{t}
	cpus := []int{b.cpu(host, 0, "0-15,32-47", 115), b.cpu(host, 1, "16-31,48-63", 115)}
	b.duplex(cpus[0], cpus[1], XBus, 2, qpi96GBps, xbusUs)
	var gpus []int
	for g := range 4 {
		i := b.gpu(host, g, g/2, "Tesla V100-SXM2-32GB")
		gpus = append(gpus, i)
		b.duplex(i, cpus[g/2], PCIe, 1, pcie3GBps, pcieUs)
	}
	for x := range gpus {
		for y := x + 1; y < len(gpus); y++ {
			b.duplex(gpus[x], gpus[y], NVLink, 2, nvlink2GBps, nvlinkUs)
		}
	}
	nic := b.other(host, NIC, "nic", 0, 0)
	b.duplex(nic, cpus[0], PCIe, 1, pcie3GBps, pcieUs)
	return t
}

// Join returns the cluster of the given nodes on one network switch
// ("net0"): each node's device IDs are prefixed with its host name and a
// slash, and each of its NICs gets a duplex network link of nicGBps
// (per direction) to the switch. Every device of a node must name the
// node's host, and the hosts must differ.
func Join(name string, nodes []*Topology, nicGBps float64) (*Topology, error) {
	if !(nicGBps > 0) {
		return nil, fmt.Errorf("topo: Join: NIC bandwidth %g GB/s, want a positive number", nicGBps)
	}
	t := &Topology{Name: name}
	var nics []int
	seen := map[string]bool{}
	for k, node := range nodes {
		hosts := node.Hosts()
		if len(hosts) != 1 {
			return nil, fmt.Errorf("topo: Join: node %d has hosts %q, want exactly one", k, hosts)
		}
		host := hosts[0]
		if seen[host] {
			return nil, fmt.Errorf("topo: Join: host %q given twice", host)
		}
		seen[host] = true
		base := len(t.Devices)
		for _, d := range node.Devices {
			if d.Host != host {
				return nil, fmt.Errorf("topo: Join: device %q of host %q has host %q", d.ID, host, d.Host)
			}
			d.ID = host + "/" + d.ID
			i, err := t.AddDevice(d)
			if err != nil {
				return nil, err
			}
			if d.Kind == NIC {
				nics = append(nics, i)
			}
		}
		for _, l := range node.Links {
			l.From += base
			l.To += base
			if err := t.AddLink(l); err != nil {
				return nil, err
			}
		}
	}
	sw, err := t.AddDevice(Device{ID: "net0", Kind: NetSwitch, NUMA: -1})
	if err != nil {
		return nil, err
	}
	for _, nic := range nics {
		if err := t.AddDuplex(nic, sw, Network, 1, nicGBps, netUs); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// A preset is a single-node topology with its NIC line rate.
type preset struct {
	build   func() *Topology
	nicGBps float64
}

var presets = map[string]preset{
	"dgx1-p100": {DGX1P100, edrGBps},
	"dgx1-v100": {DGX1V100, edrGBps},
	"dgx2":      {DGX2, edrGBps},
	"hgx-h200":  {HGXH200, ndrGBps},
	"mist":      {Mist, edrGBps},
	"cedar":     {Cedar, edrGBps},
}

// Presets returns the names Preset accepts for single nodes, sorted.
func Presets() []string {
	var names []string
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// MaxClusterNodes bounds the nodes of a cluster preset (Cluster,
// "<n>x<preset>"): 4096 DGX-1 nodes take about 200 MB, while a typo of a
// few more digits would exhaust the memory before failing.
const MaxClusterNodes = 4096

// Cluster returns n nodes of the named preset, hosts "node0" to
// "node<n-1>", joined by one network switch with NIC links of nicGBps per
// direction; nicGBps 0 takes the preset's NIC line rate (100 Gb/s for the
// DGX-1, DGX-2, Mist and Cedar, 400 Gb/s for the H200 node).
func Cluster(name string, n int, nicGBps float64) (*Topology, error) {
	p, ok := presets[name]
	if !ok {
		return nil, fmt.Errorf("topo: unknown preset %q (want one of %v)", name, Presets())
	}
	if n < 1 || n > MaxClusterNodes {
		return nil, fmt.Errorf("topo: cluster of %d nodes: want 1 to %d", n, MaxClusterNodes)
	}
	if nicGBps == 0 {
		nicGBps = p.nicGBps
	}
	nodes := make([]*Topology, n)
	for k := range nodes {
		nodes[k] = p.build()
		host := fmt.Sprintf("node%d", k)
		for i := range nodes[k].Devices {
			nodes[k].Devices[i].Host = host
		}
	}
	return Join(fmt.Sprintf("%dx%s", n, name), nodes, nicGBps)
}

// Preset returns the topology named name: one of Presets(), or
// "<n>x<preset>" for a cluster of n such nodes (Cluster with the preset's
// NIC rate), e.g. "2xdgx1-v100".
func Preset(name string) (*Topology, error) {
	if p, ok := presets[name]; ok {
		return p.build(), nil
	}
	if num, node, ok := strings.Cut(name, "x"); ok {
		if n, err := strconv.Atoi(num); err == nil {
			return Cluster(node, n, 0)
		}
	}
	return nil, fmt.Errorf("topo: unknown preset %q (want one of %v, or <n>x<preset>)", name, Presets())
}
