package cuda

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// driverLibs are the names under which the driver library is looked for,
// in order: the loader's search path, then the places the NVIDIA container
// runtime and distributions put it; BRAID_CUDA_LIB, if set, names the only
// one (a path that does not load is an error, not a fall back to another
// driver).
func driverLibs() []string {
	names := []string{"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1"}
	if p := os.Getenv("BRAID_CUDA_LIB"); p != "" {
		return []string{p}
	}
	return names
}

// api holds the addresses of the driver functions this package calls.
// Versioned names (cuMemAlloc_v2) are the ones cuda.h maps the plain names to;
// the plain ones are the legacy-default-stream variants, never the per-thread
// (_ptsz) ones, since every call here names its stream.
var api struct {
	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString uintptr

	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute uintptr
	cuDeviceTotalMem, cuDeviceGetPCIBusId, cuDeviceCanAccessPeer         uintptr
	cuDeviceGetP2PAttribute, cuDeviceGetUuid                             uintptr

	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent uintptr
	cuCtxSynchronize, cuCtxEnablePeerAccess, cuCtxDisablePeerAccess      uintptr

	cuMemAlloc, cuMemFree, cuMemGetInfo, cuMemHostAlloc, cuMemFreeHost uintptr
	cuMemHostRegister, cuMemHostUnregister, cuMemHostGetDevicePointer  uintptr

	cuMemcpyAsync, cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync, cuMemcpyPeerAsync uintptr
	cuMemsetD8Async, cuMemsetD32Async                                                         uintptr

	cuStreamCreate, cuStreamCreateWithPriority, cuStreamDestroy, cuStreamSynchronize uintptr
	cuStreamQuery, cuStreamWaitEvent                                                 uintptr

	cuEventCreate, cuEventDestroy, cuEventRecord, cuEventSynchronize, cuEventQuery, cuEventElapsedTime uintptr

	cuIpcGetMemHandle, cuIpcCloseMemHandle, cuIpcGetEventHandle uintptr

	cuMemGetAddressRange, cuPointerGetAttribute uintptr

	cuModuleLoadDataEx, cuModuleUnload, cuModuleGetFunction, cuLaunchKernel, cuFuncGetAttribute uintptr

	// CUDA graphs (graph.go): optional, 0 where the driver lacks them.
	cuStreamBeginCapture, cuStreamEndCapture, cuStreamIsCapturing                  uintptr
	cuGraphInstantiateWithFlags, cuGraphLaunch, cuGraphDestroy, cuGraphExecDestroy uintptr
	cuGraphGetNodes, cuGraphNodeGetType                                            uintptr

	// Stream memory operations: optional, 0 where the driver lacks them.
	cuStreamWriteValue32 uintptr

	// Launches with attributes (LaunchOverlapped): optional, 0 where the
	// driver lacks it (before CUDA 11.8).
	cuLaunchKernelEx uintptr
}

// The two IPC functions that take a 64-byte handle by value go through
// purego.RegisterFunc, which lays structs out by the platform's C ABI
// (on the stack on amd64, by reference on arm64).
var (
	cuIpcOpenMemHandle   func(pdptr *DevicePtr, h ipcHandle, flags uint32) Result
	cuIpcOpenEventHandle func(pev *Event, h ipcHandle) Result
)

// ipcHandle is the C layout of CUipcMemHandle and CUipcEventHandle:
// struct { char reserved[64]; }.
type ipcHandle struct {
	Reserved [64]byte
}

// cuSym is a function of api and the names to try for it, the first found
// wins.
type cuSym struct {
	p     *uintptr
	names []string
}

// find sets *s.p to the first of s.names that library h exports, and
// reports whether one was found.
func (s cuSym) find(h uintptr) bool {
	for _, n := range s.names {
		if *s.p = symbol(h, n); *s.p != 0 {
			return true
		}
	}
	return false
}

// driverSymbols lists every function of api that the package needs.
func driverSymbols() []cuSym {
	type s = cuSym
	return []s{
		{&api.cuInit, []string{"cuInit"}},
		{&api.cuDriverGetVersion, []string{"cuDriverGetVersion"}},
		{&api.cuGetErrorName, []string{"cuGetErrorName"}},
		{&api.cuGetErrorString, []string{"cuGetErrorString"}},
		{&api.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&api.cuDeviceGet, []string{"cuDeviceGet"}},
		{&api.cuDeviceGetName, []string{"cuDeviceGetName"}},
		{&api.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&api.cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
		{&api.cuDeviceGetPCIBusId, []string{"cuDeviceGetPCIBusId"}},
		{&api.cuDeviceCanAccessPeer, []string{"cuDeviceCanAccessPeer"}},
		{&api.cuDeviceGetP2PAttribute, []string{"cuDeviceGetP2PAttribute"}},
		{&api.cuDeviceGetUuid, []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}},
		{&api.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		{&api.cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&api.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&api.cuCtxSynchronize, []string{"cuCtxSynchronize"}},
		{&api.cuCtxEnablePeerAccess, []string{"cuCtxEnablePeerAccess"}},
		{&api.cuCtxDisablePeerAccess, []string{"cuCtxDisablePeerAccess"}},
		{&api.cuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&api.cuMemFree, []string{"cuMemFree_v2"}},
		{&api.cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
		{&api.cuMemHostAlloc, []string{"cuMemHostAlloc"}},
		{&api.cuMemFreeHost, []string{"cuMemFreeHost"}},
		{&api.cuMemHostRegister, []string{"cuMemHostRegister_v2", "cuMemHostRegister"}},
		{&api.cuMemHostUnregister, []string{"cuMemHostUnregister"}},
		{&api.cuMemHostGetDevicePointer, []string{"cuMemHostGetDevicePointer_v2"}},
		{&api.cuMemcpyAsync, []string{"cuMemcpyAsync"}},
		{&api.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&api.cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
		{&api.cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
		{&api.cuMemcpyPeerAsync, []string{"cuMemcpyPeerAsync"}},
		{&api.cuMemsetD8Async, []string{"cuMemsetD8Async"}},
		{&api.cuMemsetD32Async, []string{"cuMemsetD32Async"}},
		{&api.cuStreamCreate, []string{"cuStreamCreate"}},
		{&api.cuStreamCreateWithPriority, []string{"cuStreamCreateWithPriority"}},
		{&api.cuStreamDestroy, []string{"cuStreamDestroy_v2", "cuStreamDestroy"}},
		{&api.cuStreamSynchronize, []string{"cuStreamSynchronize"}},
		{&api.cuStreamQuery, []string{"cuStreamQuery"}},
		{&api.cuStreamWaitEvent, []string{"cuStreamWaitEvent"}},
		{&api.cuEventCreate, []string{"cuEventCreate"}},
		{&api.cuEventDestroy, []string{"cuEventDestroy_v2", "cuEventDestroy"}},
		{&api.cuEventRecord, []string{"cuEventRecord"}},
		{&api.cuEventSynchronize, []string{"cuEventSynchronize"}},
		{&api.cuEventQuery, []string{"cuEventQuery"}},
		{&api.cuEventElapsedTime, []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}},
		{&api.cuIpcGetMemHandle, []string{"cuIpcGetMemHandle"}},
		{&api.cuIpcCloseMemHandle, []string{"cuIpcCloseMemHandle"}},
		{&api.cuIpcGetEventHandle, []string{"cuIpcGetEventHandle"}},
		{&api.cuMemGetAddressRange, []string{"cuMemGetAddressRange_v2"}},
		{&api.cuPointerGetAttribute, []string{"cuPointerGetAttribute"}},
		{&api.cuModuleLoadDataEx, []string{"cuModuleLoadDataEx"}},
		{&api.cuModuleUnload, []string{"cuModuleUnload"}},
		{&api.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&api.cuLaunchKernel, []string{"cuLaunchKernel"}},
		{&api.cuFuncGetAttribute, []string{"cuFuncGetAttribute"}},
	}
}

// optionalSymbols lists the functions of api that a driver may lack
// without making the package unusable: their callers report the absence
// (graph.go). Names as in driverSymbols.
func optionalSymbols() []cuSym {
	type s = cuSym
	return []s{
		{&api.cuStreamBeginCapture, []string{"cuStreamBeginCapture_v2"}},
		{&api.cuStreamEndCapture, []string{"cuStreamEndCapture"}},
		{&api.cuStreamIsCapturing, []string{"cuStreamIsCapturing"}},
		{&api.cuGraphInstantiateWithFlags, []string{"cuGraphInstantiateWithFlags"}},
		{&api.cuGraphLaunch, []string{"cuGraphLaunch"}},
		{&api.cuGraphDestroy, []string{"cuGraphDestroy"}},
		{&api.cuGraphExecDestroy, []string{"cuGraphExecDestroy"}},
		{&api.cuGraphGetNodes, []string{"cuGraphGetNodes"}},
		{&api.cuGraphNodeGetType, []string{"cuGraphNodeGetType"}},
		{&api.cuStreamWriteValue32, []string{"cuStreamWriteValue32_v2", "cuStreamWriteValue32"}},
		{&api.cuLaunchKernelEx, []string{"cuLaunchKernelEx"}},
	}
}

var driver struct {
	once    sync.Once
	err     error
	lib     uintptr
	version int
}

// Init loads the CUDA driver library and initialises it (cuInit). It is
// called by every function of this package that needs the driver, runs once,
// and returns the same result every time. Without a driver, or without a
// device, the error wraps ErrNoDriver.
func Init() error {
	driver.once.Do(func() { driver.err = loadDriver() })
	return driver.err
}

// Available reports whether a CUDA driver and at least one device are usable.
func Available() bool { return Init() == nil }

func loadDriver() error {
	h, err := openLib(driverLibs())
	if err != nil && os.Getenv("BRAID_CUDA_LIB") != "" {
		return fmt.Errorf("%w: BRAID_CUDA_LIB: %v", ErrNoDriver, err)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	driver.lib = h
	for _, s := range driverSymbols() {
		if !s.find(h) {
			return fmt.Errorf("%w: libcuda.so.1 has no %s (driver too old)", ErrNoDriver, s.names[0])
		}
	}
	for _, s := range optionalSymbols() {
		s.find(h) // its callers report the absence
	}
	openMem, openEv := symbol(h, "cuIpcOpenMemHandle_v2"), symbol(h, "cuIpcOpenEventHandle")
	if openMem == 0 {
		openMem = symbol(h, "cuIpcOpenMemHandle")
	}
	if openMem == 0 || openEv == 0 {
		return fmt.Errorf("%w: libcuda.so.1 has no cuIpcOpenMemHandle or cuIpcOpenEventHandle (driver too old)", ErrNoDriver)
	}
	registerFunc(&cuIpcOpenMemHandle, openMem)
	registerFunc(&cuIpcOpenEventHandle, openEv)
	if r := Result(ccall(api.cuInit, 0)); r != Success {
		return fmt.Errorf("%w: %w", ErrNoDriver, &Error{Func: "cuInit", Code: r})
	}
	var v int32
	if r := Result(ccall(api.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); r != Success {
		return fmt.Errorf("%w: %w", ErrNoDriver, &Error{Func: "cuDriverGetVersion", Code: r})
	}
	driver.version = int(v)
	return nil
}

// DriverVersion returns the CUDA version the driver implements, as
// 1000*major + 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	return driver.version, nil
}

// resultText returns the driver's name and description of r, or empty
// strings if the driver is not loaded or does not know r.
func resultText(r Result) (name, text string) {
	if api.cuGetErrorName == 0 {
		return "", ""
	}
	var p uintptr
	if ccall(api.cuGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&p))) == 0 {
		name = goString(p)
	}
	p = 0
	if ccall(api.cuGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&p))) == 0 {
		text = goString(p)
	}
	return name, text
}

// goString copies the NUL-terminated C string at p (not Go memory) into a Go
// string; p = 0 gives "".
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// cString returns s as a NUL-terminated byte slice for a C call.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// bytesString returns the bytes of b before the first NUL.
func bytesString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
