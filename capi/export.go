//go:build cgo

package main

// The Go side of braid.h: every braidgo_ function is called by the C
// function of the same name without the "go" (api.go), which passes the
// calling thread's braid_error for the description of a failure.

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
	"time"
	"unsafe"

	"github.com/braid-ccl/braid"
)

// fail describes err in *e and returns its kind; a nil err is success.
func fail(e *C.braid_error, err error) C.int {
	if err == nil {
		return C.BRAID_OK
	}
	kind := braid.KindOf(err)
	if kind == 0 {
		kind = braid.Internal
	}
	e.kind = C.int(kind)
	e.rank, e.peer = -1, -1
	call := ""
	var be *braid.Error
	if errors.As(err, &be) {
		e.rank, e.peer, call = C.int(be.Rank), C.int(be.Peer), be.Call
	}
	putString(e.call[:], call)
	putString(e.message[:], err.Error())
	return C.int(kind)
}

// putString copies s into dst, cut to fit, with a terminating NUL.
func putString(dst []C.char, s string) {
	n := min(len(s), len(dst)-1)
	for i := 0; i < n; i++ {
		dst[i] = C.char(s[i])
	}
	dst[n] = 0
}

// guard turns a panic into an Internal error in *e, so that none crosses
// into C; it is deferred by every exported function.
func guard(e *C.braid_error, ret *C.int) {
	if r := recover(); r != nil {
		*ret = fail(e, &braid.Error{Kind: braid.Internal, Rank: -1, Call: "capi", Peer: -1,
			Err: fmt.Errorf("panic: %v", r)})
	}
}

// argErr is an InvalidArgument error of call on c (nil before there is one).
func argErr(c *braid.Comm, call, format string, args ...any) error {
	rank := -1
	if c != nil {
		rank = c.Rank()
	}
	return &braid.Error{Kind: braid.InvalidArgument, Rank: rank, Call: call, Peer: -1, Err: fmt.Errorf(format, args...)}
}

// buffer wraps count elements of dtype at p, C memory, for a call. A nil p
// is an empty buffer if count is 0; if count is not and optional, it is no
// buffer (nil: reduce's and gather's recv off the root, scatter's send).
func buffer(c *braid.Comm, call, what string, p unsafe.Pointer, count C.size_t, dtype C.int, optional bool) (any, error) {
	d := braid.DType(dtype)
	if !d.Valid() {
		return nil, argErr(c, call, "dtype %d is not a braid_dtype", int(dtype))
	}
	if p == nil {
		if count == 0 {
			return braid.Raw{Bytes: []byte{}, Type: d}, nil
		}
		if optional {
			return nil, nil
		}
		return nil, argErr(c, call, "%s is NULL with count %d", what, uint64(count))
	}
	if uint64(count) > math.MaxInt/uint64(d.Size()) {
		return nil, argErr(c, call, "%s count %d × %d bytes overflows", what, uint64(count), d.Size())
	}
	return braid.Raw{Bytes: unsafe.Slice((*byte)(p), int(count)*d.Size()), Type: d}, nil
}

// op checks a braid_op; the collective itself checks it against the dtype.
func op(c *braid.Comm, call string, o C.int) (braid.Op, error) {
	if !braid.Op(o).Valid() {
		return 0, argErr(c, call, "op %d is not a braid_op", int(o))
	}
	return braid.Op(o), nil
}

// A call is one collective, with its buffers wrapped, ready to run
// blocking or non-blocking.
type call struct {
	run   func(ctx context.Context) error
	start func(ctx context.Context) *braid.Request
}

// finish runs cl, blocking (req nil) or non-blocking, or fails with err.
func finish(cl call, err error, req *C.braid_request, e *C.braid_error) C.int {
	if req != nil {
		*req = 0
	}
	if err != nil {
		return fail(e, err)
	}
	ctx := context.Background()
	if req == nil {
		return fail(e, cl.run(ctx))
	}
	*req = C.braid_request(requests.add(cl.start(ctx)))
	return C.BRAID_OK
}

// twoBuffers wraps the send and recv buffers of a call.
func twoBuffers(c *braid.Comm, name string, send, recv unsafe.Pointer, scount, rcount C.size_t, dtype C.int, sendOpt, recvOpt bool) (any, any, error) {
	s, err := buffer(c, name, "send", send, scount, dtype, sendOpt)
	if err != nil {
		return nil, nil, err
	}
	r, err := buffer(c, name, "recv", recv, rcount, dtype, recvOpt)
	return s, r, err
}

// size is the communicator's size as a count, for the buffers of
// gathers and scatters.
func size(c *braid.Comm, n C.size_t) C.size_t {
	if n != 0 && uint64(n) > math.MaxInt/uint64(c.Size()) {
		return C.size_t(math.MaxInt) // buffer reports the overflow
	}
	return n * C.size_t(c.Size())
}

// options are the Options of a braid_config's fields.
func options(timeout float64) (*braid.Options, error) {
	if timeout < 0 || math.IsNaN(timeout) || timeout > float64(math.MaxInt64/int64(time.Second)) {
		return nil, argErr(nil, "init", "timeout_seconds %g: want a positive number of seconds, or 0 for the default", timeout)
	}
	return &braid.Options{Timeout: time.Duration(timeout * float64(time.Second))}, nil
}

//export braidgo_init
func braidgo_init(out *C.braid_comm, timeout C.double, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	if out == nil {
		return fail(e, argErr(nil, "init", "the communicator pointer is NULL"))
	}
	*out = 0
	opts, err := options(float64(timeout))
	if err != nil {
		return fail(e, err)
	}
	c, err := braid.Init(context.Background(), opts)
	if err != nil {
		return fail(e, err)
	}
	*out = C.braid_comm(comms.add(c))
	return C.BRAID_OK
}

//export braidgo_get_unique_id
func braidgo_get_unique_id(id *C.braid_unique_id, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	if id == nil {
		return fail(e, argErr(nil, "get_unique_id", "the id pointer is NULL"))
	}
	u, err := newUniqueID()
	if err != nil {
		return fail(e, err)
	}
	if len(u) >= len(id.internal) {
		return fail(e, argErr(nil, "get_unique_id", "the id %q is longer than %d bytes", u, len(id.internal)-1))
	}
	putString(id.internal[:], u)
	for i := len(u) + 1; i < len(id.internal); i++ {
		id.internal[i] = 0
	}
	return C.BRAID_OK
}

//export braidgo_init_rank
func braidgo_init_rank(out *C.braid_comm, size, rank C.int, id *C.braid_unique_id, timeout C.double, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	if out == nil {
		return fail(e, argErr(nil, "init", "the communicator pointer is NULL"))
	}
	*out = 0
	if id == nil {
		return fail(e, argErr(nil, "init", "the unique id is NULL"))
	}
	opts, err := options(float64(timeout))
	if err != nil {
		return fail(e, err)
	}
	c, err := initRank(int(size), int(rank), C.GoStringN(&id.internal[0], C.int(len(id.internal))), opts)
	if err != nil {
		return fail(e, err)
	}
	*out = C.braid_comm(comms.add(c))
	return C.BRAID_OK
}

//export braidgo_comm_info
func braidgo_comm_info(h C.braid_comm, what C.int, v *C.int, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	c, err := comms.get(uint64(h), "comm_info")
	if err != nil {
		return fail(e, err)
	}
	if v == nil {
		return fail(e, argErr(c, "comm_info", "the result pointer is NULL"))
	}
	switch what {
	case 0:
		*v = C.int(c.Rank())
	case 1:
		*v = C.int(c.Size())
	case 2:
		*v = C.int(c.LocalRank())
	default:
		*v = C.int(c.LocalSize())
	}
	return C.BRAID_OK
}

//export braidgo_comm_split
func braidgo_comm_split(h C.braid_comm, color, key C.int, out *C.braid_comm, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	if out == nil {
		return fail(e, argErr(nil, "split", "the communicator pointer is NULL"))
	}
	*out = 0
	c, err := comms.get(uint64(h), "split")
	if err != nil {
		return fail(e, err)
	}
	s, err := c.Split(context.Background(), int(color), int(key))
	if err != nil {
		return fail(e, err)
	}
	if s != nil {
		*out = C.braid_comm(comms.add(s))
	}
	return C.BRAID_OK
}

//export braidgo_abort
func braidgo_abort(h C.braid_comm, reason *C.char, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	c, err := comms.get(uint64(h), "abort")
	if err != nil {
		return fail(e, err)
	}
	why := "braid_abort"
	if reason != nil {
		why = C.GoString(reason)
	}
	c.Abort(errors.New(why))
	return C.BRAID_OK
}

//export braidgo_comm_destroy
func braidgo_comm_destroy(h C.braid_comm, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	c, err := comms.remove(uint64(h), "close")
	if err != nil {
		return fail(e, err)
	}
	derr := closeDevice(uint64(h))
	if err := c.Close(); err != nil {
		return fail(e, err)
	}
	return fail(e, derr)
}

//export braidgo_allreduce
func braidgo_allreduce(h C.braid_comm, send, recv unsafe.Pointer, count C.size_t, dtype, o C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "allreduce"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	p, err := op(c, name, o)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	s, r, err := twoBuffers(c, name, send, recv, count, count, dtype, false, false)
	return finish(call{
		run:   func(ctx context.Context) error { return c.Allreduce(ctx, s, r, p) },
		start: func(ctx context.Context) *braid.Request { return c.IAllreduce(ctx, s, r, p) },
	}, err, req, e)
}

//export braidgo_bcast
func braidgo_bcast(h C.braid_comm, buf unsafe.Pointer, count C.size_t, dtype, root C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "bcast"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	b, err := buffer(c, name, "buf", buf, count, dtype, false)
	return finish(call{
		run:   func(ctx context.Context) error { return c.Bcast(ctx, b, int(root)) },
		start: func(ctx context.Context) *braid.Request { return c.IBcast(ctx, b, int(root)) },
	}, err, req, e)
}

//export braidgo_reduce
func braidgo_reduce(h C.braid_comm, send, recv unsafe.Pointer, count C.size_t, dtype, o, root C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "reduce"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	p, err := op(c, name, o)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	s, r, err := twoBuffers(c, name, send, recv, count, count, dtype, false, int(root) != c.Rank())
	return finish(call{
		run:   func(ctx context.Context) error { return c.Reduce(ctx, s, r, p, int(root)) },
		start: func(ctx context.Context) *braid.Request { return c.IReduce(ctx, s, r, p, int(root)) },
	}, err, req, e)
}

//export braidgo_allgather
func braidgo_allgather(h C.braid_comm, send, recv unsafe.Pointer, count C.size_t, dtype C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "allgather"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	s, r, err := twoBuffers(c, name, send, recv, count, size(c, count), dtype, false, false)
	return finish(call{
		run:   func(ctx context.Context) error { return c.Allgather(ctx, s, r) },
		start: func(ctx context.Context) *braid.Request { return c.IAllgather(ctx, s, r) },
	}, err, req, e)
}

//export braidgo_reduce_scatter
func braidgo_reduce_scatter(h C.braid_comm, send, recv unsafe.Pointer, count C.size_t, dtype, o C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "reducescatter"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	p, err := op(c, name, o)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	s, r, err := twoBuffers(c, name, send, recv, size(c, count), count, dtype, false, false)
	return finish(call{
		run:   func(ctx context.Context) error { return c.ReduceScatter(ctx, s, r, p) },
		start: func(ctx context.Context) *braid.Request { return c.IReduceScatter(ctx, s, r, p) },
	}, err, req, e)
}

//export braidgo_gather
func braidgo_gather(h C.braid_comm, send, recv unsafe.Pointer, count C.size_t, dtype, root C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "gather"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	s, r, err := twoBuffers(c, name, send, recv, count, size(c, count), dtype, false, int(root) != c.Rank())
	return finish(call{
		run:   func(ctx context.Context) error { return c.Gather(ctx, s, r, int(root)) },
		start: func(ctx context.Context) *braid.Request { return c.IGather(ctx, s, r, int(root)) },
	}, err, req, e)
}

//export braidgo_scatter
func braidgo_scatter(h C.braid_comm, send, recv unsafe.Pointer, count C.size_t, dtype, root C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "scatter"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	s, r, err := twoBuffers(c, name, send, recv, size(c, count), count, dtype, int(root) != c.Rank(), false)
	return finish(call{
		run:   func(ctx context.Context) error { return c.Scatter(ctx, s, r, int(root)) },
		start: func(ctx context.Context) *braid.Request { return c.IScatter(ctx, s, r, int(root)) },
	}, err, req, e)
}

//export braidgo_alltoall
func braidgo_alltoall(h C.braid_comm, send, recv unsafe.Pointer, count C.size_t, dtype C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "alltoall"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	s, r, err := twoBuffers(c, name, send, recv, size(c, count), size(c, count), dtype, false, false)
	return finish(call{
		run:   func(ctx context.Context) error { return c.Alltoall(ctx, s, r) },
		start: func(ctx context.Context) *braid.Request { return c.IAlltoall(ctx, s, r) },
	}, err, req, e)
}

//export braidgo_barrier
func braidgo_barrier(h C.braid_comm, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	c, err := comms.get(uint64(h), "barrier")
	if err != nil {
		return finish(call{}, err, req, e)
	}
	return finish(call{
		run:   c.Barrier,
		start: c.IBarrier,
	}, nil, req, e)
}

//export braidgo_send
func braidgo_send(h C.braid_comm, buf unsafe.Pointer, count C.size_t, dtype, peer, tag C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "send"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	b, err := buffer(c, name, "buf", buf, count, dtype, false)
	return finish(call{
		run:   func(ctx context.Context) error { return c.Send(ctx, b, int(peer), int(tag)) },
		start: func(ctx context.Context) *braid.Request { return c.ISend(ctx, b, int(peer), int(tag)) },
	}, err, req, e)
}

//export braidgo_recv
func braidgo_recv(h C.braid_comm, buf unsafe.Pointer, count C.size_t, dtype, peer, tag C.int, req *C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	const name = "recv"
	c, err := comms.get(uint64(h), name)
	if err != nil {
		return finish(call{}, err, req, e)
	}
	b, err := buffer(c, name, "buf", buf, count, dtype, false)
	return finish(call{
		run:   func(ctx context.Context) error { return c.Recv(ctx, b, int(peer), int(tag)) },
		start: func(ctx context.Context) *braid.Request { return c.IRecv(ctx, b, int(peer), int(tag)) },
	}, err, req, e)
}

//export braidgo_wait
func braidgo_wait(h C.braid_request, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	r, err := requests.remove(uint64(h), "wait")
	if err != nil {
		return fail(e, err)
	}
	return fail(e, r.Wait(context.Background()))
}

//export braidgo_test
func braidgo_test(h C.braid_request, done *C.int, e *C.braid_error) (ret C.int) {
	defer guard(e, &ret)
	if done == nil {
		return fail(e, argErr(nil, "test", "done is NULL"))
	}
	*done = 0
	r, err := requests.get(uint64(h), "test")
	if err != nil {
		return fail(e, err)
	}
	ok, err := r.Test()
	if !ok {
		return C.BRAID_OK
	}
	*done = 1
	requests.remove(uint64(h), "test")
	return fail(e, err)
}

//export braidgo_noreq
func braidgo_noreq(name *C.char, e *C.braid_error) C.int {
	return fail(e, argErr(nil, C.GoString(name), "the request pointer is NULL"))
}
