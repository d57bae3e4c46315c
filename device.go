package braid

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/size"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// Device is a buffer in GPU memory: Count elements of Type from Ptr, on the
// GPU of the DeviceComm that runs the call. The memory must come from
// cuMemAlloc (cudaMalloc, PyTorch's caching allocator, cuda.Ctx.Alloc):
// peers map it with CUDA IPC, which stream-ordered pools and virtual
// memory allocations do not support.
type Device struct {
	Ptr   cuda.DevicePtr
	Count int
	Type  DType
}

// deviceSpin is how long the worker of a DeviceComm, and a caller waiting
// for it, poll before they sleep: calls follow each other within
// microseconds in a training loop, and waking a sleeping thread costs
// tens of microseconds in a virtual machine, more than a small allreduce.
const deviceSpin = time.Millisecond

// DeviceSegment is the least bytes one message of a pipelined algorithm
// carries on device buffers: the broadcast chain's segment, and the
// smallest segment of the pipelined ring, which cuts each block in four
// (larger segments where blocks exceed 64 MiB), so that the push of one
// segment overlaps the reduction of the one before. Every message costs
// notices and events, tens of microseconds between processes.
const DeviceSegment = 16 << 20

// kernelLoadWait bounds how long a rank making a DeviceComm waits for its
// peers to load the GPU kernels, when the caller set no deadline: the
// driver's compilation of the PTX on a GPU that the embedded cubin does
// not cover takes about 30 s, longer on a loaded host.
const kernelLoadWait = 3 * time.Minute

// DefaultFusedMax is DeviceOptions.FusedMax's default for a collective
// ("bcast", "allgather", "reducescatter") on n GPUs, where hostPath says
// whether the fused kernels may send part of their rounds through host
// memory (gpu.Comm.HasHostPath: DeviceOptions.HostShare not negative). On
// H200s (braid bench --device cuda, docs/PERFORMANCE.md) the pipelined
// fused kernels beat the programs at every size but two:
//   - a broadcast on two GPUs above 64 MiB without the host path, where
//     one copy-engine push moves more (two H200s, session 17, GB/s,
//     kernel against push: 16 MiB 334 against 270, 32 MiB 347 against
//     317, 64 MiB 357 against 346, 128 MiB 361 against 366, 256 MiB 365
//     against 377, 1 GiB 370 against 386). With it (fused.DefaultHostShare:
//     8 % from 64 MiB, 11 % from 256 MiB) the kernel wins there too
//     (session 24: 64 MiB 374, 256 MiB 387, 1 GiB 407 against the push's
//     357, 377, 379-383);
//   - a reduce-scatter on four GPUs at 64 MiB, where the ring moved 219
//     GB/s busbw against 207 (the kernel wins from 256 MiB: 318 against
//     296 at 1 GiB), which the default leaves to the kernel.
func DefaultFusedMax(coll string, n int, hostPath bool) int {
	if coll == "bcast" && n <= 2 && !hostPath {
		return 64 << 20
	}
	return math.MaxInt
}

// DefaultDirectMax is DeviceOptions.DirectMax's default on n GPUs: every
// size. The fused two-shot kernel beat the ring at every size from 16 MiB
// to 1 GiB on two and four H200s (320 against 282 GB/s busbw at 1 GiB on
// four).
func DefaultDirectMax(n int) int { return math.MaxInt }

// DefaultOneShotMax returns the largest allreduce, in bytes, that runs
// one-shot by default on n GPUs; the fused two-shot kernel ("direct")
// takes the larger ones. On H200s (braid bench --device cuda allreduce
// --algos gpu_oneshot,direct --oneshot-max 64M): on two GPUs one-shot won
// to 4 MiB (21.6 against 24.3 µs) and lost from 16 MiB (64.9 against
// 63.5); on three it beat the two-shot kernel to 1 MiB (17.2 against
// 18.8 µs), on four to 512 KiB (14.9 against 14.8). Above four GPUs (not
// measured) each rank pushes more, and the limit is lower.
func DefaultOneShotMax(n int) int {
	switch {
	case n <= 2:
		return 8 << 20
	case n == 3:
		return 1 << 20
	case n == 4:
		return 512 << 10
	}
	return 256 << 10
}

// DeviceComm runs the collectives of a communicator on device buffers, one
// GPU per rank, every rank on one host. The ranks read each other's buffers
// through CUDA IPC mappings and order their work with interprocess events
// (package gpu describes how). Calls are synchronous like Comm's: the
// buffers must be ready when a call starts (the work that wrote them has
// completed), and when it returns the result is in place and no peer
// reads the caller's buffers any more.
//
// Every rank makes the same calls in the same order, with the same counts,
// types, ops and roots; a DeviceComm runs one call at a time. Calls that
// run as fused kernels can also be captured into a CUDA graph and
// replayed (Capture, DeviceGraph).
type DeviceComm struct {
	c      *Comm
	w      *cuda.Worker
	g      *gpu.Comm
	shape  kernelShaper // g, for the planner
	topo   *devTopo     // the ranks' links, from c's topology; nil without one
	opts   DeviceOptions
	model  plan.DeviceModel
	mu     sync.Mutex
	plans  map[devKey]*devPlan
	closed bool
	// capturing: Capture's fn runs, and calls are recorded into a graph.
	capturing bool
	// p2pSend and p2pRecv count the point-to-point messages sent to and
	// received from each (peer, tag), made on first use (device_p2p.go).
	p2pSend, p2pRecv map[[2]int]uint32
}

// devKey is what a device call's plan depends on.
type devKey struct {
	coll  sched.Collective
	count int
	root  int
	dt    DType
	op    Op
}

// devPlan is the decision for one devKey: a fused kernel or a program.
type devPlan struct {
	algo   string
	fused  *fused.Kernel
	prog   *sched.Program
	params sched.Params // what prog was generated for
	miad   *devMIAD     // while MIAD adapts prog's segment (device_miad.go)
}

// NewDeviceComm makes the device communicator of c on GPU dev (an ordinal
// of this process, as CUDA_VISIBLE_DEVICES numbers them). Every rank of c
// calls it at the same time, each with its own GPU. Without a CUDA driver
// it fails with an *Error of kind Unsupported.
func (c *Comm) NewDeviceComm(ctx context.Context, dev cuda.Device, opts *DeviceOptions) (*DeviceComm, error) {
	const call = "device"
	if err := c.usable(call); err != nil {
		return nil, err
	}
	if c.nhosts > 1 {
		return nil, &Error{Kind: Unsupported, Rank: c.rank, Call: call, Peer: -1,
			Err: fmt.Errorf("device buffers across %d hosts: the GPU path reaches peers through CUDA IPC on one host", c.nhosts)}
	}
	d := &DeviceComm{c: c, plans: map[devKey]*devPlan{}, model: plan.DefaultDeviceModel(), topo: c.deviceTopo()}
	if opts != nil {
		d.opts = *opts
	}
	if d.opts.Model != nil {
		d.model = *d.opts.Model
	}
	// A bad setting fails this rank with InvalidArgument; it still takes
	// part in the set-up below, without a worker, so that the others fail
	// too instead of waiting for it.
	var w *cuda.Worker
	werr := d.opts.resolve(os.Getenv)
	if werr == nil {
		// The tables, read once: every rank's are compared in gpu.New.
		var notes []string
		notes, werr = d.opts.loadTables(os.Getenv, func() (plan.Machine, error) { return ThisGPUs(dev) })
		for _, n := range notes {
			fmt.Fprintln(c.w.opts.Log, n)
		}
	}
	badOpts := werr != nil && !errors.Is(werr, cuda.ErrNoDriver)
	if werr == nil {
		w, werr = cuda.NewWorker(dev, cuda.WorkerOptions{Spin: deviceSpin})
	}
	// The kernels' first load on a GPU that the embedded cubin does not
	// cover compiles their PTX (about 30 s on an H200, then cached by the
	// driver), at a different pace on each rank: every rank loads them
	// before the set-up's exchanges, then waits for the slowest with a
	// deadline that allows for the compilation, unless the caller set one.
	// A rank without a worker takes part too, so that the set-up below
	// fails on every rank instead of waiting for it.
	if werr == nil {
		start := time.Now()
		var image string
		err := w.Do(context.Background(), func(cc *cuda.Ctx) error {
			err := cc.LoadKernels()
			image = cc.KernelImage()
			return err
		})
		if took := time.Since(start); err == nil && took > time.Second {
			c.w.debugf("info", "device comm on GPU %d: loading the kernels (%s) took %v; the driver caches what it compiled", dev, image, took.Round(time.Millisecond))
		}
		// An error here returns again from gpu.New, which tells the peers.
	}
	bctx, bcancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		bctx, bcancel = context.WithTimeout(ctx, kernelLoadWait)
	}
	err := c.Barrier(bctx)
	bcancel()
	if err != nil {
		if w != nil {
			w.Close()
		}
		return nil, deviceError(c.rank, call, fmt.Errorf("waiting for every rank to load the GPU kernels: %w", errors.Join(werr, err)))
	}
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	if werr != nil {
		gpu.New(ctx, deviceHost{c}, nil, gpu.Options{Failed: werr})
		if badOpts {
			return nil, &Error{Kind: InvalidArgument, Rank: c.rank, Call: call, Peer: -1, Err: werr}
		}
		return nil, deviceError(c.rank, call, werr)
	}
	d.w = w
	o := &d.opts
	if d.g, err = gpu.New(ctx, deviceHost{c}, w, gpu.Options{
		OneShotBytes: d.oneShotMax(), TwoShot: o.DirectMax >= 0, Fused: o.FusedMax >= 0, SlotBytes: o.SlotBytes,
		LLBytes: o.LLMax, LL2Bytes: o.LL2Max, LLBlocks: o.LLBlocks, Blocks: o.Blocks, Threads: o.Threads,
		MinRounds: o.MinRounds, BcastRamp: o.BcastRamp, HostShare: o.HostShare, Pull: o.Pull, Stats: o.Stats,
		MultiPath: multiPathShares(o.MultiPathTable), MultiPathSource: multiPathSource(o.MultiPathTable),
		Shared: o.shared(), FirstSeq: o.firstSeq, Resident: o.Resident, ResidentMax: o.ResidentMax,
	}); err != nil {
		w.Close()
		return nil, deviceError(c.rank, call, err)
	}
	d.shape = d.g
	if ok, why := d.g.Fused(); ok {
		c.w.debugf("info", "device comm on GPU %d: fused kernels (pushes over NVLink, device-side flags), which the planner weighs against schedules; its own choices are capped at: allreduce one-shot %s (in low-latency lines up to %s), two-shot %s; bcast %s; allgather and reducescatter blocks %s and %s",
			dev, sizeLimit(d.oneShotMax()), sizeLimit(min(d.g.LLBytes(), d.oneShotMax())), sizeLimit(d.directMax()), sizeLimit(d.fusedMax(sched.Bcast)),
			sizeLimit(d.fusedMax(sched.Allgather)), sizeLimit(d.fusedMax(sched.ReduceScatter)))
		if d.g.Overlapped() {
			c.w.debugf("info", "device comm on GPU %d: fused kernels launched overlapped: each one's blocks may start as the one ahead of it ends, and wait on the GPU for it (programmatic stream serialization)", dev)
		} else {
			c.w.debugf("info", "device comm on GPU %d: fused kernels launched one after another: the kernels (BRAID_CUDA_KERNELS) or the driver do not allow overlapped launches", dev)
		}
		c.w.debugf("info", "device comm on GPU %d: multi-path through host memory: %s", dev, d.g.HostPath())
	} else if why != "" {
		c.w.debugf("info", "device comm on GPU %d: no fused kernels, every call runs as a program: %s", dev, why)
	}
	if o.Resident > 0 {
		if rs := d.g.Resident(); rs.On {
			c.w.debugf("info", "device comm on GPU %d: a resident kernel runs synchronous allreduces in low-latency lines up to %s without a launch; it holds one SM, and ends after %v without one",
				dev, sizeLimit(rs.Max), o.Resident)
		} else {
			c.w.debugf("info", "device comm on GPU %d: no resident kernel (DeviceOptions.Resident): %s", dev, rs.Off)
		}
	}
	if dt := d.topo; dt != nil {
		c.w.debugf("info", "device comm on GPU %d: topology %s, ranks on %s: the narrowest route between two is %s, which bounds the fused kernels and the flat schedules; bcast, reduce and allreduce weigh Blink's packed trees (treepack) against them",
			dev, dt.t.Name, dt.names(), dt.narrowest())
	}
	if t := o.Table; t != nil {
		c.w.debugf("info", "device comm on GPU %d: tuning table %s (%d entries, measured on %v)", dev, t.Source, len(t.Entries), t.Machine)
	}
	return d, nil
}

// fusedMax is the largest broadcast or allgather or reduce-scatter block,
// in bytes, that the planner runs fused unless told to.
func (d *DeviceComm) fusedMax(coll sched.Collective) int {
	m := d.opts.FusedMax
	if m == 0 {
		m = DefaultFusedMax(coll.String(), d.c.Size(), d.g.HasHostPath())
	}
	return max(m, 0)
}

// directMax is the largest allreduce, in bytes, that runs "direct".
func (d *DeviceComm) directMax() int {
	m := d.opts.DirectMax
	if m == 0 {
		m = DefaultDirectMax(d.c.Size())
	}
	return max(m, 0)
}

// oneShotMax is the largest allreduce, in bytes, that runs one-shot.
func (d *DeviceComm) oneShotMax() int {
	one := d.opts.OneShotMax
	if one == 0 {
		one = DefaultOneShotMax(d.c.Size())
	}
	return max(one, 0)
}

// sizeLimit writes a size limit for the log: "any size" for none.
func sizeLimit(b int) string {
	if b == math.MaxInt {
		return "any size"
	}
	return size.Format(int64(b))
}

// deviceError wraps err as an *Error, Unsupported when there is no
// driver, InvalidArgument when the ranks' settings differ.
func deviceError(rank int, call string, err error) error {
	if errors.Is(err, cuda.ErrNoDriver) {
		return &Error{Kind: Unsupported, Rank: rank, Call: call, Peer: -1, Err: err}
	}
	var m *gpu.MismatchError
	if errors.As(err, &m) {
		return &Error{Kind: InvalidArgument, Rank: rank, Call: call, Peer: -1, Err: err}
	}
	if errors.Is(err, gpu.ErrNotCapturable) {
		return &Error{Kind: Unsupported, Rank: rank, Call: call, Peer: -1, Err: err}
	}
	var sm *gpu.SizeMismatchError
	if errors.As(err, &sm) { // a point-to-point message's ends differ
		return &Error{Kind: Mismatch, Rank: rank, Call: call, Peer: sm.Peer, Err: err}
	}
	e := classify(rank, call, err)
	var pw *gpu.PeerWaitError
	if e.Peer < 0 && errors.As(err, &pw) {
		e.Peer = pw.Peer
	}
	return e
}

// deviceHost lets package gpu use the communicator for its set-up.
type deviceHost struct{ c *Comm }

func (h deviceHost) Rank() int { return h.c.Rank() }
func (h deviceHost) Size() int { return h.c.Size() }
func (h deviceHost) Allgather(ctx context.Context, send, recv []byte) error {
	return h.c.Allgather(ctx, send, recv)
}

// Worker returns the worker of this rank's GPU, for allocating buffers and
// moving data on the device the calls run on.
func (d *DeviceComm) Worker() *cuda.Worker { return d.w }

// Comm returns the host communicator.
func (d *DeviceComm) Comm() *Comm { return d.c }

// Stream returns the stream the calls run on.
func (d *DeviceComm) Stream() cuda.Stream { return d.g.Stream() }

// Synchronize waits until every call made so far has run on the GPU. With
// DeviceOptions.StreamOrdered it returns the first error of those calls.
func (d *DeviceComm) Synchronize(ctx context.Context) error {
	const call = "synchronize"
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return &Error{Kind: Aborted, Rank: d.c.rank, Call: call, Peer: -1, Err: errors.New("device communicator is closed")}
	}
	ctx, cancel := d.c.deadline(ctx)
	defer cancel()
	if err := d.g.Synchronize(ctx); err != nil {
		return deviceError(d.c.rank, call, err)
	}
	return nil
}

// Close releases the GPU resources of the communicator (scratch, events,
// peer mappings) and its worker. Every rank closes after its last call.
func (d *DeviceComm) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	return errors.Join(d.g.Close(), d.w.Close())
}

// Allreduce combines send over all ranks with op and leaves the result in
// recv on every rank; send and recv have the same count and type, and may
// be the same buffer.
func (d *DeviceComm) Allreduce(ctx context.Context, send, recv Device, op Op) error {
	return d.collective(ctx, "allreduce", sched.Allreduce, send, recv, op, 0)
}

// Reduce combines send over all ranks with op into the root's recv.
func (d *DeviceComm) Reduce(ctx context.Context, send, recv Device, op Op, root int) error {
	return d.collective(ctx, "reduce", sched.Reduce, send, recv, op, root)
}

// Bcast copies the root's buf to every rank's buf.
func (d *DeviceComm) Bcast(ctx context.Context, buf Device, root int) error {
	return d.collective(ctx, "bcast", sched.Bcast, buf, buf, 0, root)
}

// Allgather concatenates every rank's send, in rank order, into every
// rank's recv, which holds Size() times send's count.
func (d *DeviceComm) Allgather(ctx context.Context, send, recv Device) error {
	return d.collective(ctx, "allgather", sched.Allgather, send, recv, 0, 0)
}

// ReduceScatter combines send (Size() blocks of recv's count) over all
// ranks with op and leaves block r of the result in rank r's recv.
func (d *DeviceComm) ReduceScatter(ctx context.Context, send, recv Device, op Op) error {
	return d.collective(ctx, "reducescatter", sched.ReduceScatter, send, recv, op, 0)
}

// Gather concatenates every rank's send into the root's recv.
func (d *DeviceComm) Gather(ctx context.Context, send, recv Device, root int) error {
	return d.collective(ctx, "gather", sched.Gather, send, recv, 0, root)
}

// Scatter sends block r of the root's send to rank r's recv.
func (d *DeviceComm) Scatter(ctx context.Context, send, recv Device, root int) error {
	return d.collective(ctx, "scatter", sched.Scatter, send, recv, 0, root)
}

// Alltoall sends block j of every rank's send to rank j, where it lands
// as block r (r the sender) of recv.
func (d *DeviceComm) Alltoall(ctx context.Context, send, recv Device) error {
	return d.collective(ctx, "alltoall", sched.Alltoall, send, recv, 0, 0)
}

// deviceParams checks a call's buffers and returns its parameters, its
// element type and the pointers of In and Out (0 for a buffer the rank
// does not have).
func deviceParams(coll sched.Collective, n, rank int, send, recv Device, op Op, root int) (sched.Params, DType, cuda.DevicePtr, cuda.DevicePtr, error) {
	p := sched.Params{Coll: coll, NRanks: n, Root: root}
	fail := func(format string, args ...any) (sched.Params, DType, cuda.DevicePtr, cuda.DevicePtr, error) {
		return p, 0, 0, 0, fmt.Errorf(format, args...)
	}
	if coll.Rooted() && (root < 0 || root >= n) {
		return fail("root %d out of range [0, %d)", root, n)
	}
	if send.Count < 0 || recv.Count < 0 {
		return fail("negative count")
	}
	switch coll {
	case sched.Allreduce, sched.Reduce, sched.Bcast, sched.Allgather, sched.Gather:
		p.Count = send.Count
	case sched.ReduceScatter, sched.Scatter:
		p.Count = recv.Count
	case sched.Alltoall:
		if send.Count%n != 0 {
			return fail("alltoall of %d elements on %d ranks: not a whole number of blocks", send.Count, n)
		}
		p.Count = send.Count / n
	default:
		return fail("%v is not supported on device buffers", coll)
	}
	inLen, outLen := p.InLen(rank), p.OutLen(rank)
	dt := send.Type
	if inLen == 0 {
		dt = recv.Type
	}
	if !dt.Valid() {
		return fail("invalid dtype %v", dt)
	}
	if inLen > 0 && outLen > 0 && recv.Type != send.Type {
		return fail("send is %v and recv %v", send.Type, recv.Type)
	}
	if coll.Reduces() && !dtype.Supports(dt, op) {
		return fail("op %v is not defined on %v", op, dt)
	}
	var in, out cuda.DevicePtr
	if inLen > 0 {
		if send.Count != inLen {
			return fail("send has %d elements, want %d", send.Count, inLen)
		}
		if in = send.Ptr; in == 0 {
			return fail("send is a nil device pointer")
		}
	}
	if outLen > 0 {
		if recv.Count != outLen {
			return fail("recv has %d elements, want %d", recv.Count, outLen)
		}
		if out = recv.Ptr; out == 0 {
			return fail("recv is a nil device pointer")
		}
	}
	return p, dt, in, out, nil
}

// submit hands a call to the GPU the communicator's way: stream-ordered,
// it queues it (enqueue) with the context's deadline, else the
// communicator's timeout, and returns, since the call outlives this
// function; otherwise it runs it (run) under the call's deadline.
func (d *DeviceComm) submit(ctx context.Context, enqueue func(time.Time) error, run func(context.Context) error) error {
	if d.opts.StreamOrdered {
		dl, ok := ctx.Deadline()
		if !ok {
			dl = time.Now().Add(d.c.w.opts.Timeout)
		}
		return enqueue(dl)
	}
	ctx, cancel := d.c.deadline(ctx)
	defer cancel()
	return run(ctx)
}

func (d *DeviceComm) collective(ctx context.Context, name string, coll sched.Collective, send, recv Device, op Op, root int) error {
	c := d.c
	if err := c.usable(name); err != nil {
		return err
	}
	p, dt, in, out, err := deviceParams(coll, c.Size(), c.Rank(), send, recv, op, root)
	if err != nil {
		return &Error{Kind: InvalidArgument, Rank: c.rank, Call: name, Peer: -1, Err: err}
	}
	if p.Count == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return &Error{Kind: Aborted, Rank: c.rank, Call: name, Peer: -1, Err: errors.New("device communicator is closed")}
	}
	pl, err := d.plan(p, dt, op)
	if err != nil {
		return err
	}
	if d.capturing && pl.fused == nil {
		return d.capturingError(name, pl, p.Count)
	}
	k := gpu.Call{Params: p, Algo: pl.algo, Fused: pl.fused, Prog: pl.prog, DType: dt, Op: op, In: in, Out: out}
	err = d.submit(ctx, func(dl time.Time) error { return d.g.Enqueue(dl, &k) }, func(ctx context.Context) error {
		if m := pl.miad; m != nil {
			return m.run(ctx, d, pl, &k)
		}
		return d.g.Run(ctx, &k)
	})
	if err != nil {
		return deviceError(c.rank, name, err)
	}
	return nil
}

// deviceArgs reports whether a collective's buffers are device buffers,
// as Comm's collectives check before they hand them to deviceCall.
func deviceArgs(send, recv any) bool {
	_, s := send.(Device)
	_, r := recv.(Device)
	return s || r
}

// deviceCall runs a collective of Comm's API on device buffers: it is
// what Comm's collectives do when their buffers are Device values (send
// and recv, or buf for Bcast). The device communicator is made on first
// use, on the GPU that holds the buffer, and kept for the life of c.
func (c *Comm) deviceCall(ctx context.Context, name string, coll sched.Collective, send, recv any, op Op, root int) error {
	s, _ := send.(Device)
	r, _ := recv.(Device)
	if coll == sched.Bcast {
		s = r
	}
	ptr := s.Ptr
	if ptr == 0 {
		ptr = r.Ptr
	}
	d, err := c.deviceComm(ctx, ptr)
	if err != nil {
		return deviceError(c.rank, name, err)
	}
	return d.collective(ctx, name, coll, s, r, op, root)
}

// deviceComm returns the device communicator that deviceCall made for c,
// making it on the GPU that holds ptr on first use; Close closes it.
func (c *Comm) deviceComm(ctx context.Context, ptr cuda.DevicePtr) (*DeviceComm, error) {
	c.dev.mu.Lock()
	defer c.dev.mu.Unlock()
	if c.dev.closed {
		return nil, &Error{Kind: Aborted, Rank: c.rank, Call: "device", Peer: -1, Err: errors.New("communicator is closed")}
	}
	if c.dev.d != nil {
		return c.dev.d, nil
	}
	dev, err := cuda.PointerDevice(ptr)
	if err != nil {
		return nil, err
	}
	d, err := c.NewDeviceComm(ctx, dev, nil)
	if err != nil {
		return nil, err
	}
	c.dev.d = d
	return d, nil
}

// closeDevice closes the device communicator deviceCall made, if any.
func (c *Comm) closeDevice() error {
	c.dev.mu.Lock()
	defer c.dev.mu.Unlock()
	c.dev.closed = true
	if c.dev.d == nil {
		return nil
	}
	d := c.dev.d
	c.dev.d = nil
	return d.Close()
}
