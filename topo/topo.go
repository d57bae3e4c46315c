package topo

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// Kind is the kind of a device.
type Kind uint8

const (
	GPU        Kind = iota // an accelerator; a rank's device, never a relay
	CPU                    // a NUMA node: a socket's cores and memory
	NIC                    // a network adapter
	PCIeSwitch             // a PCIe switch (or root complex port) that joins devices
	NVSwitch               // an NVLink switch; several chips of one fabric may be one device
	NetSwitch              // a network switch between hosts
	numKinds
)

var kindNames = [...]string{"gpu", "cpu", "nic", "pcie-switch", "nvswitch", "net-switch"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind returns the kind named s (as Kind.String writes it).
func ParseKind(s string) (Kind, error) {
	for k := range numKinds {
		if kindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown device kind %q (want one of %v)", s, kindNames)
}

// Class is the technology of a link.
type Class uint8

const (
	NVLink  Class = iota // NVIDIA NVLink, GPU to GPU, GPU to NVSwitch or GPU to CPU (POWER9)
	PCIe                 // PCI Express
	XBus                 // the link between the sockets of a host (QPI, UPI, POWER X-Bus, Infinity Fabric)
	SHM                  // shared memory within one NUMA node: a CPU device's link to itself
	Network              // a network link between a NIC and a network switch
	numClasses
)

var classNames = [...]string{"nvlink", "pcie", "xbus", "shm", "net"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// ParseClass returns the class named s (as Class.String writes it).
func ParseClass(s string) (Class, error) {
	for c := range numClasses {
		if classNames[c] == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown link class %q (want one of %v)", s, classNames)
}

// Cost returns the class of the α-β cost model (package cost) that a link of
// class c belongs to: the network is Inter, the inter-socket link Cross,
// everything within a socket (NVLink, PCIe, shared memory) Intra.
func (c Class) Cost() cost.Class {
	switch c {
	case Network:
		return cost.Inter
	case XBus:
		return cost.Cross
	}
	return cost.Intra
}

// Device is a vertex of the topology.
type Device struct {
	// ID names the device uniquely within its topology, e.g. "gpu3" or
	// "node1/gpu3" in a cluster.
	ID   string
	Kind Kind
	// Host names the machine the device is in; empty for devices that
	// belong to no host (network switches).
	Host string
	// Index numbers the device among those of its kind on its host: the
	// GPU ordinal, the NUMA node number of a CPU.
	Index int
	// NUMA is the NUMA node the device is attached to (for a CPU device,
	// its own number); -1 if unknown or not applicable.
	NUMA int
	// Model, BusID and CPUs are descriptive: the product name, the PCI
	// address ("0000:3b:00.0"), and the cores of a CPU device in sysfs
	// cpulist form ("0-19,40-59").
	Model string
	BusID string
	CPUs  string
}

// Link is a directed link between two devices. A physical duplex link is
// two Links, one per direction (AddDuplex).
//
// Units: bandwidth in GB/s (10^9 bytes per second) per lane and direction,
// latency in microseconds, as everywhere in Braid's figures. Link.Cost
// converts to the SI units of package cost.
type Link struct {
	From, To int // device indices; From == To is a device's internal path (SHM)
	Class    Class
	// Count is the number of parallel lanes bonded into this link (two
	// NVLinks between a DGX-1 V100 pair, three X-Bus or UPI links); at
	// least 1.
	Count     int
	Bandwidth float64 // GB/s per lane, one direction
	Latency   float64 // µs
}

// Capacity returns the link's bandwidth in GB/s: Count × Bandwidth.
func (l Link) Capacity() float64 { return float64(l.Count) * l.Bandwidth }

// Cost returns the link as an α-β model in seconds and bytes per second.
func (l Link) Cost() cost.Link {
	return cost.Link{Alpha: l.Latency * 1e-6, Beta: l.Capacity() * 1e9}
}

// Topology is a graph of devices and directed links. The zero value is an
// empty topology ready to use. Devices and Links are plain data: grow them
// with AddDevice and AddLink (which check what they add) or edit them and
// call Validate. A Topology is not safe for concurrent modification; its
// read-only methods may be called concurrently.
type Topology struct {
	Name    string
	Devices []Device
	Links   []Link
}

// ErrDuplicate is returned (wrapped) by AddDevice for an ID already present.
var ErrDuplicate = errors.New("duplicate device id")

// AddDevice appends d and returns its index.
func (t *Topology) AddDevice(d Device) (int, error) {
	if d.ID == "" {
		return -1, errors.New("topo: device with an empty id")
	}
	if d.Kind >= numKinds {
		return -1, fmt.Errorf("topo: device %q: %v", d.ID, d.Kind)
	}
	if t.Find(d.ID) >= 0 {
		return -1, fmt.Errorf("topo: %w %q", ErrDuplicate, d.ID)
	}
	t.Devices = append(t.Devices, d)
	return len(t.Devices) - 1, nil
}

// checkLink returns an error unless l is a valid link of t.
func (t *Topology) checkLink(l Link) error {
	n := len(t.Devices)
	switch {
	case l.From < 0 || l.From >= n || l.To < 0 || l.To >= n:
		return fmt.Errorf("link %d->%d: device index out of range [0,%d)", l.From, l.To, n)
	case l.Class >= numClasses:
		return fmt.Errorf("link %s->%s: %v", t.Devices[l.From].ID, t.Devices[l.To].ID, l.Class)
	case l.Count < 1:
		return fmt.Errorf("link %s->%s: count %d, want at least 1", t.Devices[l.From].ID, t.Devices[l.To].ID, l.Count)
	case !(l.Bandwidth > 0) || math.IsInf(l.Capacity(), 0):
		return fmt.Errorf("link %s->%s: bandwidth %g GB/s × %d lanes, want a positive finite number", t.Devices[l.From].ID, t.Devices[l.To].ID, l.Bandwidth, l.Count)
	case !(l.Latency >= 0) || math.IsInf(l.Latency, 0):
		return fmt.Errorf("link %s->%s: latency %g µs, want a non-negative finite number", t.Devices[l.From].ID, t.Devices[l.To].ID, l.Latency)
	case l.From == l.To && l.Class != SHM:
		return fmt.Errorf("link %s->%s: only shm links may join a device to itself", t.Devices[l.From].ID, t.Devices[l.To].ID)
	}
	return nil
}

// AddLink appends the directed link l.
func (t *Topology) AddLink(l Link) error {
	if err := t.checkLink(l); err != nil {
		return fmt.Errorf("topo: %w", err)
	}
	t.Links = append(t.Links, l)
	return nil
}

// AddDuplex appends a link a→b and its mirror b→a, with the same class,
// lane count, per-lane bandwidth (each direction) and latency.
func (t *Topology) AddDuplex(a, b int, c Class, count int, bw, lat float64) error {
	if err := t.AddLink(Link{From: a, To: b, Class: c, Count: count, Bandwidth: bw, Latency: lat}); err != nil {
		return err
	}
	if a == b {
		return nil
	}
	return t.AddLink(Link{From: b, To: a, Class: c, Count: count, Bandwidth: bw, Latency: lat})
}

// Validate returns an error unless every device has a unique, non-empty
// ID and a known kind, and every link is valid (AddLink's checks).
func (t *Topology) Validate() error {
	seen := make(map[string]int, len(t.Devices))
	for i, d := range t.Devices {
		if d.ID == "" {
			return fmt.Errorf("topo: device %d has an empty id", i)
		}
		if j, ok := seen[d.ID]; ok {
			return fmt.Errorf("topo: devices %d and %d: %w %q", j, i, ErrDuplicate, d.ID)
		}
		seen[d.ID] = i
		if d.Kind >= numKinds {
			return fmt.Errorf("topo: device %q: %v", d.ID, d.Kind)
		}
	}
	for i, l := range t.Links {
		if err := t.checkLink(l); err != nil {
			return fmt.Errorf("topo: links[%d]: %w", i, err)
		}
	}
	return nil
}

// Clone returns a deep copy of t.
func (t *Topology) Clone() *Topology {
	return &Topology{Name: t.Name, Devices: slices.Clone(t.Devices), Links: slices.Clone(t.Links)}
}

// Find returns the index of the device with the given ID, or -1.
func (t *Topology) Find(id string) int {
	for i := range t.Devices {
		if t.Devices[i].ID == id {
			return i
		}
	}
	return -1
}

// OfKind returns the indices of the devices of kind k, in device order.
func (t *Topology) OfKind(k Kind) []int {
	var out []int
	for i, d := range t.Devices {
		if d.Kind == k {
			out = append(out, i)
		}
	}
	return out
}

// GPUs returns the indices of the GPUs, in device order.
func (t *Topology) GPUs() []int { return t.OfKind(GPU) }

// Hosts returns the host names in order of first appearance among the
// devices, leaving out the empty name of hostless devices.
func (t *Topology) Hosts() []string {
	var hs []string
	for _, d := range t.Devices {
		if d.Host != "" && !slices.Contains(hs, d.Host) {
			hs = append(hs, d.Host)
		}
	}
	return hs
}

// Between returns the indices of the links from a to b, in link order.
func (t *Topology) Between(a, b int) []int {
	var out []int
	for i, l := range t.Links {
		if l.From == a && l.To == b {
			out = append(out, i)
		}
	}
	return out
}

// Capacity returns the summed capacity in GB/s of the links from a to b
// whose class is one of classes (every class if none is given).
func (t *Topology) Capacity(a, b int, classes ...Class) float64 {
	c := 0.0
	for _, i := range t.Between(a, b) {
		l := t.Links[i]
		if len(classes) == 0 || slices.Contains(classes, l.Class) {
			c += l.Capacity()
		}
	}
	return c
}

// Lanes returns the number of lanes of class c from a to b: the NVLink
// count of a GPU pair for c = NVLink.
func (t *Topology) Lanes(a, b int, c Class) int {
	n := 0
	for _, i := range t.Between(a, b) {
		if t.Links[i].Class == c {
			n += t.Links[i].Count
		}
	}
	return n
}

// Out returns the indices of the links leaving a (self links included).
func (t *Topology) Out(a int) []int {
	var out []int
	for i, l := range t.Links {
		if l.From == a {
			out = append(out, i)
		}
	}
	return out
}

// CPUOf returns the CPU device (NUMA node) that device d is attached to:
// d itself for a CPU, the CPU of d's host whose Index is d.NUMA otherwise;
// -1 if there is none.
func (t *Topology) CPUOf(d int) int {
	dev := t.Devices[d]
	if dev.Kind == CPU {
		return d
	}
	return t.NUMANode(dev.Host, dev.NUMA)
}

// NUMANode returns the index of the CPU device of the given host with the
// given NUMA node number, or -1.
func (t *Topology) NUMANode(host string, node int) int {
	for i, d := range t.Devices {
		if d.Kind == CPU && d.Host == host && d.Index == node {
			return i
		}
	}
	return -1
}

// Layout returns where ranks run when rank r runs on device devs[r]: hosts
// numbered in order of first appearance, and each device's NUMA node (0
// when unknown). It is the sched.Layout the planner and cost model use.
func (t *Topology) Layout(devs []int) *sched.Layout {
	hosts := make([]string, len(devs))
	numa := make([]int, len(devs))
	for r, d := range devs {
		hosts[r] = t.Devices[d].Host
		numa[r] = max(t.Devices[d].NUMA, 0)
	}
	return sched.NewLayout(hosts, numa)
}

// count returns the number of devices of each kind, indexed by Kind.
func (t *Topology) count() [numKinds]int {
	var n [numKinds]int
	for _, d := range t.Devices {
		if d.Kind < numKinds {
			n[d.Kind]++
		}
	}
	return n
}
