package braid

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu"
	"github.com/braid-ccl/braid/internal/choice"
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

// DeviceOptions tunes a DeviceComm. The zero value lets the planner
// choose: for every call it costs the fused kernels that can run it and
// the schedules (plan.DeviceModel), and runs the cheapest, unless Algo,
// BRAID_ALGO or Table names one; BRAID_DEBUG=info logs each decision with
// its alternatives' costs.
type DeviceOptions struct {
	// Algo forces the algorithm of a collective, by the collective's name,
	// as BRAID_ALGO's entries do (and before them): {"allreduce": "ring",
	// "bcast": "chain:seg=4M"}. The fused kernels are named
	// "gpu_oneshot" (allreduce, one-shot; algo.GPUOneShot where the
	// kernels are off), "direct" (allreduce, the two-shot kernel; the
	// direct program where it is off) and "fused" (bcast, allgather,
	// reducescatter). A forced fused kernel runs wherever it fits, past
	// the caps below; one that cannot run the call is an InvalidArgument.
	Algo map[string]string
	// OneShotMax caps the allreduces, in bytes, that the planner may run
	// one-shot (every rank pushes its input to every peer and reduces all
	// inputs, in one kernel) on its own; 0 means DefaultOneShotMax(Size()),
	// negative never.
	OneShotMax int
	// DirectMax caps the allreduces, in bytes, that the planner may run
	// as the fused two-shot kernel ("direct": a reduce-scatter and an
	// allgather that move the vector through the slots in rounds); 0
	// means DefaultDirectMax(Size()), negative never (and "direct", when
	// named, then runs as a program).
	DirectMax int
	// FusedMax caps the broadcasts, and the blocks of allgathers and
	// reduce-scatters, in bytes, that the planner may run as fused kernels
	// (pushes into the peers' registered regions, device-side flags, in
	// rounds through the slots); 0 means DefaultFusedMax(collective,
	// Size()), negative never.
	FusedMax int
	// LLMax is the largest one-shot allreduce, in bytes, whose data
	// travels in low-latency lines: every 16-byte store carries 8 bytes
	// and the call's number, so a peer needs no separate flag and the
	// sender no fence (half the time on small vectors, twice the bytes on
	// the links). Vectors in whole 8-byte words qualify (a rank whose
	// buffers are not 8-byte aligned runs the kernel on aligned scratch).
	// 0 means BRAID_GPU_LL_MAX where set, else gpu.DefaultLLBytes(Size());
	// negative never.
	LLMax int
	// HostShare is the percentage of every round of a fused two-shot
	// allreduce or broadcast on more than 2 GPUs that travels through
	// pinned host memory, across PCIe, beside NVLink (the multi-path copy
	// of Temuçin's MASc thesis, Queen's University 2021, inside the kernel;
	// at most 50). 0 means BRAID_GPU_HOST_SHARE where set, else by kind and
	// size (gpu.DefaultHostShare: on four H200s 8–11 % of allreduces from
	// 16 MiB, 8–11 % of broadcasts from 64 MiB); negative never. The host
	// region takes 16 MiB of /dev/shm, pinned.
	HostShare int
	// SlotBytes is the size of each of the 2·Size() slots of the region
	// that every rank registers when the DeviceComm is made: the memory
	// peers push into, which the fused kernels cycle through a round at a
	// time. 0 means gpu.DefaultSlotBytes(Size()) (a 64 MiB region); it is
	// raised to OneShotMax.
	SlotBytes int
	// Groups[r] is the group of rank r's GPU (a socket, an NVLink clique)
	// for the hierarchical algorithms, "hierpipe" (the 3-stage pipelined
	// allreduce of Temuçin's MASc thesis, Queen's University 2021) and
	// "hier": they reduce within groups, then across. Nil puts every GPU in
	// one group; otherwise it has Size() entries.
	Groups []int
	// Segment is the bytes one message of a pipelined algorithm carries
	// (the ring's "segring", the broadcast chain); 0 chooses by size (see
	// DeviceSegment).
	Segment int
	// StreamOrdered makes calls return once they are queued, as NCCL's do,
	// instead of once their result is in place. The calls run in order on
	// Stream(): their buffers must be ready when the stream reaches them
	// (work that writes them is on Stream(), or on a stream Stream() waits
	// for), and hold the result once Synchronize returns or for work
	// queued on Stream() after the call. A call's error, a peer's death
	// say, is returned by a later call or by Synchronize.
	StreamOrdered bool

	// Tuning of the fused kernels, for experiments; the zero values
	// choose by kind and size. Each has a BRAID_GPU_* variable, read once
	// by NewDeviceComm for a field left at zero (deviceEnv lists them); a
	// value the field does not take, set or read, fails NewDeviceComm
	// with an InvalidArgument error naming it. Every rank must pass the
	// same values (NewDeviceComm compares them): ranks that cut a vector
	// differently would run kernels that never meet.

	// LL2Max is the largest one-shot allreduce, in bytes, that runs as a
	// two-shot in low-latency lines once above LLMax (BRAID_GPU_LL2_MAX;
	// 0 there: none); 0 means gpu.DefaultLL2Bytes(Size()), negative never.
	LL2Max int
	// LLBlocks is the grid of a call in low-latency lines, 1 to 256
	// (BRAID_GPU_LL_BLOCKS); 0 means a thread per 8-byte word.
	LLBlocks int
	// Blocks is the most blocks a pipelined fused kernel runs with, 1 to
	// 256 (BRAID_GPU_BLOCKS); 0 means by kind and size.
	Blocks int
	// Threads is the block size of a pipelined fused kernel, a multiple
	// of 32 from 32 to 512 (BRAID_GPU_THREADS); 0 means by kind and size.
	Threads int
	// MinRounds is the fewest rounds a pipelined fused kernel cuts a
	// vector into, where areas of 1 KiB a block allow
	// (BRAID_GPU_ROUNDS); 0 means gpu.DefaultMinRounds.
	MinRounds int
	// BcastRamp is how many halvings a fused broadcast on more than 2
	// GPUs cuts its last full round into, 1 to cuda.MaxRamp
	// (BRAID_GPU_BCAST_RAMP, 0 to cuda.MaxRamp); 0 means by size
	// (gpu.DefaultBcastRamp), negative none.
	BcastRamp int
	// Pull moves the data of programs by pull, receivers reading the
	// senders' memory, instead of push (BRAID_GPU_PULL=1).
	Pull bool
	// Stats prints, when the communicator closes, where the time of its
	// synchronous program calls went (BRAID_GPU_STATS=1).
	Stats bool

	// Table, where not nil, is a tuning table for calls on device buffers:
	// its entries name a schedule, or a fused kernel ("gpu_oneshot" and
	// "direct" for allreduce, "fused" for bcast, allgather and
	// reducescatter), and win over the model (plan.Default).
	Table *plan.Table
	// Model, where not nil, replaces plan.DefaultDeviceModel, the costs
	// the planner compares fused kernels and schedules with.
	Model *plan.DeviceModel

	// firstSeq is the fused kernels' first sequence number (tests: near
	// gpu.SeqLimit, to cross the reset); 0 means 1.
	firstSeq uint32
}

// deviceEnv are the BRAID_GPU_* variables: each sets a DeviceOptions
// field that the caller left at zero. parse reads the variable's value
// into the field's form (what a zero in the variable means becomes the
// field's negative "never"), or says what the variable takes.
var deviceEnv = []struct {
	name, field string
	get         func(o *DeviceOptions) *int
	parse       func(v string) (int, error)
}{
	{"BRAID_GPU_LL_MAX", "LLMax", func(o *DeviceOptions) *int { return &o.LLMax }, envBytes},
	{"BRAID_GPU_LL2_MAX", "LL2Max", func(o *DeviceOptions) *int { return &o.LL2Max }, envBytes},
	{"BRAID_GPU_LL_BLOCKS", "LLBlocks", func(o *DeviceOptions) *int { return &o.LLBlocks }, envRange(1, cuda.OneShotMaxBlocks, 1)},
	{"BRAID_GPU_BLOCKS", "Blocks", func(o *DeviceOptions) *int { return &o.Blocks }, envRange(1, cuda.OneShotMaxBlocks, 1)},
	{"BRAID_GPU_THREADS", "Threads", func(o *DeviceOptions) *int { return &o.Threads }, envRange(32, 512, 32)},
	{"BRAID_GPU_ROUNDS", "MinRounds", func(o *DeviceOptions) *int { return &o.MinRounds }, envRange(1, 1<<20, 1)},
	{"BRAID_GPU_BCAST_RAMP", "BcastRamp", func(o *DeviceOptions) *int { return &o.BcastRamp }, envZeroNever(envRange(0, cuda.MaxRamp, 1))},
	{"BRAID_GPU_HOST_SHARE", "HostShare", func(o *DeviceOptions) *int { return &o.HostShare }, envZeroNever(envRange(0, 50, 1))},
}

// deviceFlags are the BRAID_GPU_* variables of DeviceOptions' switches:
// "1" sets the field, "0" leaves it.
var deviceFlags = []struct {
	name, field string
	get         func(o *DeviceOptions) *bool
}{
	{"BRAID_GPU_PULL", "Pull", func(o *DeviceOptions) *bool { return &o.Pull }},
	{"BRAID_GPU_STATS", "Stats", func(o *DeviceOptions) *bool { return &o.Stats }},
}

// envBytes reads a size in bytes (4096, 256K); 0 means never (-1).
func envBytes(v string) (int, error) {
	b, err := size.Parse(v)
	if err != nil || b < 0 || b > math.MaxInt32 {
		return 0, errors.New("want a size in bytes (256K, 1M; 0 for none)")
	}
	if b == 0 {
		return -1, nil
	}
	return int(b), nil
}

// envRange reads an integer from lo to hi, a multiple of step.
func envRange(lo, hi, step int) func(string) (int, error) {
	return func(v string) (int, error) {
		x, err := strconv.Atoi(v)
		if err != nil || x < lo || x > hi || x%step != 0 {
			if step > 1 {
				return 0, fmt.Errorf("want a multiple of %d from %d to %d", step, lo, hi)
			}
			return 0, fmt.Errorf("want an integer from %d to %d", lo, hi)
		}
		return x, nil
	}
}

// envZeroNever makes a 0 that parse reads the field's "never" (-1).
func envZeroNever(parse func(string) (int, error)) func(string) (int, error) {
	return func(v string) (int, error) {
		x, err := parse(v)
		if err == nil && x == 0 {
			x = -1
		}
		return x, err
	}
}

// resolve fills the fields left at zero from the BRAID_GPU_* variables
// and checks every field, naming the variable or field at fault.
func (o *DeviceOptions) resolve(getenv func(string) string) error {
	for _, e := range deviceEnv {
		v := getenv(e.name)
		if v == "" || *e.get(o) != 0 {
			continue
		}
		x, err := e.parse(v)
		if err != nil {
			return fmt.Errorf("%s=%q: %v", e.name, v, err)
		}
		*e.get(o) = x
	}
	for _, e := range deviceFlags {
		switch v := getenv(e.name); v {
		case "", "0":
		case "1":
			*e.get(o) = true
		default:
			return fmt.Errorf("%s=%q: want 1 or 0", e.name, v)
		}
	}
	check := func(field string, v, lo, hi, step int) error {
		if v != 0 && (v < lo || v > hi || v%step != 0) {
			return fmt.Errorf("DeviceOptions.%s = %d: want 0 or a multiple of %d from %d to %d", field, v, step, lo, hi)
		}
		return nil
	}
	return errors.Join(
		check("LLBlocks", o.LLBlocks, 1, cuda.OneShotMaxBlocks, 1),
		check("Blocks", o.Blocks, 1, cuda.OneShotMaxBlocks, 1),
		check("Threads", o.Threads, 32, 512, 32),
		check("MinRounds", o.MinRounds, 1, 1<<20, 1),
		check("BcastRamp", max(o.BcastRamp, 0), 1, cuda.MaxRamp, 1),
		check("HostShare", max(o.HostShare, 0), 1, 50, 1),
	)
}

// shared lists the settings every rank must pass alike, resolved, for
// gpu.Options.Shared: ranks that decide differently from them would run
// different kernels or schedules and wait for each other until the
// deadline.
func (o *DeviceOptions) shared() []gpu.Setting {
	var out []gpu.Setting
	add := func(name string, v any) { out = append(out, gpu.Setting{Name: name, Value: fmt.Sprint(v)}) }
	for _, e := range deviceEnv {
		add("DeviceOptions."+e.field+" ("+e.name+")", *e.get(o))
	}
	add("DeviceOptions.Pull (BRAID_GPU_PULL)", o.Pull)
	algos := make([]string, 0, len(o.Algo))
	for k, v := range o.Algo {
		algos = append(algos, k+"="+v)
	}
	slices.Sort(algos)
	add("DeviceOptions.Algo", strings.Join(algos, ","))
	add("DeviceOptions.OneShotMax", o.OneShotMax)
	add("DeviceOptions.DirectMax", o.DirectMax)
	add("DeviceOptions.FusedMax", o.FusedMax)
	add("DeviceOptions.SlotBytes", o.SlotBytes)
	add("DeviceOptions.Segment", o.Segment)
	add("DeviceOptions.Groups", o.Groups)
	add("first sequence number", o.firstSeq)
	return out
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
// ("bcast", "allgather", "reducescatter") on n GPUs. On H200s (braid bench
// --device cuda, docs/PERFORMANCE.md) the pipelined fused kernels beat the
// programs at every size but two: a broadcast on two GPUs above 16 MiB,
// where one copy-engine push moves 386 GB/s against the kernel's 337 at
// 1 GiB; and a reduce-scatter on four GPUs at 64 MiB, where the ring moved
// 219 GB/s busbw against 207 (the kernel wins from 256 MiB: 318 against
// 296 at 1 GiB), which the default leaves to the kernel.
func DefaultFusedMax(coll string, n int) int {
	if coll == "bcast" && n <= 2 {
		return 16 << 20
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
// types, ops and roots; a DeviceComm runs one call at a time.
type DeviceComm struct {
	c      *Comm
	w      *cuda.Worker
	g      *gpu.Comm
	opts   DeviceOptions
	model  plan.DeviceModel
	mu     sync.Mutex
	plans  map[devKey]*devPlan
	closed bool
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
	algo  string
	fused *cuda.OneShot
	prog  *sched.Program
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
	d := &DeviceComm{c: c, plans: map[devKey]*devPlan{}, model: plan.DefaultDeviceModel()}
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
	badOpts := werr != nil
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
		Shared: o.shared(), FirstSeq: o.firstSeq,
	}); err != nil {
		w.Close()
		return nil, deviceError(c.rank, call, err)
	}
	if ok, why := d.g.Fused(); ok {
		c.w.debugf("info", "device comm on GPU %d: fused kernels (pushes over NVLink, device-side flags), which the planner weighs against schedules; its own choices are capped at: allreduce one-shot %s (in low-latency lines up to %s), two-shot %s; bcast %s; allgather and reducescatter blocks %s and %s",
			dev, sizeLimit(d.oneShotMax()), sizeLimit(min(d.g.LLBytes(), d.oneShotMax())), sizeLimit(d.directMax()), sizeLimit(d.fusedMax(sched.Bcast)),
			sizeLimit(d.fusedMax(sched.Allgather)), sizeLimit(d.fusedMax(sched.ReduceScatter)))
		c.w.debugf("info", "device comm on GPU %d: multi-path through host memory: %s", dev, d.g.HostPath())
	} else if why != "" {
		c.w.debugf("info", "device comm on GPU %d: no fused kernels, every call runs as a program: %s", dev, why)
	}
	return d, nil
}

// fusedMax is the largest broadcast or allgather or reduce-scatter block,
// in bytes, that the planner runs fused unless told to.
func (d *DeviceComm) fusedMax(coll sched.Collective) int {
	m := d.opts.FusedMax
	if m == 0 {
		m = DefaultFusedMax(coll.String(), d.c.Size())
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
	return classify(rank, call, err)
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
	k := gpu.Call{Params: p, Algo: pl.algo, Fused: pl.fused, Prog: pl.prog, DType: dt, Op: op, In: in, Out: out}
	if d.opts.StreamOrdered {
		// The call outlives this function: only a deadline is passed on.
		dl, ok := ctx.Deadline()
		if !ok {
			dl = time.Now().Add(c.w.opts.Timeout)
		}
		err = d.g.Enqueue(dl, &k)
	} else {
		ctx, cancel := c.deadline(ctx)
		defer cancel()
		err = d.g.Run(ctx, &k)
	}
	if err != nil {
		return deviceError(c.rank, name, err)
	}
	return nil
}

// fusedNames are the candidates that fused kernels make, by collective:
// the one-shot and two-shot allreduce take the names of the algorithms
// they fuse (algo.GPUOneShot, and "direct": a reduce-scatter and an
// allgather), and run as those programs where the kernels are off.
var fusedNames = map[sched.Collective][]struct {
	name string
	kind cuda.FusedKind
}{
	sched.Allreduce:     {{algo.GPUOneShot.Name(), cuda.FusedOneShot}, {"direct", cuda.FusedTwoShot}},
	sched.Bcast:         {{deviceFused, cuda.FusedBcast}},
	sched.Allgather:     {{deviceFused, cuda.FusedAllgather}},
	sched.ReduceScatter: {{deviceFused, cuda.FusedReduceScatter}},
}

// deviceFused is the name of the fused broadcast, allgather and
// reduce-scatter among a call's candidates (choice.Fused).
const deviceFused = choice.Fused

// fusedKinds names cuda's kinds as plan.Fused does.
var fusedKinds = map[cuda.FusedKind]string{
	cuda.FusedOneShot: plan.FusedOneShot, cuda.FusedOneShotLL: plan.FusedOneShotLL, cuda.FusedTwoShotLL: plan.FusedTwoShotLL,
	cuda.FusedTwoShot: plan.FusedTwoShot, cuda.FusedBcast: plan.FusedBcast, cuda.FusedAllgather: plan.FusedAllgather,
	cuda.FusedReduceScatter: plan.FusedReduceScatter,
}

// plan returns (and caches) the decision for a call of p on dt and op:
// the planner's, between the fused kernels that can run it and the
// schedules, each costed with the device model (plan.DeviceModel), unless
// DeviceOptions.Algo or BRAID_ALGO forces one. The fused kernels the
// planner chooses on its own are capped by DeviceOptions' OneShotMax,
// DirectMax and FusedMax (their defaults are where measurements showed
// them to lose); a forced one runs wherever it fits. d.mu is held.
func (d *DeviceComm) plan(p sched.Params, dt DType, op Op) (*devPlan, error) {
	if !p.Coll.Reduces() {
		op = Sum // unused: one plan whatever op the caller passed
	}
	key := devKey{p.Coll, p.Count, p.Root, dt, op}
	if pl, ok := d.plans[key]; ok {
		return pl, nil
	}
	c := d.c
	es := dt.Size()
	bad := func(kind ErrorKind, format string, args ...any) (*devPlan, error) {
		return nil, &Error{Kind: kind, Rank: c.rank, Call: p.Coll.String(), Peer: -1, Err: fmt.Errorf(format, args...)}
	}
	if g := d.opts.Groups; g != nil {
		if len(g) != p.NRanks {
			return bad(InvalidArgument, "DeviceOptions.Groups has %d entries for %d ranks", len(g), p.NRanks)
		}
		names := make([]string, len(g))
		for r, x := range g {
			names[r] = strconv.Itoa(x)
		}
		p.Layout = sched.NewLayout(names, nil)
	}
	// What forces a choice: DeviceOptions.Algo, else BRAID_ALGO's entry
	// for the collective, else its bare name where the call has it.
	var force plan.Choice
	forcedBy := ""
	if name := d.opts.Algo[p.Coll.String()]; name != "" {
		ch, err := plan.ParseChoice(name)
		if err != nil {
			return bad(InvalidArgument, "DeviceOptions.Algo: %v", err)
		}
		force, forcedBy = ch, "DeviceOptions.Algo"
	} else if ch, ok := c.force.perCol[p.Coll]; ok {
		force, forcedBy = ch, "BRAID_ALGO="+p.Coll.String()+"="+ch.String()
	}
	bytes := p.Count * es
	var cand []plan.Candidate
	fusedOf := map[string]*cuda.OneShot{}
	capped := map[string]bool{}
	for _, f := range fusedNames[p.Coll] {
		a, ok := d.g.Shape(f.kind, p, dt, op)
		if !ok {
			continue
		}
		pf := &plan.Fused{Kind: fusedKinds[a.Kind], Blocks: a.Grid(), Threads: a.Threads, Rounds: a.Rounds(),
			HostBytes: a.HostBytes, Area: a.Area, Ramp: a.Ramp}
		if pf.Threads == 0 {
			pf.Threads = cuda.DefaultThreads
		}
		if a.HostBytes > 0 {
			pf.HostShare = d.g.HostShareOf(&a)
		}
		cand = append(cand, plan.Candidate{Name: f.name, Params: p, Cost: d.model.Cost(pf, p, es), Fused: pf})
		fusedOf[f.name] = &a
		switch f.kind {
		case cuda.FusedOneShot:
			capped[f.name] = d.opts.OneShotMax < 0 || bytes > d.oneShotMax()
		case cuda.FusedTwoShot:
			capped[f.name] = bytes > d.directMax()
		default:
			capped[f.name] = bytes > d.fusedMax(p.Coll)
		}
	}
	schedules := algo.ForCollective(p.Coll)
	if p.Coll == sched.Allreduce {
		schedules = append(schedules, algo.GPUOneShot)
	}
	for _, a := range schedules {
		if _, ok := fusedOf[a.Name()]; ok {
			continue // the fused kernel stands for it
		}
		sp := d.segmented(p, a.Name(), es)
		if force.Algo == a.Name() {
			sp = force.Apply(sp, es)
		}
		if a.Supports(sp) != nil {
			continue
		}
		cost := math.NaN()
		if k, ok := a.(algo.Coster); ok {
			cost = k.Cost(sp, es, d.model.Programs)
		}
		cand = append(cand, plan.Candidate{Name: a.Name(), Params: sp, Cost: cost})
	}
	req := plan.Request{Params: p, ElemSize: es}
	var dec plan.Decision
	switch i := slices.IndexFunc(cand, func(x plan.Candidate) bool { return x.Name == force.Algo }); {
	case force.Algo != "" && i >= 0:
		x := cand[i]
		dec = plan.Decision{Algo: x.Name, Params: x.Params, Fused: x.Fused, Reason: "forced by " + forcedBy}
	case force.Algo != "":
		var names []string
		for _, x := range cand {
			names = append(names, x.Name)
		}
		return bad(InvalidArgument, "%s forces %s, which cannot run %v of %d elements on %d GPUs (candidates: %s)",
			forcedBy, force, p.Coll, p.Count, p.NRanks, strings.Join(names, ", "))
	default:
		auto := slices.DeleteFunc(slices.Clone(cand), func(x plan.Candidate) bool { return capped[x.Name] })
		if bare := c.force.any; bare.Algo != "" {
			if i := slices.IndexFunc(auto, func(x plan.Candidate) bool { return x.Name == bare.Algo }); i >= 0 {
				x := auto[i]
				dec = plan.Decision{Algo: x.Name, Params: bare.Apply(x.Params, es), Fused: x.Fused, Reason: "forced by BRAID_ALGO=" + bare.String()}
				break
			}
		}
		if dec.Algo == "" {
			dec = plan.Default{Table: d.opts.Table}.Plan(req, auto)
		}
	}
	if dec.Algo == "" {
		return bad(Unsupported, "no algorithm runs %v of %d elements on %d GPUs", p.Coll, p.Count, p.NRanks)
	}
	pl := &devPlan{algo: dec.Algo}
	what := dec.Algo
	if dec.Fused != nil {
		pl.fused = fusedOf[dec.Algo]
		what += " [fused " + dec.Fused.String() + "]"
	} else {
		a, err := d.lookup(p.Coll, dec.Algo)
		if err != nil {
			return bad(InvalidArgument, "%v", err)
		}
		gp := p
		gp.Segment, gp.Radix = dec.Params.Segment, dec.Params.Radix
		if err := a.Supports(gp); err != nil {
			return bad(InvalidArgument, "%s: %v", dec.Algo, err)
		}
		prog := a.Program(gp, c.Rank())
		pl.prog = &prog
		what += " [program]"
	}
	if c.rank == 0 {
		var off []string
		for _, x := range cand {
			if capped[x.Name] {
				off = append(off, fmt.Sprintf("%s [fused %s] %s", x.Name, x.Fused, formatCost(x.Cost)))
			}
		}
		note := ""
		if len(off) > 0 {
			note = "; capped by DeviceOptions (OneShotMax, DirectMax, FusedMax): " + strings.Join(off, ", ")
		}
		c.w.debugf("info", "device %v n=%d count=%d (%d B) root=%d: %s (%s%s)", p.Coll, p.NRanks, p.Count, bytes, p.Root, what, dec.Reason, note)
	}
	d.plans[key] = pl
	return pl, nil
}

// formatCost writes a model's seconds for the log.
func formatCost(s float64) string {
	if math.IsNaN(s) {
		return "no cost model"
	}
	return time.Duration(s * 1e9).String()
}

// lookup returns the schedule algorithm named name for coll.
func (d *DeviceComm) lookup(coll sched.Collective, name string) (algo.Algorithm, error) {
	if coll == sched.Allreduce && name == algo.GPUOneShot.Name() {
		return algo.GPUOneShot, nil
	}
	return algo.Lookup(coll, name)
}

// segmented returns p with the segment a program of algorithm name runs
// with on device buffers: DeviceOptions.Segment, else DeviceSegment for
// the broadcast's chain and the pipelined ring's smallest (a quarter of a
// block above), else the whole vector.
func (d *DeviceComm) segmented(p sched.Params, name string, es int) sched.Params {
	p.Segment = max(p.Count, 1)
	switch {
	case d.opts.Segment > 0:
		p.Segment = max(d.opts.Segment/es, 1)
	case p.Coll == sched.Bcast:
		p.Segment = max(DeviceSegment/es, 1)
	case name == "segring":
		block := (p.Count + p.NRanks - 1) / p.NRanks
		p.Segment = max(DeviceSegment/es, block/4, 1)
	}
	return p
}

// Algorithm returns the name of what a call of coll on count elements of
// es bytes runs (a sum, for reductions): a schedule's algorithm, or the
// fused kernel's candidate name ("gpu_oneshot", "direct", "fused").
func (d *DeviceComm) Algorithm(coll sched.Collective, count, es int) (string, error) {
	dt, ok := map[int]DType{1: Uint8, 2: Float16, 4: Float32, 8: Float64}[es]
	if !ok {
		return "", fmt.Errorf("no element type of %d bytes", es)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	pl, err := d.plan(sched.Params{Coll: coll, NRanks: d.c.Size(), Count: count}, dt, Sum)
	if err != nil {
		return "", err
	}
	return pl.algo, nil
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
