package cuda

import (
	"fmt"
	"time"
	"unsafe"
)

// Ctx is the handle a Worker passes to the closures it runs: every CUDA call
// that needs the device's context is a method of Ctx. A Ctx is valid only
// inside the closure it was passed to, on the worker's thread; it must not
// be kept or handed to another goroutine.
//
// Methods that take a Stream enqueue their work on it and return before the
// work is done; completion is observed with an event (Record, then
// Worker.WaitEvent or EventQuery) or Worker.Sync. Memory that such a
// method reads or writes (a Go slice included) must stay valid and
// untouched by the host until then. Stream 0 is the legacy default stream,
// which synchronises with every blocking stream; the streams NewStream
// creates are non-blocking.
type Ctx struct {
	w *Worker
}

// DevicePtr is an address in the unified virtual address space: device
// memory from Alloc or IPCOpenMemHandle, or the device view of pinned host
// memory.
type DevicePtr uint64

// Add returns p advanced by n bytes.
func (p DevicePtr) Add(n int) DevicePtr { return p + DevicePtr(n) }

// Stream is a handle to a CUDA stream (CUstream).
type Stream uintptr

// StreamLegacy names the legacy default stream of the current context
// (CU_STREAM_LEGACY): the stream of synchronous copies such as
// cuMemcpyHtoD and of the runtime's stream 0. Streams that NewStream makes
// are non-blocking and do not wait for its work; a copy from pageable
// host memory on it may still be under way when the synchronous call has
// returned (CUDA's "API synchronization behavior").
const StreamLegacy Stream = 0x1

// Event is a handle to a CUDA event (CUevent).
type Event uintptr

// Device returns the device of the worker running the closure.
func (c *Ctx) Device() Device { return c.w.dev }

// Context returns the handle of the current context.
func (c *Ctx) Context() Context { return c.w.ctx }

// Worker returns the worker running the closure.
func (c *Ctx) Worker() *Worker { return c.w }

// Synchronize blocks the worker until all work of the context has completed
// (cuCtxSynchronize). Prefer Worker.Sync, which does not block the worker.
func (c *Ctx) Synchronize() error {
	return check("cuCtxSynchronize", Result(ccall(api.cuCtxSynchronize)))
}

// EnablePeerAccess lets this context's kernels and copies use the memory of
// the peer context directly (cuCtxEnablePeerAccess). Enabling an already
// enabled pair is not an error.
func (c *Ctx) EnablePeerAccess(peer Context) error {
	r := Result(ccall(api.cuCtxEnablePeerAccess, uintptr(peer), 0))
	if r == ErrPeerAccessAlreadyEnabled {
		return nil
	}
	return check("cuCtxEnablePeerAccess", r)
}

// DisablePeerAccess undoes EnablePeerAccess.
func (c *Ctx) DisablePeerAccess(peer Context) error {
	return check("cuCtxDisablePeerAccess", Result(ccall(api.cuCtxDisablePeerAccess, uintptr(peer))))
}

// MemInfo returns the free and total device memory in bytes.
func (c *Ctx) MemInfo() (free, total uint64, err error) {
	err = check("cuMemGetInfo_v2", Result(ccall(api.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))))
	return free, total, err
}

// Alloc allocates n > 0 bytes of device memory, aligned to at least 256
// bytes. The memory is not initialised.
func (c *Ctx) Alloc(n int) (DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuda: alloc of %d bytes: size must be positive", n)
	}
	var p DevicePtr
	if r := Result(ccall(api.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))); r != Success {
		return 0, fmt.Errorf("cuda: device %d: alloc of %d bytes: %w", int(c.w.dev), n, &Error{Func: "cuMemAlloc_v2", Code: r})
	}
	return p, nil
}

// Free frees memory from Alloc. It waits for work using the memory to end.
func (c *Ctx) Free(p DevicePtr) error {
	return check("cuMemFree_v2", Result(ccall(api.cuMemFree, uintptr(p))))
}

// HostAllocFlags are the flags of HostAlloc (CU_MEMHOSTALLOC_*).
type HostAllocFlags uint32

// HostAlloc flags.
const (
	HostAllocPortable      HostAllocFlags = 1 // pinned for every context, not only this one
	HostAllocDeviceMap     HostAllocFlags = 2 // mapped into the device address space
	HostAllocWriteCombined HostAllocFlags = 4 // write-combined: fast to write from the host, slow to read
)

// HostBuffer is page-locked (pinned) host memory from HostAlloc. The copy
// engines move it at full link speed and asynchronously, which ordinary Go
// memory does not allow.
type HostBuffer struct {
	p unsafe.Pointer
	n int
}

// Bytes returns the buffer as a byte slice. It is valid until FreeHost.
func (h *HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.p), h.n) }

// Len returns the buffer's size in bytes.
func (h *HostBuffer) Len() int { return h.n }

// Ptr returns the buffer's address as a unified address, which Copy and
// kernels accept on devices with unified addressing.
func (h *HostBuffer) Ptr() DevicePtr { return DevicePtr(uintptr(h.p)) }

// HostAlloc allocates n > 0 bytes of pinned host memory (cuMemHostAlloc).
func (c *Ctx) HostAlloc(n int, flags HostAllocFlags) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: host alloc of %d bytes: size must be positive", n)
	}
	var p unsafe.Pointer
	if r := Result(ccall(api.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), uintptr(flags))); r != Success {
		return nil, fmt.Errorf("cuda: host alloc of %d bytes: %w", n, &Error{Func: "cuMemHostAlloc", Code: r})
	}
	return &HostBuffer{p: p, n: n}, nil
}

// FreeHost frees a HostBuffer; its Bytes must not be used afterwards.
func (c *Ctx) FreeHost(h *HostBuffer) error {
	if h.p == nil {
		return fmt.Errorf("cuda: host buffer freed twice")
	}
	err := check("cuMemFreeHost", Result(ccall(api.cuMemFreeHost, uintptr(h.p))))
	h.p, h.n = nil, 0
	return err
}

// HostRegisterFlags are the flags of HostRegister (CU_MEMHOSTREGISTER_*).
type HostRegisterFlags uint32

// HostRegister flags.
const (
	HostRegisterPortable  HostRegisterFlags = 1
	HostRegisterDeviceMap HostRegisterFlags = 2
	HostRegisterReadOnly  HostRegisterFlags = 8
)

// HostRegister page-locks existing host memory, such as a shared-memory
// mapping, so that copies to and from it run at full speed and
// asynchronously (cuMemHostRegister). b should start and end on page
// boundaries. Memory of the Go heap must stay reachable until
// HostUnregister; mmapped memory is the safer choice.
func (c *Ctx) HostRegister(b []byte, flags HostRegisterFlags) error {
	if len(b) == 0 {
		return fmt.Errorf("cuda: host register of an empty buffer")
	}
	return check("cuMemHostRegister_v2", Result(ccall(api.cuMemHostRegister, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(flags))))
}

// HostUnregister undoes HostRegister for the buffer that starts at b[0].
func (c *Ctx) HostUnregister(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("cuda: host unregister of an empty buffer")
	}
	return check("cuMemHostUnregister", Result(ccall(api.cuMemHostUnregister, uintptr(unsafe.Pointer(&b[0])))))
}

// HostDevicePointer returns the device address of mapped pinned host memory
// (HostAllocDeviceMap or HostRegisterDeviceMap), which kernels can read and
// write across the bus.
func (c *Ctx) HostDevicePointer(b []byte) (DevicePtr, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("cuda: device pointer of an empty buffer")
	}
	var p DevicePtr
	err := check("cuMemHostGetDevicePointer_v2", Result(ccall(api.cuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&p)), uintptr(unsafe.Pointer(&b[0])), 0)))
	return p, err
}

// CopyHtoD enqueues a copy of src from host memory to device memory at dst.
// Pinned memory (HostBuffer, HostRegister) is copied asynchronously; other
// memory is staged by the driver and the call returns once src may be reused.
func (c *Ctx) CopyHtoD(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync_v2", Result(ccall(api.cuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), uintptr(s))))
}

// CopyDtoH enqueues a copy of len(dst) bytes from device memory at src into
// host memory. With pageable (not pinned) dst the call returns only when
// the copy is done.
func (c *Ctx) CopyDtoH(dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync_v2", Result(ccall(api.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), uintptr(s))))
}

// CopyDtoD enqueues a copy of n bytes between device addresses; with peer
// access enabled they may be on different devices.
func (c *Ctx) CopyDtoD(dst, src DevicePtr, n int, s Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoDAsync_v2", Result(ccall(api.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))))
}

// Copy enqueues a copy of n bytes between any two unified addresses (device
// memory of any device, pinned host memory); the driver infers the
// direction (cuMemcpyAsync).
func (c *Ctx) Copy(dst, src DevicePtr, n int, s Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyAsync", Result(ccall(api.cuMemcpyAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))))
}

// CopyPeer enqueues a copy of n bytes from src in context srcCtx to dst in
// context dstCtx (cuMemcpyPeerAsync). Without peer access the driver
// stages the copy through host memory.
func (c *Ctx) CopyPeer(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n int, s Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyPeerAsync", Result(ccall(api.cuMemcpyPeerAsync, uintptr(dst), uintptr(dstCtx), uintptr(src), uintptr(srcCtx), uintptr(n), uintptr(s))))
}

// Memset8 enqueues setting n bytes at p to v.
func (c *Ctx) Memset8(p DevicePtr, v byte, n int, s Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemsetD8Async", Result(ccall(api.cuMemsetD8Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s))))
}

// Memset32 enqueues setting n 32-bit words at p (4-byte aligned) to v.
func (c *Ctx) Memset32(p DevicePtr, v uint32, n int, s Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemsetD32Async", Result(ccall(api.cuMemsetD32Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s))))
}

// NewStream creates a non-blocking stream with the given priority: 0 is
// the default, and lower (negative) numbers are served first where the
// device supports priorities; out-of-range values are clamped.
func (c *Ctx) NewStream(priority int) (Stream, error) {
	var s Stream
	const nonBlocking = 1
	err := check("cuStreamCreateWithPriority", Result(ccall(api.cuStreamCreateWithPriority, uintptr(unsafe.Pointer(&s)), nonBlocking, uintptr(int64(priority)))))
	return s, err
}

// DestroyStream destroys s once its queued work has completed.
func (c *Ctx) DestroyStream(s Stream) error {
	return check("cuStreamDestroy_v2", Result(ccall(api.cuStreamDestroy, uintptr(s))))
}

// StreamSynchronize blocks the worker until s has drained. Prefer
// Worker.Sync, which does not block the worker.
func (c *Ctx) StreamSynchronize(s Stream) error {
	return check("cuStreamSynchronize", Result(ccall(api.cuStreamSynchronize, uintptr(s))))
}

// StreamWriteValue32 enqueues on s a 32-bit store of v at p (device
// memory, or mapped pinned host memory's HostDevicePointer), made once
// the work queued on s before it has completed (cuStreamWriteValue32, a
// stream memory operation: no kernel). A host thread that polls a mapped
// word so learns of the stream's progress without a driver call.
func (c *Ctx) StreamWriteValue32(s Stream, p DevicePtr, v uint32) error {
	if api.cuStreamWriteValue32 == 0 {
		return fmt.Errorf("cuda: the driver has no cuStreamWriteValue32: %w", ErrNotSupported)
	}
	return check("cuStreamWriteValue32", Result(ccall(api.cuStreamWriteValue32, uintptr(s), uintptr(p), uintptr(v), 0)))
}

// StreamQuery reports whether all work queued on s has completed.
func (c *Ctx) StreamQuery(s Stream) (bool, error) {
	r := Result(ccall(api.cuStreamQuery, uintptr(s)))
	if r == ErrNotReady {
		return false, nil
	}
	return r == Success, check("cuStreamQuery", r)
}

// StreamWaitEvent makes work queued on s after this call wait until the work
// recorded in ev has completed; ev may belong to another device's context.
func (c *Ctx) StreamWaitEvent(s Stream, ev Event) error {
	return check("cuStreamWaitEvent", Result(ccall(api.cuStreamWaitEvent, uintptr(s), uintptr(ev), 0)))
}

// EventFlags are the flags of NewEvent (CU_EVENT_*).
type EventFlags uint32

// Event flags.
const (
	EventDefault       EventFlags = 0
	EventBlockingSync  EventFlags = 1 // EventSynchronize sleeps instead of spinning
	EventDisableTiming EventFlags = 2 // cheaper; Elapsed is not available
	EventInterprocess  EventFlags = 4 // may be shared with IPCGetEventHandle; needs EventDisableTiming
)

// NewEvent creates an event.
func (c *Ctx) NewEvent(flags EventFlags) (Event, error) {
	var ev Event
	err := check("cuEventCreate", Result(ccall(api.cuEventCreate, uintptr(unsafe.Pointer(&ev)), uintptr(flags))))
	return ev, err
}

// pooledEvent returns a timing-free event from the worker's pool.
func (c *Ctx) pooledEvent() (Event, error) {
	if n := len(c.w.evPool); n > 0 {
		ev := c.w.evPool[n-1]
		c.w.evPool = c.w.evPool[:n-1]
		return ev, nil
	}
	return c.NewEvent(EventDisableTiming)
}

// DestroyEvent destroys ev.
func (c *Ctx) DestroyEvent(ev Event) error {
	return check("cuEventDestroy_v2", Result(ccall(api.cuEventDestroy, uintptr(ev))))
}

// Record enqueues ev on s: ev completes when the work queued on s before it
// has completed.
func (c *Ctx) Record(ev Event, s Stream) error {
	return check("cuEventRecord", Result(ccall(api.cuEventRecord, uintptr(ev), uintptr(s))))
}

// EventSynchronize blocks the worker until ev has completed. Prefer
// Worker.WaitEvent, which does not block the worker.
func (c *Ctx) EventSynchronize(ev Event) error {
	return check("cuEventSynchronize", Result(ccall(api.cuEventSynchronize, uintptr(ev))))
}

// EventQuery reports whether the work recorded in ev has completed.
func (c *Ctx) EventQuery(ev Event) (bool, error) {
	r := Result(ccall(api.cuEventQuery, uintptr(ev)))
	if r == ErrNotReady {
		return false, nil
	}
	return r == Success, check("cuEventQuery", r)
}

// Elapsed returns the GPU time between two completed events that were
// created with timing (resolution about half a microsecond).
func (c *Ctx) Elapsed(start, end Event) (time.Duration, error) {
	var ms float32
	if err := check("cuEventElapsedTime", Result(ccall(api.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end)))); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * 1e6), nil
}

// IPCMemHandle names device memory for other processes on the same host
// (CUipcMemHandle). It is plain bytes, to be sent through bootstrap.
type IPCMemHandle [64]byte

// IPCEventHandle names an interprocess event for other processes on the
// same host (CUipcEventHandle).
type IPCEventHandle [64]byte

// IPCGetMemHandle returns a handle to the allocation that p (from Alloc)
// starts. Another process opens it with IPCOpenMemHandle.
func (c *Ctx) IPCGetMemHandle(p DevicePtr) (IPCMemHandle, error) {
	var h IPCMemHandle
	err := check("cuIpcGetMemHandle", Result(ccall(api.cuIpcGetMemHandle, uintptr(unsafe.Pointer(&h)), uintptr(p))))
	return h, err
}

// IPCOpenMemHandle maps memory of another process into this context and
// returns its address here; peer access to the owning device is enabled
// as needed. A process cannot open its own handles.
func (c *Ctx) IPCOpenMemHandle(h IPCMemHandle) (DevicePtr, error) {
	var p DevicePtr
	const lazyEnablePeerAccess = 1
	err := check("cuIpcOpenMemHandle_v2", cuIpcOpenMemHandle(&p, ipcHandle{h}, lazyEnablePeerAccess))
	return p, err
}

// IPCCloseMemHandle unmaps memory opened with IPCOpenMemHandle.
func (c *Ctx) IPCCloseMemHandle(p DevicePtr) error {
	return check("cuIpcCloseMemHandle", Result(ccall(api.cuIpcCloseMemHandle, uintptr(p))))
}

// IPCGetEventHandle returns a handle to ev, which must have been created
// with EventInterprocess|EventDisableTiming.
func (c *Ctx) IPCGetEventHandle(ev Event) (IPCEventHandle, error) {
	var h IPCEventHandle
	err := check("cuIpcGetEventHandle", Result(ccall(api.cuIpcGetEventHandle, uintptr(unsafe.Pointer(&h)), uintptr(ev))))
	return h, err
}

// IPCOpenEventHandle opens an event of another process. The result may be
// recorded, waited for and queried like a local event, and is released with
// DestroyEvent.
func (c *Ctx) IPCOpenEventHandle(h IPCEventHandle) (Event, error) {
	var ev Event
	err := check("cuIpcOpenEventHandle", cuIpcOpenEventHandle(&ev, ipcHandle{h}))
	return ev, err
}
