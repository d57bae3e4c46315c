package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Module is a handle to a loaded module of kernels (CUmodule).
type Module uintptr

// Function is a handle to a kernel of a loaded module (CUfunction).
type Function uintptr

// Dim3 is a grid or block shape. Zero sizes count as 1.
type Dim3 struct{ X, Y, Z int }

// D1 returns the one-dimensional shape n.
func D1(n int) Dim3 { return Dim3{X: n, Y: 1, Z: 1} }

// FuncAttribute is a CUfunction_attribute, for Ctx.FuncAttribute.
type FuncAttribute int32

// Function attributes, with cuda.h's values.
const (
	FuncMaxThreadsPerBlock FuncAttribute = 0
	FuncSharedSizeBytes    FuncAttribute = 1
	FuncLocalSizeBytes     FuncAttribute = 3 // local memory per thread: non-zero means spills or stack arrays
	FuncNumRegs            FuncAttribute = 4
	FuncPTXVersion         FuncAttribute = 5
	FuncBinaryVersion      FuncAttribute = 6
)

// maxKernelArgs bounds the arguments of Launch.
const maxKernelArgs = 32

// launchParams is the worker's scratch for cuLaunchKernel: the argument
// values and the array of pointers to them. It lives in the Worker, on the
// heap, so that a launch allocates nothing.
type launchParams struct {
	vals [maxKernelArgs]uint64
	ptrs [maxKernelArgs]uintptr
}

// LoadModule loads a module from a PTX text, a cubin or a fatbin image
// (cuModuleLoadDataEx); PTX is compiled for the device here, by the driver.
// A compilation error comes back with the compiler's log.
func (c *Ctx) LoadModule(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cuda: load module: empty image")
	}
	if image[len(image)-1] != 0 {
		// PTX is read as a NUL-terminated string.
		image = append(image[:len(image):len(image)], 0)
	}
	const (
		jitErrorLogBuffer     = 5
		jitErrorLogBufferSize = 6
	)
	logBuf := make([]byte, 8192)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSize}
	vals := []uintptr{uintptr(unsafe.Pointer(&logBuf[0])), uintptr(len(logBuf))}
	var m Module
	r := Result(ccall(api.cuModuleLoadDataEx, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&image[0])),
		uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0]))))
	runtime.KeepAlive(logBuf)
	if r != Success {
		err := fmt.Errorf("cuda: device %d: load module: %w", int(c.w.dev), &Error{Func: "cuModuleLoadDataEx", Code: r})
		if log := bytesString(logBuf); log != "" {
			err = fmt.Errorf("%w\n%s", err, log)
		}
		return 0, err
	}
	return m, nil
}

// UnloadModule unloads m; its functions become invalid.
func (c *Ctx) UnloadModule(m Module) error {
	return check("cuModuleUnload", Result(ccall(api.cuModuleUnload, uintptr(m))))
}

// Function returns the kernel named name (its extern "C" name) in m.
func (c *Ctx) Function(m Module, name string) (Function, error) {
	var f Function
	cname := cString(name)
	if r := Result(ccall(api.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))); r != Success {
		return 0, fmt.Errorf("cuda: kernel %q: %w", name, &Error{Func: "cuModuleGetFunction", Code: r})
	}
	return f, nil
}

// FuncAttribute returns an attribute of a kernel.
func (c *Ctx) FuncAttribute(f Function, a FuncAttribute) (int, error) {
	var v int32
	err := check("cuFuncGetAttribute", Result(ccall(api.cuFuncGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(f))))
	return int(v), err
}

// Launch enqueues kernel f on s with the given grid and block shapes and
// sharedMem bytes of dynamic shared memory. Each argument is one kernel
// parameter of at most 8 bytes, passed as its low-order bytes: a pointer or
// size_t as uint64(p), a 32-bit integer as uint64(uint32(v)), a float32 as
// uint64(math.Float32bits(v)) (ArgF32 does it). At most 32 arguments;
// parameters larger than 8 bytes (structs) are not supported.
func (c *Ctx) Launch(f Function, grid, block Dim3, sharedMem int, s Stream, args ...uint64) error {
	if len(args) > maxKernelArgs {
		return fmt.Errorf("cuda: launch with %d arguments: at most %d", len(args), maxKernelArgs)
	}
	p := &c.w.params
	var argv uintptr
	if len(args) > 0 {
		for i, a := range args {
			p.vals[i] = a
			p.ptrs[i] = uintptr(unsafe.Pointer(&p.vals[i]))
		}
		argv = uintptr(unsafe.Pointer(&p.ptrs[0]))
	}
	r := Result(ccall(api.cuLaunchKernel, uintptr(f),
		uintptr(dim(grid.X)), uintptr(dim(grid.Y)), uintptr(dim(grid.Z)),
		uintptr(dim(block.X)), uintptr(dim(block.Y)), uintptr(dim(block.Z)),
		uintptr(sharedMem), uintptr(s), argv, 0))
	if r != Success {
		return fmt.Errorf("cuda: launch grid %v block %v: %w", grid, block, &Error{Func: "cuLaunchKernel", Code: r})
	}
	return nil
}

func dim(n int) uint32 {
	if n <= 0 {
		return 1
	}
	return uint32(n)
}

// ArgF32 packs a float32 kernel argument for Launch.
func ArgF32(v float32) uint64 { return uint64(math.Float32bits(v)) }

// ArgF64 packs a float64 kernel argument for Launch.
func ArgF64(v float64) uint64 { return math.Float64bits(v) }
