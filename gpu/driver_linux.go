//go:build linux

package gpu

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/braid-ccl/braid/cuda"
	"github.com/ebitengine/purego"
)

// The two driver functions this package needs beyond package cuda, found in
// the libcuda.so.1 that package cuda loaded (dlopen of a loaded soname
// returns the same library).
var extra struct {
	once             sync.Once
	err              error
	getAddressRange  uintptr // cuMemGetAddressRange_v2
	pointerAttribute uintptr // cuPointerGetAttribute
}

func loadExtra() error {
	extra.once.Do(func() {
		if err := cuda.Init(); err != nil {
			extra.err = err
			return
		}
		var h uintptr
		var err error
		for _, n := range []string{"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "/lib/libcuda.so.1"} {
			if h, err = purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
				break
			}
		}
		if err != nil {
			extra.err = fmt.Errorf("gpu: %w: %v", cuda.ErrNoDriver, err)
			return
		}
		if extra.getAddressRange, err = purego.Dlsym(h, "cuMemGetAddressRange_v2"); err != nil {
			extra.err = fmt.Errorf("gpu: %w: no cuMemGetAddressRange_v2", cuda.ErrNoDriver)
			return
		}
		if extra.pointerAttribute, err = purego.Dlsym(h, "cuPointerGetAttribute"); err != nil {
			extra.err = fmt.Errorf("gpu: %w: no cuPointerGetAttribute", cuda.ErrNoDriver)
		}
	})
	return extra.err
}

// Pointer attributes (CUpointer_attribute).
const (
	attrBufferID      = 7
	attrDeviceOrdinal = 9
)

// addressRange returns the allocation that holds p. It must run on a worker
// (the driver needs a current context).
func addressRange(p cuda.DevicePtr) (base cuda.DevicePtr, size int, err error) {
	if err := loadExtra(); err != nil {
		return 0, 0, err
	}
	var b uint64
	var s uintptr
	r, _, _ := purego.SyscallN(extra.getAddressRange, uintptr(unsafe.Pointer(&b)), uintptr(unsafe.Pointer(&s)), uintptr(p))
	if r != 0 {
		return 0, 0, fmt.Errorf("gpu: cuMemGetAddressRange of %#x: %w", uint64(p), cuda.Result(r))
	}
	return cuda.DevicePtr(b), int(s), nil
}

// bufferID returns the driver's id of the allocation that holds p, unique
// for the life of the process.
func bufferID(p cuda.DevicePtr) (uint64, error) {
	if err := loadExtra(); err != nil {
		return 0, err
	}
	var id uint64
	r, _, _ := purego.SyscallN(extra.pointerAttribute, uintptr(unsafe.Pointer(&id)), attrBufferID, uintptr(p))
	if r != 0 {
		return 0, fmt.Errorf("gpu: buffer id of %#x: %w", uint64(p), cuda.Result(r))
	}
	return id, nil
}

// PointerDevice returns the ordinal of the GPU whose memory p points into.
func PointerDevice(p cuda.DevicePtr) (cuda.Device, error) {
	if err := loadExtra(); err != nil {
		return 0, err
	}
	var d int32
	r, _, _ := purego.SyscallN(extra.pointerAttribute, uintptr(unsafe.Pointer(&d)), attrDeviceOrdinal, uintptr(p))
	if r != 0 {
		return 0, fmt.Errorf("gpu: device of pointer %#x: %w", uint64(p), cuda.Result(r))
	}
	return cuda.Device(d), nil
}
