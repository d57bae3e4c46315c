package cuda

import (
	"fmt"
	"unsafe"
)

// Device is a CUDA device ordinal, as the driver numbers devices in this
// process (after CUDA_VISIBLE_DEVICES). Its methods may be called from any
// goroutine: they need no context.
type Device int

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// Device attributes, with cuda.h's values.
const (
	AttrMaxThreadsPerBlock          DeviceAttribute = 1
	AttrWarpSize                    DeviceAttribute = 10
	AttrMultiprocessorCount         DeviceAttribute = 16
	AttrIntegrated                  DeviceAttribute = 18
	AttrCanMapHostMemory            DeviceAttribute = 19
	AttrConcurrentKernels           DeviceAttribute = 31
	AttrPCIBusID                    DeviceAttribute = 33
	AttrPCIDeviceID                 DeviceAttribute = 34
	AttrMemoryClockRate             DeviceAttribute = 36 // kHz
	AttrGlobalMemoryBusWidth        DeviceAttribute = 37 // bits
	AttrL2CacheSize                 DeviceAttribute = 38 // bytes
	AttrMaxThreadsPerMultiprocessor DeviceAttribute = 39
	AttrAsyncEngineCount            DeviceAttribute = 40
	AttrUnifiedAddressing           DeviceAttribute = 41
	AttrPCIDomainID                 DeviceAttribute = 50
	AttrComputeCapabilityMajor      DeviceAttribute = 75
	AttrComputeCapabilityMinor      DeviceAttribute = 76
	AttrMultiGPUBoard               DeviceAttribute = 84
	AttrMultiGPUBoardGroupID        DeviceAttribute = 85
)

// P2PAttribute is a CUdevice_P2PAttribute, for Device.P2PAttribute.
type P2PAttribute int32

// Peer-to-peer attributes, with cuda.h's values.
const (
	P2PPerformanceRank       P2PAttribute = 1 // relative rank of the link; lower is better
	P2PAccessSupported       P2PAttribute = 2
	P2PNativeAtomicSupported P2PAttribute = 3
)

// DeviceCount returns the number of CUDA devices visible to this process.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n int32
	if err := check("cuDeviceGetCount", Result(ccall(api.cuDeviceGetCount, uintptr(unsafe.Pointer(&n))))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// handle returns the driver's CUdevice for d, checking that it exists.
func (d Device) handle() (int32, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var h int32
	if r := Result(ccall(api.cuDeviceGet, uintptr(unsafe.Pointer(&h)), uintptr(d))); r != Success {
		return 0, fmt.Errorf("cuda: device %d: %w", int(d), &Error{Func: "cuDeviceGet", Code: r})
	}
	return h, nil
}

// Attribute returns the value of one device attribute.
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	h, err := d.handle()
	if err != nil {
		return 0, err
	}
	var v int32
	if err := check("cuDeviceGetAttribute", Result(ccall(api.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(h)))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Name returns the device's product name ("NVIDIA H200").
func (d Device) Name() (string, error) {
	h, err := d.handle()
	if err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	if err := check("cuDeviceGetName", Result(ccall(api.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(h)))); err != nil {
		return "", err
	}
	return bytesString(buf), nil
}

// PCIBusID returns the device's PCI address as domain:bus:device.function
// ("0000:06:00.0").
func (d Device) PCIBusID() (string, error) {
	h, err := d.handle()
	if err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	if err := check("cuDeviceGetPCIBusId", Result(ccall(api.cuDeviceGetPCIBusId, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(h)))); err != nil {
		return "", err
	}
	return bytesString(buf), nil
}

// TotalMem returns the device's memory in bytes.
func (d Device) TotalMem() (uint64, error) {
	h, err := d.handle()
	if err != nil {
		return 0, err
	}
	var n uint64
	if err := check("cuDeviceTotalMem_v2", Result(ccall(api.cuDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(h)))); err != nil {
		return 0, err
	}
	return n, nil
}

// UUID returns the device's 16-byte UUID, formatted as nvidia-smi does
// ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx").
func (d Device) UUID() (string, error) {
	h, err := d.handle()
	if err != nil {
		return "", err
	}
	var u [16]byte
	if err := check("cuDeviceGetUuid", Result(ccall(api.cuDeviceGetUuid, uintptr(unsafe.Pointer(&u[0])), uintptr(h)))); err != nil {
		return "", err
	}
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// ComputeCapability returns the device's compute capability (9, 0 for Hopper).
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	minor, err = d.Attribute(AttrComputeCapabilityMinor)
	return major, minor, err
}

// CanAccessPeer reports whether d can map peer's memory (peer-to-peer over
// NVLink or PCIe). A device cannot be its own peer.
func (d Device) CanAccessPeer(peer Device) (bool, error) {
	h, err := d.handle()
	if err != nil {
		return false, err
	}
	hp, err := peer.handle()
	if err != nil {
		return false, err
	}
	var v int32
	if err := check("cuDeviceCanAccessPeer", Result(ccall(api.cuDeviceCanAccessPeer, uintptr(unsafe.Pointer(&v)), uintptr(h), uintptr(hp)))); err != nil {
		return false, err
	}
	return v != 0, nil
}

// P2PAttribute returns a peer-to-peer attribute of the link from d to peer.
func (d Device) P2PAttribute(a P2PAttribute, peer Device) (int, error) {
	h, err := d.handle()
	if err != nil {
		return 0, err
	}
	hp, err := peer.handle()
	if err != nil {
		return 0, err
	}
	var v int32
	if err := check("cuDeviceGetP2PAttribute", Result(ccall(api.cuDeviceGetP2PAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(h), uintptr(hp)))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceInfo is a summary of one device, for logs and topology discovery.
type DeviceInfo struct {
	Ordinal       Device
	Name          string
	UUID          string
	PCIBusID      string // "0000:06:00.0"
	CCMajor       int
	CCMinor       int
	SMs           int    // multiprocessors
	TotalMem      uint64 // bytes
	L2Cache       int    // bytes
	AsyncEngines  int    // copy engines usable at once
	MemBusWidth   int    // bits
	UnifiedAddr   bool
	CanMapHostMem bool
}

// Info collects a DeviceInfo.
func (d Device) Info() (DeviceInfo, error) {
	info := DeviceInfo{Ordinal: d}
	var err error
	if info.Name, err = d.Name(); err != nil {
		return info, err
	}
	if info.UUID, err = d.UUID(); err != nil {
		return info, err
	}
	if info.PCIBusID, err = d.PCIBusID(); err != nil {
		return info, err
	}
	if info.TotalMem, err = d.TotalMem(); err != nil {
		return info, err
	}
	ints := []struct {
		a DeviceAttribute
		p *int
	}{
		{AttrComputeCapabilityMajor, &info.CCMajor}, {AttrComputeCapabilityMinor, &info.CCMinor},
		{AttrMultiprocessorCount, &info.SMs}, {AttrL2CacheSize, &info.L2Cache},
		{AttrAsyncEngineCount, &info.AsyncEngines}, {AttrGlobalMemoryBusWidth, &info.MemBusWidth},
	}
	for _, x := range ints {
		if *x.p, err = d.Attribute(x.a); err != nil {
			return info, err
		}
	}
	ua, err := d.Attribute(AttrUnifiedAddressing)
	if err != nil {
		return info, err
	}
	mh, err := d.Attribute(AttrCanMapHostMemory)
	if err != nil {
		return info, err
	}
	info.UnifiedAddr, info.CanMapHostMem = ua != 0, mh != 0
	return info, nil
}

// String formats the summary on one line.
func (i DeviceInfo) String() string {
	return fmt.Sprintf("cuda%d %s sm_%d%d %d SMs %.1f GiB pci %s", int(i.Ordinal), i.Name, i.CCMajor, i.CCMinor, i.SMs,
		float64(i.TotalMem)/(1<<30), i.PCIBusID)
}
