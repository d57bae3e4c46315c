package braid

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/sched"
)

// deviceMixedEnv marks the ranks that TestDeviceMixedOneComm starts.
const deviceMixedEnv = "BRAID_DEVICE_TEST_MIXED"

// TestDeviceMixedOneComm runs what the C API's device test
// (capi/testdata/device.c) runs, in Go: every collective on ONE
// stream-ordered DeviceComm, one after the other, at several counts, each
// on a caller's stream (ordered with events as capi/device.go orders it:
// the caller's stream, behind a millisecond of memsets, then the
// DeviceComm's stream, then the caller's again), blocking (the caller's
// stream synchronised, the call, DeviceComm.Synchronize) and as the C
// API's blocking calls run (mixedLegacy), with inputs that change every
// call; then 40 reduces (max, to rank 0) of 12345 float32 back to back,
// alternating the ways, where the C test saw rank 0 combine rank 1's chunk
// of the call before (the test's own doing: its staging copy was still
// landing). Every element of every result is checked. It runs like
// TestDeviceCollectives: one process per GPU, or BRAID_TEST_GPUS ranks
// sharing them.
func TestDeviceMixedOneComm(t *testing.T) {
	if os.Getenv(deviceMixedEnv) != "" {
		deviceMixedRank(t)
		return
	}
	launchDeviceTest(t, "TestDeviceMixedOneComm", deviceMixedEnv, 4*time.Minute)
}

// mixedVal is rank r's input element j in round k, as device.c's val.
func mixedVal(r, j, k int) float32 { return float32((r+1)*3 + j%7 + (k%5)*11) }

// mixedRoots are the roots of the rooted collectives, as device.c's.
func mixedRoot(coll sched.Collective, n int) int {
	switch coll {
	case sched.Bcast, sched.Scatter:
		return n - 1
	}
	return 0
}

// mixedWant is element i of rank's result of coll on count in round k
// (reductions: sum, but max for reduce); in gives the input of rank r's
// element j, so that the diagnosis can mix rounds.
func mixedWant(coll sched.Collective, n, rank, count, i int, in func(r, j int) float32) float32 {
	root := mixedRoot(coll, n)
	switch coll {
	case sched.Allreduce:
		var x float32
		for r := range n {
			x += in(r, i)
		}
		return x
	case sched.Bcast:
		return in(root, i)
	case sched.Reduce:
		var x float32
		for r := range n {
			x = max(x, in(r, i))
		}
		return x
	case sched.Allgather, sched.Gather:
		return in(i/count, i%count)
	case sched.ReduceScatter:
		var x float32
		for r := range n {
			x += in(r, rank*count+i)
		}
		return x
	case sched.Scatter:
		return in(root, rank*count+i)
	case sched.Alltoall:
		return in(i/count, rank*count+i%count)
	}
	return float32(math.NaN())
}

// mixedState is one rank's buffers and streams.
type mixedState struct {
	d                    *DeviceComm
	w                    *cuda.Worker
	rank, n              int
	us                   cuda.Stream // the caller's stream
	before, after        cuda.Event
	send, recv, stage    cuda.DevicePtr
	delay                cuda.DevicePtr
	failures, calls, bad int
}

// mixedDelayBytes is how much each of the 4 memsets of a delay writes.
const mixedDelayBytes = 64 << 20

// How a call of TestDeviceMixedOneComm is made.
type mixedMode int

const (
	// mixedStream: on the caller's stream, behind a delay.
	mixedStream mixedMode = iota
	// mixedBlocking: after the caller's stream is synchronised, then
	// Synchronize.
	mixedBlocking
	// mixedLegacy: as the C API's calls without a stream (capi/device.go):
	// the input written by a copy from pageable memory on the legacy
	// default stream, which may still be landing when the call is made,
	// and the call ordered after that stream with an event, then
	// Synchronize.
	mixedLegacy
)

func (m mixedMode) String() string {
	return [...]string{"on a stream", "blocking", "after the legacy stream"}[m]
}

// one runs coll on count in round k, made as mode says, and checks every
// element; it returns an error only where the call itself failed, and
// counts wrong results in s.failures.
func (s *mixedState) one(ctx context.Context, t *testing.T, coll sched.Collective, count, k int, mode mixedMode) error {
	ordered := mode == mixedStream
	n, rank := s.n, s.rank
	root := mixedRoot(coll, n)
	p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root}
	inLen, outLen := p.InLen(rank), p.OutLen(rank)
	inPtr := s.send
	if coll == sched.Bcast {
		inPtr, outLen = s.recv, count
	}
	in := make([]byte, inLen*4)
	for j := range inLen {
		binary.LittleEndian.PutUint32(in[4*j:], math.Float32bits(mixedVal(rank, j, k)))
	}
	ds := s.d.Stream()
	us := s.us
	if err := s.w.Do(ctx, func(cc *cuda.Ctx) error {
		if mode == mixedLegacy {
			ls := cuda.StreamLegacy
			if outLen > 0 {
				if err := cc.Memset8(s.recv, 0xff, outLen*4, ls); err != nil {
					return err
				}
			}
			if err := cc.CopyHtoD(inPtr, in, ls); err != nil {
				return err
			}
			if err := cc.Record(s.before, ls); err != nil {
				return err
			}
			return cc.StreamWaitEvent(ds, s.before)
		}
		if err := cc.CopyHtoD(s.stage, in, us); err != nil {
			return err
		}
		if err := cc.StreamSynchronize(us); err != nil {
			return err
		}
		if ordered {
			for i := range 4 {
				if err := cc.Memset8(s.delay, byte(i), mixedDelayBytes, us); err != nil {
					return err
				}
			}
		}
		// The output first (0xff: NaN), then the input, so that the
		// broadcast's root keeps its input in recv.
		if outLen > 0 {
			if err := cc.Memset8(s.recv, 0xff, outLen*4, us); err != nil {
				return err
			}
		}
		if err := cc.Copy(inPtr, s.stage, inLen*4, us); err != nil {
			return err
		}
		if !ordered {
			return cc.StreamSynchronize(us)
		}
		// capi/device.go: the call follows the caller's stream.
		if err := cc.Record(s.before, us); err != nil {
			return err
		}
		return cc.StreamWaitEvent(ds, s.before)
	}); err != nil {
		return fmt.Errorf("preparing the buffers: %w", err)
	}
	send := Device{Ptr: s.send, Count: inLen, Type: Float32}
	recv := Device{Ptr: s.recv, Count: p.OutLen(rank), Type: Float32}
	if inLen == 0 {
		send.Ptr = 0
	}
	if recv.Count == 0 {
		recv.Ptr = 0
	}
	var err error
	switch coll {
	case sched.Allreduce:
		err = s.d.Allreduce(ctx, send, recv, Sum)
	case sched.Bcast:
		err = s.d.Bcast(ctx, Device{Ptr: s.recv, Count: count, Type: Float32}, root)
	case sched.Reduce:
		err = s.d.Reduce(ctx, send, recv, Max, root)
	case sched.Allgather:
		err = s.d.Allgather(ctx, send, recv)
	case sched.ReduceScatter:
		err = s.d.ReduceScatter(ctx, send, recv, Sum)
	case sched.Gather:
		err = s.d.Gather(ctx, send, recv, root)
	case sched.Scatter:
		err = s.d.Scatter(ctx, send, recv, root)
	case sched.Alltoall:
		err = s.d.Alltoall(ctx, send, recv)
	}
	if err != nil {
		return err
	}
	s.calls++
	out := make([]byte, outLen*4)
	if ordered {
		// capi/device.go: the caller's stream follows the call.
		err = s.w.Do(ctx, func(cc *cuda.Ctx) error {
			if err := cc.Record(s.after, ds); err != nil {
				return err
			}
			if err := cc.StreamWaitEvent(us, s.after); err != nil {
				return err
			}
			if err := cc.CopyDtoH(out, s.recv, us); err != nil {
				return err
			}
			return cc.StreamSynchronize(us)
		})
	} else {
		if err = s.d.Synchronize(ctx); err == nil {
			err = s.w.Do(ctx, func(cc *cuda.Ctx) error {
				if err := cc.CopyDtoH(out, s.recv, us); err != nil {
					return err
				}
				return cc.StreamSynchronize(us)
			})
		}
	}
	if err != nil {
		return err
	}
	how := mode.String()
	first, last, nbad := -1, -1, 0
	for i := range outLen {
		got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
		want := mixedWant(coll, n, rank, count, i, func(r, j int) float32 { return mixedVal(r, j, k) })
		if got == want {
			continue
		}
		nbad++
		if first < 0 {
			first = i
		}
		last = i
		if nbad <= 3 {
			// Which round's data of the peers would explain it, this
			// rank's own being this round's?
			explain := ""
			for back := 1; back <= 5 && k-back >= 0; back++ {
				kk := k - back
				alt := mixedWant(coll, n, rank, count, i, func(r, j int) float32 {
					if r == rank {
						return mixedVal(r, j, k)
					}
					return mixedVal(r, j, kk)
				})
				if alt == got {
					explain = fmt.Sprintf(" (= the result with the peers' data of round %d)", kk)
					break
				}
			}
			t.Errorf("rank %d: %v of %d (%s, round %d): [%d] = %v, want %v%s", rank, coll, count, how, k, i, got, want, explain)
		}
	}
	if nbad > 0 {
		s.failures++
		s.bad += nbad
		t.Errorf("rank %d: %v of %d (%s, round %d): %d of %d elements wrong, from [%d] to [%d]", rank, coll, count, how, k, nbad, outLen, first, last)
	}
	return nil
}

// deviceMixedRank is one rank of TestDeviceMixedOneComm.
func deviceMixedRank(t *testing.T) {
	ctx, c, dev := deviceTestInit(t, 3*time.Minute)
	n, rank := c.Size(), c.Rank()
	d, err := c.NewDeviceComm(ctx, dev, &DeviceOptions{StreamOrdered: true})
	if err != nil {
		t.Fatalf("rank %d: NewDeviceComm: %v", rank, err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Errorf("rank %d: close: %v", rank, err)
		}
	}()
	s := &mixedState{d: d, w: d.Worker(), rank: rank, n: n}
	const maxCount = 1 << 20
	bytes := n * maxCount * 4
	if err := s.w.Do(ctx, func(cc *cuda.Ctx) (err error) {
		for _, p := range []*cuda.DevicePtr{&s.send, &s.recv, &s.stage} {
			if *p, err = cc.Alloc(bytes); err != nil {
				return err
			}
		}
		if s.delay, err = cc.Alloc(mixedDelayBytes); err != nil {
			return err
		}
		if s.us, err = cc.NewStream(0); err != nil {
			return err
		}
		if s.before, err = cc.NewEvent(cuda.EventDisableTiming); err != nil {
			return err
		}
		s.after, err = cc.NewEvent(cuda.EventDisableTiming)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer s.w.Do(context.Background(), func(cc *cuda.Ctx) error {
		cc.StreamSynchronize(s.us)
		cc.DestroyEvent(s.before)
		cc.DestroyEvent(s.after)
		cc.DestroyStream(s.us)
		for _, p := range []cuda.DevicePtr{s.send, s.recv, s.stage, s.delay} {
			cc.Free(p)
		}
		return nil
	})
	if algo, err := d.Algorithm(sched.Reduce, 12345, 4); err == nil {
		t.Logf("rank %d: a reduce of 12345 float32 runs %s", rank, algo)
	}
	colls := []sched.Collective{sched.Allreduce, sched.Bcast, sched.Reduce, sched.Allgather,
		sched.ReduceScatter, sched.Gather, sched.Scatter, sched.Alltoall}
	modes := []mixedMode{mixedStream, mixedBlocking, mixedLegacy}
	start := time.Now()
	k := 0
	run := func(coll sched.Collective, count int, mode mixedMode) {
		if err := s.one(ctx, t, coll, count, k, mode); err != nil {
			t.Fatalf("rank %d: %v of %d (%v), round %d: %v", rank, coll, count, mode, k, err)
		}
		k++
	}
	// The C test's sequence, then again at the counts between.
	for _, counts := range [][]int{{1, 1000, 12345, maxCount}, {12345, 1000, 65537, 12345}} {
		for _, count := range counts {
			for _, coll := range colls {
				for _, mode := range modes {
					run(coll, count, mode)
				}
			}
		}
	}
	// The pair the C test failed on, many times: reduces of 12345 back
	// to back, on a stream and then the C API's blocking way, then each
	// way after itself.
	for i := range 40 {
		run(sched.Reduce, 12345, []mixedMode{mixedStream, mixedLegacy}[i%2])
	}
	for _, mode := range modes {
		for range 10 {
			run(sched.Reduce, 12345, mode)
		}
	}
	// Reduces between other collectives of the same count.
	for i := range 10 {
		run(colls[i%len(colls)], 12345, modes[i%3])
		run(sched.Reduce, 12345, modes[(i+1)%3])
	}
	t.Logf("rank %d: %d calls on one stream-ordered DeviceComm on GPU %d in %v: %d wrong (%d elements)",
		rank, s.calls, dev, time.Since(start).Round(time.Millisecond), s.failures, s.bad)
}
