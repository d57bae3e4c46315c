//go:build cgo

package main

// The device entry points of braid.h: the collectives on GPU memory
// (braid_device_allreduce and the others, braid_device_synchronize). A
// communicator's device calls run on one braid.DeviceComm, stream-ordered,
// made on its first device call on the GPU that holds that call's buffers
// and closed by braid_comm_destroy. A call with a stream is ordered on it
// with two events: the DeviceComm's stream waits for the work queued on
// the caller's stream before the call, and the caller's stream for the
// call. A call without one follows the work queued on the legacy default
// stream (a synchronous cudaMemcpy from pageable memory returns before
// its data has landed, and Braid's streams do not wait for that stream by
// themselves) and waits for its result (braid.DeviceComm's Synchronize).

/*
#include <stdint.h>
#include <stddef.h>
#include "braid.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/cuda"
)

// The collectives of braidgo_device, numbered as api.go's wrappers pass
// them.
const (
	devAllreduce = iota
	devBcast
	devReduce
	devAllgather
	devReduceScatter
	devGather
	devScatter
	devAlltoall
)

var devNames = [...]string{"allreduce", "bcast", "reduce", "allgather", "reducescatter", "gather", "scatter", "alltoall"}

// streamPerThread is CUDA's per-thread default stream handle
// (CU_STREAM_PER_THREAD, cudaStreamPerThread), which names the default
// stream of the thread that uses it: Braid's worker thread, not the
// caller's.
const streamPerThread = 0x2

// A devState is the device side of a communicator.
type devState struct {
	mu     sync.Mutex // held through a device call
	d      *braid.DeviceComm
	gpu    cuda.Device
	before cuda.Event // recorded on the caller's stream; the DeviceComm's waits for it
	after  cuda.Event // recorded on the DeviceComm's stream; the caller's waits for it
	closed bool
}

// devices maps a communicator's handle to its device state, made on its
// first device call.
var devices struct {
	mu sync.Mutex
	m  map[uint64]*devState
}

// deviceState returns the device state of handle h, making an empty one
// unless only is set (then nil where there is none).
func deviceState(h uint64, only bool) *devState {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	s := devices.m[h]
	if s == nil && !only {
		if devices.m == nil {
			devices.m = map[uint64]*devState{}
		}
		s = &devState{}
		devices.m[h] = s
	}
	return s
}

// closeDevice closes the device state of handle h, if any, after its
// calls have run: braid_comm_destroy calls it before it closes the
// communicator.
func closeDevice(h uint64) error {
	devices.mu.Lock()
	s := devices.m[h]
	delete(devices.m, h)
	devices.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.d == nil {
		return nil
	}
	err := s.d.Synchronize(context.Background())
	s.d.Worker().Do(context.Background(), func(cc *cuda.Ctx) error {
		return errors.Join(cc.DestroyEvent(s.before), cc.DestroyEvent(s.after))
	})
	return errors.Join(err, s.d.Close())
}

// devErr is an error of kind k of a device call.
func devErr(c *braid.Comm, k braid.ErrorKind, call string, err error) error {
	return &braid.Error{Kind: k, Rank: c.Rank(), Call: call, Peer: -1, Err: err}
}

// pointerDevice returns the GPU that holds p, what names the buffer for
// the error: Unsupported without a CUDA driver or GPU, InvalidArgument
// where p is not device memory.
func pointerDevice(c *braid.Comm, call, what string, p cuda.DevicePtr) (cuda.Device, error) {
	t, err := cuda.PointerMemoryType(p)
	if errors.Is(err, cuda.ErrNoDriver) {
		return 0, devErr(c, braid.Unsupported, call, fmt.Errorf("device buffers need a CUDA driver and a GPU: %w", err))
	}
	if err != nil {
		return 0, devErr(c, braid.InvalidArgument, call, fmt.Errorf("%s %#x is not memory of a GPU: %w", what, uint64(p), err))
	}
	if t != cuda.MemoryDevice {
		return 0, devErr(c, braid.InvalidArgument, call, fmt.Errorf("%s %#x is not memory of a GPU (CUDA memory type %d)", what, uint64(p), t))
	}
	dev, err := cuda.PointerDevice(p)
	if err != nil {
		return 0, devErr(c, braid.InvalidArgument, call, fmt.Errorf("%s %#x is not memory of a GPU: %w", what, uint64(p), err))
	}
	return dev, nil
}

// comm returns the DeviceComm of s, making it on GPU dev on first use
// (collectively: every rank's first device call on the communicator makes
// it). s.mu is held.
func (s *devState) comm(ctx context.Context, c *braid.Comm, call string, dev cuda.Device) (*braid.DeviceComm, error) {
	if s.closed {
		return nil, devErr(c, braid.Aborted, call, errors.New("communicator is destroyed"))
	}
	if s.d != nil {
		if dev != s.gpu {
			return nil, devErr(c, braid.InvalidArgument, call, fmt.Errorf("the buffers are on GPU %d, and this communicator's device calls run on GPU %d (its first device call's)", dev, s.gpu))
		}
		return s.d, nil
	}
	d, err := c.NewDeviceComm(ctx, dev, &braid.DeviceOptions{StreamOrdered: true})
	if err != nil {
		return nil, err
	}
	err = d.Worker().Do(ctx, func(cc *cuda.Ctx) (err error) {
		if s.before, err = cc.NewEvent(cuda.EventDisableTiming); err != nil {
			return err
		}
		s.after, err = cc.NewEvent(cuda.EventDisableTiming)
		return err
	})
	if err != nil {
		d.Close()
		return nil, devErr(c, braid.Internal, call, fmt.Errorf("events on GPU %d: %w", dev, err))
	}
	s.d, s.gpu = d, dev
	return d, nil
}

// devBuffer is a device buffer of a call: count elements of dtype at p.
func devBuffer(c *braid.Comm, call, what string, p unsafe.Pointer, count C.size_t, dtype C.int) (braid.Device, error) {
	d := braid.DType(dtype)
	if !d.Valid() {
		return braid.Device{}, argErr(c, call, "dtype %d is not a braid_dtype", int(dtype))
	}
	if uint64(count) > math.MaxInt/uint64(d.Size()) {
		return braid.Device{}, argErr(c, call, "%s count %d × %d bytes overflows", what, uint64(count), d.Size())
	}
	return braid.Device{Ptr: cuda.DevicePtr(uintptr(p)), Count: int(count), Type: d}, nil
}

//export braidgo_device
func braidgo_device(coll C.int, h C.braid_comm, send, recv unsafe.Pointer, count C.size_t, dtype, o, root C.int, stream unsafe.Pointer, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	name := devNames[coll]
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return fail(e, err)
	}
	return fail(e, deviceCall(c, uint64(h), int(coll), send, recv, count, dtype, o, int(root), uintptr(stream)))
}

// deviceCall checks a device call's arguments and runs it.
func deviceCall(c *braid.Comm, h uint64, coll int, send, recv unsafe.Pointer, count C.size_t, dtype, o C.int, root int, stream uintptr) error {
	name := devNames[coll]
	var p braid.Op
	if coll == devAllreduce || coll == devReduce || coll == devReduceScatter {
		var err error
		if p, err = op(c, name, o); err != nil {
			return err
		}
	}
	rooted := coll == devBcast || coll == devReduce || coll == devGather || coll == devScatter
	if rooted && (root < 0 || root >= c.Size()) {
		return argErr(c, name, "root %d out of range [0, %d)", root, c.Size())
	}
	if stream == streamPerThread {
		return argErr(c, name, "the per-thread default stream (cudaStreamPerThread) is the calling thread's, and Braid issues its work from a thread of its own: pass the stream itself")
	}
	// The counts of send and recv, as the host calls take them.
	scount, rcount := count, count
	switch coll {
	case devAllgather, devGather:
		rcount = size(c, count)
	case devReduceScatter, devScatter:
		scount = size(c, count)
	case devAlltoall:
		scount, rcount = size(c, count), size(c, count)
	}
	sb, err := devBuffer(c, name, "send", send, scount, dtype)
	if err != nil {
		return err
	}
	rb, err := devBuffer(c, name, "recv", recv, rcount, dtype)
	if err != nil {
		return err
	}
	if count == 0 {
		return nil // as DeviceComm's calls do: nothing to move, no GPU needed
	}
	// The buffers this rank has (a NULL recv off the root of a reduce or
	// gather, a NULL send off the root of a scatter, are none) must be on
	// one GPU, the one of the communicator's device calls.
	bufs := []devBuf{{"send", sb}, {"recv", rb}}
	if coll == devBcast {
		bufs = bufs[1:]
		bufs[0].what = "buf"
	}
	// A NULL buffer: DeviceComm's call says whether the rank needs it.
	dev, err := bufsDevice(c, name, bufs)
	if err != nil {
		return err
	}
	if dev < 0 {
		return argErr(c, name, "no device buffer: NULL with count %d", uint64(count))
	}
	s := deviceState(h, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx := context.Background()
	d, err := s.comm(ctx, c, name, dev)
	if err != nil {
		return err
	}
	return s.ordered(c, d, name, dev, stream, func() error {
		switch coll {
		case devAllreduce:
			return d.Allreduce(ctx, sb, rb, p)
		case devBcast:
			return d.Bcast(ctx, rb, root)
		case devReduce:
			return d.Reduce(ctx, sb, rb, p, root)
		case devAllgather:
			return d.Allgather(ctx, sb, rb)
		case devReduceScatter:
			return d.ReduceScatter(ctx, sb, rb, p)
		case devGather:
			return d.Gather(ctx, sb, rb, root)
		case devScatter:
			return d.Scatter(ctx, sb, rb, root)
		}
		return d.Alltoall(ctx, sb, rb)
	})
}

// ordered runs a device call (run) on d in the order stream gives it, as
// the package's doc says. s.mu is held.
func (s *devState) ordered(c *braid.Comm, d *braid.DeviceComm, name string, dev cuda.Device, stream uintptr, run func() error) error {
	ctx := context.Background()
	// The call's work follows the work queued before it on the caller's
	// stream, or without one on the legacy default stream: the buffers
	// may have been written by a synchronous copy from pageable memory
	// whose data is still on its way there. With a stream, the work queued
	// on it after the call follows the call's; the worker runs closures in
	// the order they reach it, so the second one's record follows the
	// call's work on the DeviceComm's stream.
	us, ds := cuda.Stream(stream), d.Stream()
	if stream == 0 {
		us = cuda.StreamLegacy
	}
	if err := d.Worker().Do(ctx, func(cc *cuda.Ctx) error {
		if err := cc.Record(s.before, us); err != nil {
			return err
		}
		return cc.StreamWaitEvent(ds, s.before)
	}); err != nil {
		return devErr(c, braid.InvalidArgument, name, fmt.Errorf("ordering the call after stream %#x (a stream of GPU %d's primary context?): %w", stream, dev, err))
	}
	if stream == 0 {
		// No stream: the call returns with the result in place.
		if err := run(); err != nil {
			return err
		}
		return d.Synchronize(ctx)
	}
	if err := run(); err != nil {
		return err
	}
	if err := d.Worker().Do(ctx, func(cc *cuda.Ctx) error {
		if err := cc.Record(s.after, ds); err != nil {
			return err
		}
		return cc.StreamWaitEvent(us, s.after)
	}); err != nil {
		return devErr(c, braid.Internal, name, fmt.Errorf("ordering stream %#x after the call: %w", stream, err))
	}
	return nil
}

//export braidgo_device_synchronize
func braidgo_device_synchronize(h C.braid_comm, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	if _, err := comms.get(uint64(h), "synchronize"); err != nil {
		return fail(e, err)
	}
	s := deviceState(uint64(h), true)
	if s == nil {
		return C.BRAID_OK
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d == nil {
		return C.BRAID_OK
	}
	return fail(e, s.d.Synchronize(context.Background()))
}

// The point-to-point calls of braidgo_device_p2p.
const (
	devSend = iota
	devRecv
	devSendRecv
)

var p2pNames = [...]string{"send", "recv", "sendrecv"}

//export braidgo_device_p2p
func braidgo_device_p2p(kind C.int, h C.braid_comm, send unsafe.Pointer, scount C.size_t, to C.int, recv unsafe.Pointer, rcount C.size_t, from C.int, dtype, tag C.int, stream unsafe.Pointer, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	name := p2pNames[kind]
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return fail(e, err)
	}
	return fail(e, deviceP2P(c, uint64(h), int(kind), send, scount, int(to), recv, rcount, int(from), dtype, int(tag), uintptr(stream)))
}

// devBuf is one buffer of a device call, named as errors name it.
type devBuf struct {
	what string
	b    braid.Device
}

// bufsDevice returns the GPU that holds every buffer of bufs that is not
// NULL, or -1 if all are NULL; buffers on two GPUs are an invalid
// argument.
func bufsDevice(c *braid.Comm, name string, bufs []devBuf) (cuda.Device, error) {
	dev := cuda.Device(-1)
	for _, x := range bufs {
		if x.b.Ptr == 0 {
			continue
		}
		dv, err := pointerDevice(c, name, x.what, x.b.Ptr)
		if err != nil {
			return -1, err
		}
		if dev >= 0 && dv != dev {
			return -1, argErr(c, name, "send is on GPU %d and recv on GPU %d", dev, dv)
		}
		dev = dv
	}
	return dev, nil
}

// deviceP2P checks a device point-to-point call's arguments and runs it
// on the communicator's DeviceComm, which its first device call, a
// collective, made: a point-to-point call concerns two ranks, and making
// the DeviceComm takes every rank.
func deviceP2P(c *braid.Comm, h uint64, kind int, send unsafe.Pointer, scount C.size_t, to int, recv unsafe.Pointer, rcount C.size_t, from int, dtype C.int, tag int, stream uintptr) error {
	name := p2pNames[kind]
	if stream == streamPerThread {
		return argErr(c, name, "the per-thread default stream (cudaStreamPerThread) is the calling thread's, and Braid issues its work from a thread of its own: pass the stream itself")
	}
	var ends []devBuf
	what := func(w string) string {
		if kind != devSendRecv {
			return "buf"
		}
		return w
	}
	if kind != devRecv {
		b, err := devBuffer(c, name, what("send"), send, scount, dtype)
		if err != nil {
			return err
		}
		ends = append(ends, devBuf{what("send"), b})
	}
	if kind != devSend {
		b, err := devBuffer(c, name, what("recv"), recv, rcount, dtype)
		if err != nil {
			return err
		}
		ends = append(ends, devBuf{what("recv"), b})
	}
	var full []devBuf
	for _, x := range ends {
		if x.b.Count == 0 {
			continue // an empty message reads and writes nothing
		}
		if x.b.Ptr == 0 {
			return argErr(c, name, "%s is NULL with count %d", x.what, x.b.Count)
		}
		full = append(full, x)
	}
	dev, err := bufsDevice(c, name, full)
	if err != nil {
		return err
	}
	s := deviceState(h, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return devErr(c, braid.Aborted, name, errors.New("communicator is destroyed"))
	}
	if s.d == nil {
		return devErr(c, braid.InvalidArgument, name, errors.New("no device call has been made on this communicator yet: its first device call, on every rank, must be a collective (braid_device_allreduce of one element, say), which sets up the GPU path; a point-to-point call concerns two ranks only"))
	}
	if dev < 0 {
		dev = s.gpu
	}
	if dev != s.gpu {
		return devErr(c, braid.InvalidArgument, name, fmt.Errorf("the buffers are on GPU %d, and this communicator's device calls run on GPU %d (its first device call's)", dev, s.gpu))
	}
	d, ctx := s.d, context.Background()
	return s.ordered(c, d, name, dev, stream, func() error {
		switch kind {
		case devSend:
			return d.Send(ctx, ends[0].b, to, tag)
		case devRecv:
			return d.Recv(ctx, ends[0].b, from, tag)
		}
		return d.SendRecv(ctx, ends[0].b, to, ends[1].b, from, tag)
	})
}
