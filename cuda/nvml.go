package cuda

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// NVML, the management library, reports what the driver API does not: the
// NVLinks of each GPU and where they lead. Its device indices follow PCI
// order and ignore CUDA_VISIBLE_DEVICES; GPU.CUDA maps them to this
// process's CUDA ordinals.

var nvml struct {
	once sync.Once
	err  error

	init, shutdown, errorString, count, handleByIndex, name, uuid, pciInfo  uintptr
	linkState, linkRemotePCI, linkRemoteType, p2pStatus, topoCommonAncestor uintptr
}

func nvmlLibs() []string {
	names := []string{"libnvidia-ml.so.1", "/usr/local/nvidia/lib64/libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1"}
	if p := os.Getenv("BRAID_NVML_LIB"); p != "" {
		return []string{p} // the only one: no silent fall back to another
	}
	return names
}

func loadNVML() error {
	nvml.once.Do(func() {
		h, err := openLib(nvmlLibs())
		if err != nil && os.Getenv("BRAID_NVML_LIB") != "" {
			err = fmt.Errorf("BRAID_NVML_LIB: %v", err)
		}
		if err != nil {
			nvml.err = fmt.Errorf("%w: %v", ErrNoNVML, err)
			return
		}
		syms := []struct {
			p    *uintptr
			name string
		}{
			{&nvml.init, "nvmlInit_v2"}, {&nvml.shutdown, "nvmlShutdown"}, {&nvml.errorString, "nvmlErrorString"},
			{&nvml.count, "nvmlDeviceGetCount_v2"}, {&nvml.handleByIndex, "nvmlDeviceGetHandleByIndex_v2"},
			{&nvml.name, "nvmlDeviceGetName"}, {&nvml.uuid, "nvmlDeviceGetUUID"}, {&nvml.pciInfo, "nvmlDeviceGetPciInfo_v3"},
			{&nvml.linkState, "nvmlDeviceGetNvLinkState"}, {&nvml.linkRemotePCI, "nvmlDeviceGetNvLinkRemotePciInfo_v2"},
			{&nvml.p2pStatus, "nvmlDeviceGetP2PStatus"}, {&nvml.topoCommonAncestor, "nvmlDeviceGetTopologyCommonAncestor"},
		}
		for _, s := range syms {
			if *s.p = symbol(h, s.name); *s.p == 0 {
				nvml.err = fmt.Errorf("%w: libnvidia-ml.so.1 has no %s (driver too old)", ErrNoNVML, s.name)
				return
			}
		}
		// Optional: drivers before 450 lack it, and links are then typed by
		// matching the remote PCI address against the GPUs.
		nvml.linkRemoteType = symbol(h, "nvmlDeviceGetNvLinkRemoteDeviceType")
	})
	return nvml.err
}

// nvmlCheck turns an NVML return code into nil or an *NVMLError.
func nvmlCheck(fn string, r uintptr) error {
	code := int32(r)
	if code == 0 {
		return nil
	}
	return &NVMLError{Func: fn, Code: code, Text: goString(ccall(nvml.errorString, uintptr(code)))}
}

// The NVML return codes this file tells apart.
const (
	nvmlErrInvalidArgument = 2
	nvmlErrNotSupported    = 3
)

// nvmlPciInfo is nvmlPciInfo_t.
type nvmlPciInfo struct {
	busIDLegacy    [16]byte
	domain         uint32
	bus            uint32
	device         uint32
	pciDeviceID    uint32
	pciSubSystemID uint32
	busID          [32]byte
}

// LinkRemote says what the far end of an NVLink is.
type LinkRemote int

// Kinds of NVLink far end.
const (
	RemoteUnknown LinkRemote = iota
	RemoteGPU
	RemoteSwitch // an NVSwitch: the link reaches every GPU on the fabric
	RemoteNPU    // an IBM POWER CPU
)

func (r LinkRemote) String() string {
	switch r {
	case RemoteGPU:
		return "gpu"
	case RemoteSwitch:
		return "nvswitch"
	case RemoteNPU:
		return "npu"
	}
	return "unknown"
}

// NVLink is one active NVLink of a GPU.
type NVLink struct {
	Index       int
	RemoteBusID string // PCI address of the far end, normalised (NormalizeBusID)
	Remote      LinkRemote
	RemoteGPU   int // NVML index of the far-end GPU when Remote is RemoteGPU, else -1
}

// GPU is one GPU as NVML sees it.
type GPU struct {
	Index int    // NVML index (PCI order, every GPU of the host)
	CUDA  int    // CUDA ordinal in this process, or -1 if not visible here
	Name  string // "NVIDIA H200"
	UUID  string
	BusID string   // normalised PCI address, "0000:06:00.0"
	Links []NVLink // active links only
}

// P2PStatus is an nvmlGpuP2PStatus_t; 0 means supported.
type P2PStatus int

// P2POK is the P2PStatus of a supported capability.
const P2POK P2PStatus = 0

func (s P2PStatus) String() string {
	names := []string{"ok", "chipset not supported", "gpu not supported", "ioh topology not supported", "disabled by regkey", "not supported", "unknown"}
	if int(s) >= 0 && int(s) < len(names) {
		return names[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// TopologyLevel is an nvmlGpuTopologyLevel_t: the closest common ancestor
// of two GPUs on the PCI tree.
type TopologyLevel int

// Topology levels, nearest first, with nvml.h's values.
const (
	TopoInternal   TopologyLevel = 0  // the same board
	TopoSingle     TopologyLevel = 10 // one PCIe switch between them
	TopoMultiple   TopologyLevel = 20 // several PCIe switches, no host bridge
	TopoHostBridge TopologyLevel = 30 // the same host bridge
	TopoNode       TopologyLevel = 40 // the same NUMA node
	TopoSystem     TopologyLevel = 50 // across NUMA nodes
)

func (l TopologyLevel) String() string {
	switch l {
	case TopoInternal:
		return "internal"
	case TopoSingle:
		return "pcie-switch"
	case TopoMultiple:
		return "pcie-switches"
	case TopoHostBridge:
		return "host-bridge"
	case TopoNode:
		return "numa-node"
	case TopoSystem:
		return "system"
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}

// GPUPair is what connects two GPUs, A < B (NVML indices).
type GPUPair struct {
	A, B int
	// NVLinks is the number of NVLinks between the two: direct links
	// counted on A's side, plus, when both reach NVSwitches, the smaller of
	// their switch link counts (an NVSwitch fabric gives every pair the
	// full width of the narrower GPU).
	NVLinks   int
	ViaSwitch bool
	// P2P statuses as NVML reports them: read, write, NVLink and atomics.
	P2PRead, P2PWrite, P2PNVLink, P2PAtomics P2PStatus
	Ancestor                                 TopologyLevel // PCI common ancestor
}

// GPUTopology is every GPU of the host and every pair of them.
type GPUTopology struct {
	GPUs  []GPU
	Pairs []GPUPair
}

// Pair returns the pair of GPUs a and b (NVML indices, either order).
func (t *GPUTopology) Pair(a, b int) (GPUPair, bool) {
	if a > b {
		a, b = b, a
	}
	for _, p := range t.Pairs {
		if p.A == a && p.B == b {
			return p, true
		}
	}
	return GPUPair{}, false
}

// String formats the topology as a matrix of NVLink counts, like
// nvidia-smi topo -m ("NV18" for 18 links, "SYS" etc. for PCI paths).
func (t *GPUTopology) String() string {
	var b strings.Builder
	b.WriteString("      ")
	for _, g := range t.GPUs {
		fmt.Fprintf(&b, " GPU%-3d", g.Index)
	}
	b.WriteString("\n")
	for _, g := range t.GPUs {
		fmt.Fprintf(&b, "GPU%-3d", g.Index)
		for _, h := range t.GPUs {
			cell := "X"
			if p, ok := t.Pair(g.Index, h.Index); ok && g.Index != h.Index {
				if p.NVLinks > 0 {
					cell = "NV" + strconv.Itoa(p.NVLinks)
				} else {
					cell = strings.ToUpper(p.Ancestor.String())
				}
			}
			fmt.Fprintf(&b, " %-6s", cell)
		}
		fmt.Fprintf(&b, "  %s %s cuda:%d links:%d\n", g.Name, g.BusID, g.CUDA, len(g.Links))
	}
	return b.String()
}

// NormalizeBusID rewrites a PCI address as the CUDA driver prints it,
// "dddd:bb:dd.f" in lower case with a 4-digit domain: NVML writes an
// 8-digit domain ("00000000:06:00.0").
func NormalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return s
	}
	v, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%04x:%s", v, rest)
}

// DiscoverGPUTopology asks NVML for every GPU of the host, its active
// NVLinks and where they lead, and for every pair of GPUs the number of
// NVLinks between them, the peer-to-peer statuses and their common PCI
// ancestor. Without NVML the error wraps ErrNoNVML.
func DiscoverGPUTopology() (*GPUTopology, error) {
	if err := loadNVML(); err != nil {
		return nil, err
	}
	if err := nvmlCheck("nvmlInit_v2", ccall(nvml.init)); err != nil {
		return nil, err
	}
	defer ccall(nvml.shutdown)
	var n uint32
	if err := nvmlCheck("nvmlDeviceGetCount_v2", ccall(nvml.count, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	handles := make([]uintptr, n)
	topo := &GPUTopology{}
	byBus := map[string]int{}
	for i := range handles {
		if err := nvmlCheck("nvmlDeviceGetHandleByIndex_v2", ccall(nvml.handleByIndex, uintptr(i), uintptr(unsafe.Pointer(&handles[i])))); err != nil {
			return nil, err
		}
		g, err := nvmlGPU(i, handles[i])
		if err != nil {
			return nil, err
		}
		byBus[g.BusID] = i
		topo.GPUs = append(topo.GPUs, g)
	}
	cudaByBus := map[string]int{}
	if cnt, err := DeviceCount(); err == nil {
		for d := 0; d < cnt; d++ {
			if id, err := Device(d).PCIBusID(); err == nil {
				cudaByBus[NormalizeBusID(id)] = d
			}
		}
	}
	switchLinks := make([]int, n)
	for i := range topo.GPUs {
		g := &topo.GPUs[i]
		g.CUDA = -1
		if d, ok := cudaByBus[g.BusID]; ok {
			g.CUDA = d
		}
		for j := range g.Links {
			l := &g.Links[j]
			if peer, ok := byBus[l.RemoteBusID]; ok && l.Remote != RemoteSwitch {
				l.Remote, l.RemoteGPU = RemoteGPU, peer
			}
			if l.Remote == RemoteSwitch {
				switchLinks[i]++
			}
		}
	}
	for a := 0; a < int(n); a++ {
		for b := a + 1; b < int(n); b++ {
			p := GPUPair{A: a, B: b}
			for _, l := range topo.GPUs[a].Links {
				if l.Remote == RemoteGPU && l.RemoteGPU == b {
					p.NVLinks++
				}
			}
			if s := min(switchLinks[a], switchLinks[b]); s > 0 {
				p.NVLinks += s
				p.ViaSwitch = true
			}
			caps := []*P2PStatus{&p.P2PRead, &p.P2PWrite, &p.P2PNVLink, &p.P2PAtomics}
			for idx, dst := range caps {
				var st int32
				if err := nvmlCheck("nvmlDeviceGetP2PStatus", ccall(nvml.p2pStatus, handles[a], handles[b], uintptr(idx), uintptr(unsafe.Pointer(&st)))); err != nil {
					st = 6 // unknown
				}
				*dst = P2PStatus(st)
			}
			var lvl int32
			if err := nvmlCheck("nvmlDeviceGetTopologyCommonAncestor", ccall(nvml.topoCommonAncestor, handles[a], handles[b], uintptr(unsafe.Pointer(&lvl)))); err != nil {
				return nil, err
			}
			p.Ancestor = TopologyLevel(lvl)
			topo.Pairs = append(topo.Pairs, p)
		}
	}
	return topo, nil
}

// nvmlGPU reads one GPU's identity and active NVLinks.
func nvmlGPU(i int, h uintptr) (GPU, error) {
	g := GPU{Index: i}
	buf := make([]byte, 96)
	if err := nvmlCheck("nvmlDeviceGetName", ccall(nvml.name, h, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))); err != nil {
		return g, err
	}
	g.Name = bytesString(buf)
	buf = make([]byte, 96)
	if err := nvmlCheck("nvmlDeviceGetUUID", ccall(nvml.uuid, h, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))); err != nil {
		return g, err
	}
	g.UUID = bytesString(buf)
	var pci nvmlPciInfo
	if err := nvmlCheck("nvmlDeviceGetPciInfo_v3", ccall(nvml.pciInfo, h, uintptr(unsafe.Pointer(&pci)))); err != nil {
		return g, err
	}
	g.BusID = NormalizeBusID(bytesString(pci.busID[:]))
	const maxLinks = 18 // NVML_NVLINK_MAX_LINKS
	for link := 0; link < maxLinks; link++ {
		var state int32
		r := int32(ccall(nvml.linkState, h, uintptr(link), uintptr(unsafe.Pointer(&state))))
		if r == nvmlErrInvalidArgument || r == nvmlErrNotSupported {
			break // past the GPU's last link, or no NVLink at all
		}
		if r != 0 || state == 0 {
			continue
		}
		l := NVLink{Index: link, RemoteGPU: -1}
		var rp nvmlPciInfo
		if err := nvmlCheck("nvmlDeviceGetNvLinkRemotePciInfo_v2", ccall(nvml.linkRemotePCI, h, uintptr(link), uintptr(unsafe.Pointer(&rp)))); err == nil {
			l.RemoteBusID = NormalizeBusID(bytesString(rp.busID[:]))
		}
		if nvml.linkRemoteType != 0 {
			var t int32
			if ccall(nvml.linkRemoteType, h, uintptr(link), uintptr(unsafe.Pointer(&t))) == 0 {
				switch t {
				case 0:
					l.Remote = RemoteGPU
				case 1:
					l.Remote = RemoteNPU
				case 2:
					l.Remote = RemoteSwitch
				}
			}
		}
		g.Links = append(g.Links, l)
	}
	return g, nil
}
