package braid

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/sched"
)

// TestDeviceCaptureError checks, without a GPU, the error of a call that
// a CUDA graph cannot hold: Unsupported, naming the call, its schedule,
// and what can be captured instead; and that package gpu's refusals
// (ErrNotCapturable) become Unsupported too.
func TestDeviceCaptureError(t *testing.T) {
	d := &DeviceComm{c: &Comm{rank: 2}}
	err := d.capturingError("reduce", &devPlan{algo: "binomial"}, 1000)
	var e *Error
	if !errors.As(err, &e) || e.Kind != Unsupported || e.Rank != 2 || e.Call != "reduce" {
		t.Fatalf("capturingError = %#v, want an Unsupported *Error of rank 2's reduce", err)
	}
	for _, want := range []string{`"binomial"`, "1000 elements", "fused kernels", "DeviceOptions.Algo"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	err = deviceError(3, "synchronize", fmt.Errorf("gpu: rank 3: Synchronize during a capture: %w", gpu.ErrNotCapturable))
	if !errors.As(err, &e) || e.Kind != Unsupported || e.Call != "synchronize" {
		t.Errorf("deviceError of ErrNotCapturable = %#v, want Unsupported", err)
	}
}

// deviceGraphEnv marks the ranks that TestDeviceGraph starts.
const deviceGraphEnv = "BRAID_DEVICE_TEST_GRAPH"

// TestDeviceGraph captures fused device collectives into CUDA graphs
// (DeviceComm.Capture) and replays them, on 2 ranks or more (one process
// per GPU, or BRAID_TEST_GPUS ranks sharing them, as TestDeviceCollectives
// runs): allreduces of four sizes (one from and to buffers that are not
// 8-byte aligned), one of int32 max, a pipelined broadcast, allgather and
// reduce-scatter of several rounds each. Before every replay the inputs
// get new values and the outputs are poisoned; after it every result of
// every captured call is checked against internal/check's reference.
// Between replays, calls launched one by one run and are checked, so that
// the kernels' sequence counters serve both kinds of launch; at the end
// the host's count equals every counter. It runs stream-ordered and
// synchronous, with the two-shot kernel forced, and from a sequence number
// just below gpu.SeqLimit so that a replay resets the flags. It also
// checks that a call that runs a schedule is refused while capturing, with
// an Unsupported error, and that the communicator goes on.
func TestDeviceGraph(t *testing.T) {
	if os.Getenv(deviceGraphEnv) != "" {
		deviceGraphRank(t)
		return
	}
	launchDeviceTest(t, "TestDeviceGraph", deviceGraphEnv, 6*time.Minute)
}

// graphCase is one call captured in the test's graph, on its own buffers.
type graphCase struct {
	coll    sched.Collective
	d       DType
	op      Op
	count   int
	root    int
	off     int // bytes from the start of the allocations to the buffers
	in, out cuda.DevicePtr
}

func (k *graphCase) params(n int) sched.Params {
	return sched.Params{Coll: k.coll, NRanks: n, Count: k.count, Root: k.root}
}

func (k *graphCase) String() string {
	s := fmt.Sprintf("%v %v %v count %d", k.coll, k.d, k.op, k.count)
	if k.off != 0 {
		s += fmt.Sprintf(" at offset %d", k.off)
	}
	return s
}

// graphCases are the calls of the test's graph; off-by-4 buffers run
// the low-latency kernel on aligned scratch (copies in the graph).
func graphCases() []*graphCase {
	return []*graphCase{
		{coll: sched.Allreduce, d: Float32, op: Sum, count: 2},
		{coll: sched.Allreduce, d: Float32, op: Sum, count: 1000, off: 4},
		{coll: sched.Allreduce, d: Int32, op: Max, count: 4099},
		{coll: sched.Allreduce, d: Float32, op: Sum, count: 65537},
		{coll: sched.Bcast, d: Float32, op: Sum, count: 1<<18 + 3, root: 1},
		{coll: sched.Allgather, d: Float32, op: Sum, count: 1000},
		{coll: sched.ReduceScatter, d: Float32, op: Sum, count: 12345},
		{coll: sched.Allreduce, d: Float32, op: Sum, count: 1<<20 + 3},
	}
}

// run makes k's call on d.
func (k *graphCase) run(ctx context.Context, d *DeviceComm, n, rank int) error {
	p := k.params(n)
	send := Device{Ptr: k.in.Add(k.off), Count: p.InLen(rank), Type: k.d}
	recv := Device{Ptr: k.out.Add(k.off), Count: p.OutLen(rank), Type: k.d}
	switch k.coll {
	case sched.Allreduce:
		return d.Allreduce(ctx, send, recv, k.op)
	case sched.Bcast:
		return d.Bcast(ctx, Device{Ptr: k.out.Add(k.off), Count: k.count, Type: k.d}, k.root)
	case sched.Allgather:
		return d.Allgather(ctx, send, recv)
	}
	return d.ReduceScatter(ctx, send, recv, k.op)
}

// fill writes this rank's input for salt and poisons the output (a
// broadcast's root keeps its input, which is its output), then waits.
func (k *graphCase) fill(ctx context.Context, w *cuda.Worker, n, rank, salt int) error {
	p := k.params(n)
	es := k.d.Size()
	in := make([]byte, p.InLen(rank)*es)
	check.FillInput(p, k.d, k.op, in, rank, salt)
	return w.Do(ctx, func(cc *cuda.Ctx) error {
		if k.coll != sched.Bcast || rank != k.root {
			if err := cc.Memset8(k.out, 0xff, k.off+p.OutLen(rank)*es, 0); err != nil {
				return err
			}
		}
		dst := k.in
		if k.coll == sched.Bcast {
			dst = k.out
		}
		if err := cc.CopyHtoD(dst.Add(k.off), in, 0); err != nil {
			return err
		}
		return cc.Synchronize()
	})
}

// verify reads this rank's output and compares it with the reference.
func (k *graphCase) verify(ctx context.Context, w *cuda.Worker, n, rank, salt int) error {
	p := k.params(n)
	out := make([]byte, p.OutLen(rank)*k.d.Size())
	if err := readDevice(ctx, w, out, k.out.Add(k.off)); err != nil {
		return err
	}
	if err := check.Verify(p, k.d, k.op, rank, out, salt); err != nil {
		return fmt.Errorf("%v: %w", k, err)
	}
	return nil
}

// deviceGraphRank is one rank of TestDeviceGraph.
func deviceGraphRank(t *testing.T) {
	ctx, c, dev := deviceTestInit(t, 5*time.Minute)
	rank := c.Rank()
	for _, v := range []struct {
		name string
		opts DeviceOptions
	}{
		{"stream-ordered", DeviceOptions{StreamOrdered: true, FusedMax: math.MaxInt, MinRounds: 3}},
		{"synchronous, two-shot allreduces", DeviceOptions{FusedMax: math.MaxInt, MinRounds: 3, Algo: map[string]string{"allreduce": "direct"}}},
		{"across the sequence's reset", DeviceOptions{StreamOrdered: true, FusedMax: math.MaxInt, MinRounds: 3, firstSeq: gpu.SeqLimit - 200}},
	} {
		if err := deviceGraphVariant(ctx, t, c, dev, v.opts); err != nil {
			t.Errorf("rank %d: %s: %v", rank, v.name, err)
		}
	}
}

// deviceGraphVariant runs TestDeviceGraph's checks on a DeviceComm made
// with opts.
func deviceGraphVariant(ctx context.Context, t *testing.T, c *Comm, dev cuda.Device, opts DeviceOptions) (err error) {
	n, rank := c.Size(), c.Rank()
	d, err := c.NewDeviceComm(ctx, dev, &opts)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}()
	w := d.Worker()
	cases := graphCases()
	for _, k := range cases {
		p := k.params(n)
		es := k.d.Size()
		if err := w.Do(ctx, func(cc *cuda.Ctx) (err error) {
			if k.in, err = cc.Alloc(k.off + max(p.InLen(rank), 1)*es); err != nil {
				return err
			}
			k.out, err = cc.Alloc(k.off + max(p.OutLen(rank), k.count, 1)*es)
			return err
		}); err != nil {
			return err
		}
	}
	defer w.Do(context.Background(), func(cc *cuda.Ctx) error {
		for _, k := range cases {
			cc.Free(k.in)
			cc.Free(k.out)
		}
		return nil
	})
	sync := func() error {
		if opts.StreamOrdered {
			return d.Synchronize(ctx)
		}
		return nil
	}
	// One call of each first, checked: every call the graph holds runs
	// fused, and the kernels are warm.
	for i, k := range cases {
		if err := k.fill(ctx, w, n, rank, 100+i); err != nil {
			return err
		}
		if err := k.run(ctx, d, n, rank); err != nil {
			return fmt.Errorf("%v, before the capture: %w", k, err)
		}
		if err := sync(); err != nil {
			return err
		}
		if err := k.verify(ctx, w, n, rank, 100+i); err != nil {
			return fmt.Errorf("before the capture: %w", err)
		}
	}

	// The capture: a schedule (a reduce) and a synchronisation are
	// refused and leave the capture going; the fused calls are recorded
	// and run nothing.
	var refused, syncErr error
	g, err := d.Capture(ctx, func() error {
		for _, k := range cases {
			if err := k.run(ctx, d, n, rank); err != nil {
				return fmt.Errorf("%v, captured: %w", k, err)
			}
		}
		buf := Device{Ptr: cases[0].in, Count: 1, Type: Float32}
		refused = d.Reduce(ctx, buf, buf, Sum, 0)
		syncErr = d.Synchronize(ctx)
		return nil
	})
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	defer g.Close()
	var e *Error
	if !errors.As(refused, &e) || e.Kind != Unsupported || !strings.Contains(refused.Error(), "schedule") {
		return fmt.Errorf("a reduce during the capture: %v, want an Unsupported error naming its schedule", refused)
	}
	if !errors.As(syncErr, &e) || e.Kind != Unsupported {
		return fmt.Errorf("Synchronize during the capture: %v, want an Unsupported error", syncErr)
	}
	if g.Calls() != len(cases) {
		return fmt.Errorf("the graph holds %d calls, want %d", g.Calls(), len(cases))
	}
	if k, all := g.g.Nodes(); k != len(cases) || all < k {
		return fmt.Errorf("the graph has %d kernel nodes of %d, want %d", k, all, len(cases))
	} else if rank == 0 {
		t.Logf("graph of %d calls: %d kernels, %d nodes", g.Calls(), k, all)
	}
	// The capture ran nothing: the outputs still hold the warm-up's.
	for i, k := range cases {
		if err := k.verify(ctx, w, n, rank, 100+i); err != nil {
			return fmt.Errorf("after the capture, which should have run nothing: %w", err)
		}
	}

	// Replays with new inputs each, and calls one by one between them.
	one := cases[0] // the small allreduce, one by one between replays
	bc := cases[4]  // the pipelined broadcast, too
	salt := 1000
	replays, after := 0, 0
	if opts.firstSeq != 0 && d.g.FusedResets() != 0 {
		return fmt.Errorf("the calls before the replays reset the flags: start further from gpu.SeqLimit")
	}
	for r := range 50 {
		for i, k := range cases {
			if err := k.fill(ctx, w, n, rank, salt+i); err != nil {
				return err
			}
		}
		if err := g.Launch(ctx); err != nil {
			return fmt.Errorf("replay %d: %w", r, err)
		}
		if err := sync(); err != nil {
			return fmt.Errorf("replay %d: %w", r, err)
		}
		for i, k := range cases {
			if err := k.verify(ctx, w, n, rank, salt+i); err != nil {
				return fmt.Errorf("replay %d: %w", r, err)
			}
		}
		replays++
		salt += 100
		if opts.firstSeq != 0 {
			// Replays alone until one has reset the flags, then two more.
			if d.g.FusedResets() > 0 {
				if after++; after > 2 {
					break
				}
			}
			continue
		}
		if r == 5 {
			break
		}
		for _, k := range []*graphCase{one, bc} {
			if err := k.fill(ctx, w, n, rank, salt); err != nil {
				return err
			}
			if err := k.run(ctx, d, n, rank); err != nil {
				return fmt.Errorf("%v, between replays %d and %d: %w", k, r, r+1, err)
			}
			if err := sync(); err != nil {
				return err
			}
			if err := k.verify(ctx, w, n, rank, salt); err != nil {
				return fmt.Errorf("between replays %d and %d: %w", r, r+1, err)
			}
			salt++
		}
	}
	if opts.firstSeq != 0 {
		if got := d.g.FusedResets(); got != 1 {
			return fmt.Errorf("%d replays from sequence number %d reset the flags %d times, want once", replays, opts.firstSeq, got)
		}
	}
	host, devSeq, err := d.g.FusedSeq(ctx)
	if err != nil {
		return err
	}
	for i, v := range devSeq {
		if v != host {
			return fmt.Errorf("after %d replays: counter %d holds %d, the host counts %d", replays, i, v, host)
		}
	}
	if rank == 0 {
		t.Logf("%d replays of %d calls checked; the next sequence number %d on the host and in all %d counters; %d reset(s)",
			replays, g.Calls(), host, len(devSeq), d.g.FusedResets())
	}
	return nil
}
