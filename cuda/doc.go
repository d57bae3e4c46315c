// Package cuda is Braid's thin binding to the CUDA driver API and to NVML,
// loaded at run time (libcuda.so.1, libnvidia-ml.so.1) with purego: no cgo
// and no CUDA toolkit at build time, so one binary serves machines with and
// without GPUs. Without a driver every function returns an error wrapping
// ErrNoDriver ("unsupported: no CUDA driver") and nothing else is affected.
//
// # Threads and workers
//
// A CUDA context is current per OS thread, and Go moves goroutines between
// threads. The package therefore reaches the driver through a Worker: one
// goroutine per device, locked to its OS thread, that holds the device's
// primary context current and runs closures sent to it with Do (wait for
// the result) or Go (do not wait). Every call that needs a context is a
// method of the *Ctx the closure receives, so CUDA work cannot run on the
// wrong thread by accident. Between closures the worker polls the events
// that WaitEvent and Sync wait for: callers wait for the GPU without
// holding the worker. Device queries (Device.Name, Device.Attribute,
// Device.CanAccessPeer, DeviceCount) need no context and work from any
// goroutine.
//
// Handles (DevicePtr, Stream, Event, Context, Module, Function) are plain
// values that may be passed between goroutines and workers; only the calls
// that use them are confined to a worker.
//
// # What is covered
//
// Devices and their attributes; primary contexts; device and pinned host
// memory (HostAlloc, HostRegister); asynchronous copies in every direction,
// between peers (CopyPeer) and on unified addresses (Copy); memset; streams
// with priorities; events (record, query, wait, elapsed time, cross-device
// waits); peer access; CUDA IPC for memory and events, so that processes on
// one host share device buffers; module loading and kernel launch; CUDA
// graphs (stream capture, instantiation, launch: graph.go); and
// Braid's reduction kernels (Reduce, Divide): sum, prod, min, max and avg
// for the floating-point types, and sum, prod, min, max and the bitwise
// operators for the integer types, with the same bits as the host kernels
// of internal/reduce. The same module holds the fused kernels, whose
// layout, arguments and choice package gpu/fused owns: this package loads
// them and finds them by name (Ctx.Kernel), and knows no collective.
// The kernels are CUDA C (kernels/reduce.cu), compiled by kernels/gen.sh to
// PTX and to an sm_90 cubin (H100, H200: no compilation at load), gzipped
// and embedded. BRAID_CUDA_KERNELS names a directory of gen.sh's output to
// load instead.
//
// DiscoverGPUTopology asks NVML how the GPUs of the host are linked: the
// NVLinks of each GPU and where they lead (another GPU or an NVSwitch), and
// for each pair of GPUs the number of NVLinks between them, the
// peer-to-peer statuses and their common PCI ancestor.
//
// # Example
//
//	w, err := cuda.NewWorker(0, cuda.WorkerOptions{})
//	if err != nil {
//		return err // errors.Is(err, cuda.ErrNoDriver) on a machine without GPUs
//	}
//	defer w.Close()
//	var s cuda.Stream
//	var a, b cuda.DevicePtr
//	err = w.Do(ctx, func(c *cuda.Ctx) (err error) {
//		if s, err = c.NewStream(0); err != nil {
//			return err
//		}
//		if a, err = c.Alloc(len(x)); err != nil {
//			return err
//		}
//		if b, err = c.Alloc(len(y)); err != nil {
//			return err
//		}
//		if err = c.CopyHtoD(a, x, s); err != nil {
//			return err
//		}
//		if err = c.CopyHtoD(b, y, s); err != nil {
//			return err
//		}
//		return c.Reduce(s, cuda.Reduction{DType: dtype.Float32, Op: dtype.Sum,
//			Dst: a, A: a, B: b, Count: len(x) / 4})
//	})
//	...
//	err = w.Sync(ctx, s) // the sum is in a
package cuda
