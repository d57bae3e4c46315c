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

// launchParams is the worker's scratch for cuLaunchKernel(Ex): the argument
// values and the array of pointers to them. It lives in the Worker, on the
// heap, so that a launch allocates nothing.
type launchParams struct {
	vals   [maxKernelArgs]uint64
	ptrs   [maxKernelArgs]uintptr
	config launchConfig // LaunchOverlapped's
	attr   launchAttr
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
	argv, err := c.argv(args)
	if err != nil {
		return err
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

// argv stores args in the worker's scratch and returns the address of
// the array of pointers to them that cuLaunchKernel takes (0 for none).
func (c *Ctx) argv(args []uint64) (uintptr, error) {
	if len(args) > maxKernelArgs {
		return 0, fmt.Errorf("cuda: launch with %d arguments: at most %d", len(args), maxKernelArgs)
	}
	if len(args) == 0 {
		return 0, nil
	}
	p := &c.w.params
	for i, a := range args {
		p.vals[i] = a
		p.ptrs[i] = uintptr(unsafe.Pointer(&p.vals[i]))
	}
	return uintptr(unsafe.Pointer(&p.ptrs[0])), nil
}

// launchConfig is CUlaunchConfig, and launchAttr CUlaunchAttribute (an
// id, padding to 8 bytes, a union of 64), as cuLaunchKernelEx takes them.
type launchConfig struct {
	grid, block [3]uint32
	sharedMem   uint32
	_           uint32
	stream      uintptr
	attrs       uintptr
	numAttrs    uint32
	_           uint32
}

type launchAttr struct {
	id    uint32
	_     uint32
	value [64]byte
}

// attrProgrammaticStreamSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const attrProgrammaticStreamSerialization = 6

// CanOverlap reports whether LaunchOverlapped can run here: the driver
// has cuLaunchKernelEx.
func CanOverlap() bool { return api.cuLaunchKernelEx != 0 }

// LaunchOverlapped is Launch with programmatic stream serialization
// (cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION):
// the GPU may start f's blocks before the kernel ahead of it on s has
// ended, once every block of that kernel has executed
// griddepcontrol.launch_dependents. f must therefore begin with
// griddepcontrol.wait (cudaGridDependencySynchronize) before it touches
// anything the kernel ahead writes: the embedded fused kernels do
// (KernelsOverlap). In a stream being captured, the launch becomes a
// graph node with a programmatic edge. It fails where CanOverlap is false.
func (c *Ctx) LaunchOverlapped(f Function, grid, block Dim3, sharedMem int, s Stream, args ...uint64) error {
	if !CanOverlap() {
		return fmt.Errorf("cuda: launch overlapped: the driver has no cuLaunchKernelEx")
	}
	argv, err := c.argv(args)
	if err != nil {
		return err
	}
	p := &c.w.params
	p.attr = launchAttr{id: attrProgrammaticStreamSerialization}
	p.attr.value[0] = 1 // programmaticStreamSerializationAllowed
	p.config = launchConfig{
		grid:      [3]uint32{dim(grid.X), dim(grid.Y), dim(grid.Z)},
		block:     [3]uint32{dim(block.X), dim(block.Y), dim(block.Z)},
		sharedMem: uint32(sharedMem), stream: uintptr(s),
		attrs: uintptr(unsafe.Pointer(&p.attr)), numAttrs: 1,
	}
	r := Result(ccall(api.cuLaunchKernelEx, uintptr(unsafe.Pointer(&p.config)), uintptr(f), argv, 0))
	if r != Success {
		return fmt.Errorf("cuda: launch overlapped, grid %v block %v: %w", grid, block, &Error{Func: "cuLaunchKernelEx", Code: r})
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
