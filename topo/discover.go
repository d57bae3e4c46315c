package topo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/braid-ccl/braid/cost"
)

// GPUProbe adds the GPUs of one host to a topology under discovery; it is
// where NVML (or another vendor library) plugs in.
//
// Discover calls it once, after it has added the host's CPU devices (one
// per NUMA node, Index = node number: find them with t.NUMANode(host, n))
// and NICs, and before it validates the result. The probe appends, with
// AddDevice and AddLink or AddDuplex:
//
//   - one GPU device per GPU: Kind GPU, Host host, Index the driver's
//     ordinal (NVML's index, PCI order), NUMA the node of its PCI device
//     (-1 if unknown), BusID its
//     PCI address, Model its product name, and an ID unique in t
//     ("gpu<ordinal>" by convention);
//   - its NVLinks, one duplex link per connected pair with Count the
//     number of links, or one per GPU to an NVSwitch device it adds;
//   - its PCIe path: links to the PCIe switches it adds or straight to its
//     NUMA node's CPU device.
//
// PCINode gives a GPU's NUMA node from its PCI address. The probe must
// not remove or change what is already in t. It returns an error
// wrapping ErrNoGPU when the host has no GPU or no driver to ask (Discover
// then goes on with a CPU-only topology), and any other error to make
// Discover fail. It is called from the goroutine that called Discover.
type GPUProbe func(t *Topology, host string) error

// ErrNoGPU is what a GPUProbe returns (wrapped or not) when it finds no GPU
// or no driver.
var ErrNoGPU = errors.New("no GPU found")

// DiscoverOptions says where and how Discover looks.
type DiscoverOptions struct {
	// Root is the directory under which sys/ is read; "" means "/".
	// Tests point it at a copy of a machine's sysfs.
	Root string
	// Host names the host; "" takes the kernel's host name.
	Host string
	// GPU adds GPUs, or nil for none.
	GPU GPUProbe
	// Model gives the figures sysfs cannot: shared memory within a NUMA
	// node (its Intra link), the link between nodes (Cross) and NICs whose
	// speed is unknown (Inter). Nil means cost.Default(), the figures
	// measured on this project's development machine.
	Model *cost.Model
}

// Discover builds the topology of the host it runs on from sysfs: one CPU
// device per NUMA node (/sys/devices/system/node/node<n>/cpulist; one node
// with the online CPUs when the kernel has no NUMA directory), each with a
// shared-memory link to itself, an inter-socket link between every two
// nodes, one NIC per network interface backed by a device
// (/sys/class/net/<if>/device, speed and numa_node from sysfs), linked to
// its node's CPU at its line rate, and then whatever opts.GPU adds.
func Discover(opts DiscoverOptions) (*Topology, error) {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	host := opts.Host
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("topo: discover: %w", err)
		}
		host = h
	}
	model := cost.Default()
	if opts.Model != nil {
		model = *opts.Model
	}
	gbps := func(c cost.Class) float64 { return model.Links[c].Beta / 1e9 }
	us := func(c cost.Class) float64 { return model.Links[c].Alpha * 1e6 }

	t := &Topology{Name: host}
	nodes, err := numaNodes(root)
	if err != nil {
		return nil, err
	}
	var cpus []int
	for _, n := range nodes {
		i, err := t.AddDevice(Device{ID: fmt.Sprintf("cpu%d", n.num), Kind: CPU, Host: host, Index: n.num, NUMA: n.num, CPUs: n.cpus})
		if err != nil {
			return nil, err
		}
		cpus = append(cpus, i)
		if err := t.AddLink(Link{From: i, To: i, Class: SHM, Count: 1, Bandwidth: gbps(cost.Intra), Latency: us(cost.Intra)}); err != nil {
			return nil, err
		}
	}
	for x := range cpus {
		for y := x + 1; y < len(cpus); y++ {
			if err := t.AddDuplex(cpus[x], cpus[y], XBus, 1, gbps(cost.Cross), us(cost.Cross)); err != nil {
				return nil, err
			}
		}
	}
	if err := discoverNICs(t, root, host, cpus, gbps(cost.Inter)); err != nil {
		return nil, err
	}
	if opts.GPU != nil {
		if err := opts.GPU(t, host); err != nil && !errors.Is(err, ErrNoGPU) {
			return nil, fmt.Errorf("topo: discover GPUs: %w", err)
		}
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

type numaNode struct {
	num  int
	cpus string
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// numaNodes lists the NUMA nodes under root, in number order.
func numaNodes(root string) ([]numaNode, error) {
	dirs, _ := filepath.Glob(filepath.Join(root, "sys/devices/system/node/node[0-9]*"))
	var nodes []numaNode
	for _, d := range dirs {
		num, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		cpus, err := readTrim(filepath.Join(d, "cpulist"))
		if err != nil {
			return nil, fmt.Errorf("topo: discover: %w", err)
		}
		if _, err := ParseCPUList(cpus); err != nil {
			return nil, fmt.Errorf("topo: discover: %s: %w", filepath.Join(d, "cpulist"), err)
		}
		nodes = append(nodes, numaNode{num, cpus})
	}
	slices.SortFunc(nodes, func(a, b numaNode) int { return a.num - b.num })
	if len(nodes) == 0 {
		cpus, err := readTrim(filepath.Join(root, "sys/devices/system/cpu/online"))
		if err != nil {
			return nil, fmt.Errorf("topo: discover: no NUMA nodes and no online CPUs: %w", err)
		}
		nodes = []numaNode{{0, cpus}}
	}
	return nodes, nil
}

var pciAddr = regexp.MustCompile(`^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// discoverNICs adds a NIC for each interface under sys/class/net that is
// backed by a device, linked to its NUMA node's CPU (the first node when
// unknown) at its line rate (defGBps when sysfs does not say).
func discoverNICs(t *Topology, root, host string, cpus []int, defGBps float64) error {
	dir := filepath.Join(root, "sys/class/net")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // no network class: no NICs
	}
	k := 0
	for _, e := range ents {
		ifdir := filepath.Join(dir, e.Name())
		dev := filepath.Join(ifdir, "device")
		if _, err := os.Stat(dev); err != nil {
			continue // virtual interface (lo, bridges, tunnels)
		}
		numa := -1
		if s, err := readTrim(filepath.Join(dev, "numa_node")); err == nil {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 {
				numa = n
			}
		}
		attach := cpus[0]
		for _, c := range cpus {
			if t.Devices[c].Index == numa {
				attach = c
			}
		}
		bw := defGBps
		if s, err := readTrim(filepath.Join(ifdir, "speed")); err == nil {
			if mbps, err := strconv.ParseFloat(s, 64); err == nil && mbps > 0 {
				bw = mbps / 8000
			}
		}
		bus := ""
		if real, err := filepath.EvalSymlinks(dev); err == nil {
			for _, p := range []string{real, filepath.Dir(real)} {
				if pciAddr.MatchString(filepath.Base(p)) {
					bus = filepath.Base(p)
					break
				}
			}
		}
		i, err := t.AddDevice(Device{ID: e.Name(), Kind: NIC, Host: host, Index: k, NUMA: numa, BusID: bus})
		if err != nil {
			return err
		}
		k++
		if err := t.AddDuplex(i, attach, PCIe, 1, bw, pcieUs); err != nil {
			return err
		}
	}
	return nil
}

// PCINode returns the NUMA node of the PCI device at address busID
// ("0000:3b:00.0", lower case) from <root>/sys/bus/pci/devices, or -1 if
// sysfs does not say; root "" means "/". A GPUProbe uses it to place each
// GPU on its socket.
func PCINode(root, busID string) int {
	if root == "" {
		root = "/"
	}
	s, err := readTrim(filepath.Join(root, "sys/bus/pci/devices", busID, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// ParseCPUList parses a Linux CPU list ("0-3,8,10-11") into CPU numbers in
// the order given.
func ParseCPUList(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("bad CPU list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// NodeOfCPU returns the CPU device (NUMA node) of host whose CPU list holds
// core cpu, or -1: where a rank pinned to that core runs.
func (t *Topology) NodeOfCPU(host string, cpu int) int {
	for i, d := range t.Devices {
		if d.Kind != CPU || d.Host != host {
			continue
		}
		if list, err := ParseCPUList(d.CPUs); err == nil && slices.Contains(list, cpu) {
			return i
		}
	}
	return -1
}
