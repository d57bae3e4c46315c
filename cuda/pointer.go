package cuda

import (
	"fmt"
	"unsafe"
)

// Pointer attributes (CUpointer_attribute).
const (
	attrMemoryType    = 2
	attrBufferID      = 7
	attrDeviceOrdinal = 9
)

// AddressRange returns the allocation that holds p: its base and size
// (cuMemGetAddressRange). It needs a current context: call it from a
// worker's closure.
func AddressRange(p DevicePtr) (base DevicePtr, size int, err error) {
	if err := Init(); err != nil {
		return 0, 0, err
	}
	var b uint64
	var s uintptr
	if err := check("cuMemGetAddressRange", Result(ccall(api.cuMemGetAddressRange, uintptr(unsafe.Pointer(&b)), uintptr(unsafe.Pointer(&s)), uintptr(p)))); err != nil {
		return 0, 0, fmt.Errorf("cuda: the allocation of %#x: %w", uint64(p), err)
	}
	return DevicePtr(b), int(s), nil
}

// BufferID returns the driver's id of the allocation that holds p, unique
// for the life of the process (an allocation freed and made again at the
// same address gets a new one).
func BufferID(p DevicePtr) (uint64, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var id uint64
	if err := check("cuPointerGetAttribute", Result(ccall(api.cuPointerGetAttribute, uintptr(unsafe.Pointer(&id)), attrBufferID, uintptr(p)))); err != nil {
		return 0, fmt.Errorf("cuda: buffer id of %#x: %w", uint64(p), err)
	}
	return id, nil
}

// PointerDevice returns the ordinal of the GPU whose memory p points into.
func PointerDevice(p DevicePtr) (Device, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var d int32
	if err := check("cuPointerGetAttribute", Result(ccall(api.cuPointerGetAttribute, uintptr(unsafe.Pointer(&d)), attrDeviceOrdinal, uintptr(p)))); err != nil {
		return 0, fmt.Errorf("cuda: device of pointer %#x: %w", uint64(p), err)
	}
	return Device(d), nil
}

// MemoryType is where the memory that a pointer points into lives
// (CUmemorytype).
type MemoryType uint32

// Memory types.
const (
	MemoryHost   MemoryType = 1 // page-locked host memory known to CUDA
	MemoryDevice MemoryType = 2 // GPU memory (cuMemAlloc, cudaMalloc, managed memory)
	MemoryArray  MemoryType = 3
)

// PointerMemoryType returns the type of the memory p points into. Host
// memory that CUDA does not know (malloc's) is an error or, on some
// drivers, type 0.
func PointerMemoryType(p DevicePtr) (MemoryType, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var t uint32
	if err := check("cuPointerGetAttribute", Result(ccall(api.cuPointerGetAttribute, uintptr(unsafe.Pointer(&t)), attrMemoryType, uintptr(p)))); err != nil {
		return 0, fmt.Errorf("cuda: memory type of %#x: %w", uint64(p), err)
	}
	return MemoryType(t), nil
}
