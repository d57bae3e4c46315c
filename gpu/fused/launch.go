package fused

import (
	"fmt"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
)

// Launch enqueues the fused kernel a on s, in c's context (the kernels
// are package cuda's embedded module; cuda.Ctx.Kernel finds a's). It
// checks a first: an error says what does not fit, and nothing runs. A
// call of no elements runs nothing. Where the kernels and the driver
// allow (cuda.Ctx.KernelsOverlap), the launch is overlapped: the GPU
// may begin the kernel's blocks as the kernel ahead of it on s ends, and
// they wait on the GPU for it, which takes the gap between two small
// kernels on a stream or in a graph off the call's time.
func Launch(c *cuda.Ctx, s cuda.Stream, a Kernel) error {
	if err := a.check(); err != nil {
		return err
	}
	if a.Count == 0 {
		return nil
	}
	if err := c.LoadKernels(); err != nil {
		return err
	}
	n := len(a.Regions)
	if a.Kind == Bcast && (a.Root < 0 || a.Root >= n) {
		return fmt.Errorf("fused: broadcast: root %d of %d", a.Root, n)
	}
	var st argSet
	family, args := a.args(&st)
	f, err := c.Kernel(family, a.DType, a.Op)
	if err != nil {
		return err
	}
	var buf [maxArgs]uint64
	if c.KernelsOverlap() {
		// The kernel may start while the one ahead of it still ends:
		// it waits for it on the GPU (kernels/fused.cuh, seq_begin).
		return c.LaunchOverlapped(f, cuda.D1(a.Grid()), cuda.D1(a.threads()), 0, s, packArgs(args, buf[:0])...)
	}
	return c.Launch(f, cuda.D1(a.Grid()), cuda.D1(a.threads()), 0, s, packArgs(args, buf[:0])...)
}

// argSet holds one parameter list of each shape, so that args can fill
// one in the caller's memory: Launch keeps it on its stack, and a launch
// per call allocates nothing for its parameters.
type argSet struct {
	vec        vecArgs
	host       hostVecArgs
	gather     gatherArgs
	hostGather hostGatherArgs
	bcast      bcastArgs
}

// packArgs appends args to dst through their concrete type, so that
// neither the list args points to nor dst escapes (as a call through the
// interface would make them).
func packArgs(args kernelArgs, dst []uint64) []uint64 {
	switch v := args.(type) {
	case *vecArgs:
		return v.pack(dst)
	case *hostVecArgs:
		return v.pack(dst)
	case *gatherArgs:
		return v.pack(dst)
	case *hostGatherArgs:
		return v.pack(dst)
	case *bcastArgs:
		return v.pack(dst)
	}
	panic("fused: a parameter list of no known shape") // args returns only the five
}

// check reports what of a no kernel can run: a rank, a grid, a ramp, a
// host share or a size out of the kernels' bounds.
func (a *Kernel) check() error {
	n := len(a.Regions)
	switch {
	case !dtype.Supports(a.DType, a.Op):
		return fmt.Errorf("fused: %v kernel: op %v is not defined on %v", a.Kind, a.Op, a.DType)
	case n < 1 || n > MaxRanks || a.Rank < 0 || a.Rank >= n:
		return fmt.Errorf("fused: %v kernel: rank %d of %d (at most %d ranks)", a.Kind, a.Rank, n, MaxRanks)
	case a.Ramp < 0 || a.Ramp > MaxRamp:
		return fmt.Errorf("fused: %v kernel: ramp %d (0 to %d)", a.Kind, a.Ramp, MaxRamp)
	case a.Count < 0 || a.SlotBytes%256 != 0 || a.Kind.Slot(a.Count, a.DType.Size(), n) > a.SlotBytes || a.Rounds() == 0:
		return fmt.Errorf("fused: %v kernel: %d elements of %d bytes in slots of %d bytes and %d blocks", a.Kind, a.Count, a.DType.Size(), a.SlotBytes, a.Grid())
	case a.Stride != 0 && (a.Kind != ReduceScatter || a.Stride < a.Count || a.Stride*a.DType.Size()%16 != 0):
		return fmt.Errorf("fused: %v kernel: stride %d for %d elements of %d bytes (a reduce-scatter's, at least the count, in 16-byte words)", a.Kind, a.Stride, a.Count, a.DType.Size())
	case a.Blocks < 0 || a.Blocks > MaxBlocks:
		return fmt.Errorf("fused: %v kernel: %d blocks (at most %d)", a.Kind, a.Blocks, MaxBlocks)
	case a.hostBytes() > HostFits(a.Kind, a.Grid(), n):
		return fmt.Errorf("fused: %v kernel: %d bytes a block through the host region, at most %d", a.Kind, a.hostBytes(), HostFits(a.Kind, a.Grid(), n))
	case a.Seqs == 0:
		return fmt.Errorf("fused: %v kernel: no sequence counters (Kernel.Seqs)", a.Kind)
	case a.Status == 0:
		return fmt.Errorf("fused: %v kernel: no status words (Kernel.Status)", a.Kind)
	case a.Rounds() >= endFlag:
		return fmt.Errorf("fused: %v kernel: %d rounds (fewer than 2^31)", a.Kind, a.Rounds())
	case a.SignalEnd && a.Grid() != 1:
		return fmt.Errorf("fused: %v kernel: only a kernel of one block stores its end (Kernel.SignalEnd), this one has %d", a.Kind, a.Grid())
	case a.Threads < 0 || a.Threads > Threads || a.Threads%32 != 0:
		return fmt.Errorf("fused: %v kernel: %d threads a block (a multiple of 32, at most %d)", a.Kind, a.Threads, Threads)
	case a.Kind == OneShotLL && a.Count > 0 && !LLFits(a.In, a.Out, a.Count, a.DType.Size()):
		return fmt.Errorf("fused: low-latency one-shot: %d elements of %d bytes (at most %d bytes, in 8-byte words, from and to 8-byte aligned buffers)",
			a.Count, a.DType.Size(), LLMax)
	case (a.Kind == ReduceScatterLL || a.Kind == AllgatherLL) && a.Count > 0 && !LLFits(a.In, a.Out, a.Count, a.DType.Size()):
		return fmt.Errorf("fused: %v kernel: blocks of %d elements of %d bytes (at most %d bytes, in 8-byte words, from and to 8-byte aligned buffers)",
			a.Kind, a.Count, a.DType.Size(), LLMax)
	case a.Kind == TwoShotLL && a.Count > 0 && !TwoShotLLFits(a.In, a.Out, a.Count, a.DType.Size(), n):
		return fmt.Errorf("fused: low-latency two-shot: %d elements of %d bytes on %d ranks (at most %d bytes, in 8-byte words, from and to 8-byte aligned buffers)",
			a.Count, a.DType.Size(), n, TwoShotLLMax(n))
	}
	return nil
}

// The kernels' parameters, typed, in the order the kernels declare them
// (kernels/*.cuh, which reduce.cu includes); each field's cu tag is the
// parameter's name there (Regions: r0 to r7), and TestKernelArgs holds
// every list against the source and every field's size against the
// embedded PTX. cuda.Ctx.Launch passes each as
// the low-order bytes of a uint64, which pack writes in field order.

// kernelArgs are the parameters of one of the fused kernels.
type kernelArgs interface {
	// pack appends the parameters, in order, to dst.
	pack(dst []uint64) []uint64
}

// endFlag, in the rounds parameter, asks a kernel of one block to store
// its end (kernels/fused.cuh: END_FLAG). A call's rounds stay far below
// it: the sequence is reset before it passes SeqLimit, 2^30.
const endFlag = 1 << 31

// maxArgs is the most parameters a fused kernel takes (the broadcast's).
const maxArgs = 22

// seqArgs follow each kernel's leading parameters: the sequence counters
// and the rounds by which the call advances them (with endFlag where the
// kernel is to store its end: Kernel.SignalEnd), the ranks, and the
// slots (FUSED_KERNEL; the broadcast and the allgather alike).
type seqArgs struct {
	Seqs      cuda.DevicePtr `cu:"seqs"`
	Rounds    uint32         `cu:"rounds"`
	Rank      uint32         `cu:"rank"`
	NRanks    uint32         `cu:"nranks"`
	SlotBytes uint64         `cu:"slot_bytes"`
	AreaBytes uint64         `cu:"area_bytes"`
}

func (p *seqArgs) pack(dst []uint64) []uint64 {
	return append(dst, uint64(p.Seqs), uint64(p.Rounds), uint64(p.Rank), uint64(p.NRanks), p.SlotBytes, p.AreaBytes)
}

// hostArgs are the multi-path kernels' host region (HOST_PARAMS).
type hostArgs struct {
	Host      cuda.DevicePtr `cu:"host"`
	HostBytes uint64         `cu:"host_bytes"`
}

func (p *hostArgs) pack(dst []uint64) []uint64 {
	return append(dst, uint64(p.Host), p.HostBytes)
}

// tailArgs end every kernel's parameters: the wait's bound, the status
// word, and every rank's region.
type tailArgs struct {
	TimeoutNS uint64                   `cu:"timeout_ns"`
	Status    cuda.DevicePtr           `cu:"status"`
	Regions   [MaxRanks]cuda.DevicePtr `cu:"r"`
}

func (p *tailArgs) pack(dst []uint64) []uint64 {
	dst = append(dst, p.TimeoutNS, uint64(p.Status))
	for _, r := range p.Regions {
		dst = append(dst, uint64(r))
	}
	return dst
}

// vecArgs are those of braid_{oneshot,oneshotll,twoshotll,rsll}_<op>_<type>.
type vecArgs struct {
	In  cuda.DevicePtr `cu:"in"`
	Out cuda.DevicePtr `cu:"out"`
	N   uint64         `cu:"n"`
	seqArgs
	tailArgs
}

func (p *vecArgs) pack(dst []uint64) []uint64 {
	dst = append(dst, uint64(p.In), uint64(p.Out), p.N)
	return p.tailArgs.pack(p.seqArgs.pack(dst))
}

// hostVecArgs are those of braid_{twoshot,rsfused}_<op>_<type>.
type hostVecArgs struct {
	In  cuda.DevicePtr `cu:"in"`
	Out cuda.DevicePtr `cu:"out"`
	N   uint64         `cu:"n"`
	seqArgs
	hostArgs
	tailArgs
}

func (p *hostVecArgs) pack(dst []uint64) []uint64 {
	dst = append(dst, uint64(p.In), uint64(p.Out), p.N)
	return p.tailArgs.pack(p.hostArgs.pack(p.seqArgs.pack(dst)))
}

// gatherArgs are those of braid_allgather_ll.
type gatherArgs struct {
	In    cuda.DevicePtr `cu:"in"`
	Out   cuda.DevicePtr `cu:"out"`
	Bytes uint64         `cu:"bytes"`
	seqArgs
	tailArgs
}

func (p *gatherArgs) pack(dst []uint64) []uint64 {
	dst = append(dst, uint64(p.In), uint64(p.Out), p.Bytes)
	return p.tailArgs.pack(p.seqArgs.pack(dst))
}

// hostGatherArgs are those of braid_allgather_fused.
type hostGatherArgs struct {
	In    cuda.DevicePtr `cu:"in"`
	Out   cuda.DevicePtr `cu:"out"`
	Bytes uint64         `cu:"bytes"`
	seqArgs
	hostArgs
	tailArgs
}

func (p *hostGatherArgs) pack(dst []uint64) []uint64 {
	dst = append(dst, uint64(p.In), uint64(p.Out), p.Bytes)
	return p.tailArgs.pack(p.hostArgs.pack(p.seqArgs.pack(dst)))
}

// bcastArgs are those of braid_bcast_fused.
type bcastArgs struct {
	Buf    cuda.DevicePtr `cu:"buf"`
	Bytes  uint64         `cu:"bytes"`
	Root   uint32         `cu:"root"`
	RampIn uint32         `cu:"ramp_in"`
	seqArgs
	hostArgs
	tailArgs
}

func (p *bcastArgs) pack(dst []uint64) []uint64 {
	dst = append(dst, uint64(p.Buf), p.Bytes, uint64(p.Root), uint64(p.RampIn))
	return p.tailArgs.pack(p.hostArgs.pack(p.seqArgs.pack(dst)))
}

// args returns the kernel family that runs a (cuda.Ctx.Kernel's family:
// braid_<family>_<op>_<type>, or braid_<family> for the broadcast and the
// allgather) and its parameters, written into st.
func (a *Kernel) args(st *argSet) (string, kernelArgs) {
	s := seqArgs{Seqs: a.Seqs, Rounds: uint32(max(a.Rounds(), 1)), Rank: uint32(a.Rank), NRanks: uint32(len(a.Regions)),
		SlotBytes: uint64(a.SlotBytes), AreaBytes: uint64(max(a.Area, 0))}
	if a.SignalEnd {
		s.Rounds |= endFlag
	}
	h := hostArgs{Host: a.Host, HostBytes: uint64(a.hostBytes())}
	t := tailArgs{TimeoutNS: uint64(max(a.Timeout, 0)), Status: a.Status}
	copy(t.Regions[:], a.Regions)
	bytes := uint64(a.Count * a.DType.Size())
	vec := func() *vecArgs {
		st.vec = vecArgs{In: a.In, Out: a.Out, N: uint64(a.Count), seqArgs: s, tailArgs: t}
		return &st.vec
	}
	switch a.Kind {
	case Bcast:
		st.bcast = bcastArgs{Buf: a.Out, Bytes: bytes, Root: uint32(a.Root), RampIn: uint32(a.Ramp), seqArgs: s, hostArgs: h, tailArgs: t}
		return "bcast_fused", &st.bcast
	case AllgatherLL:
		st.gather = gatherArgs{In: a.In, Out: a.Out, Bytes: bytes, seqArgs: s, tailArgs: t}
		return "allgather_ll", &st.gather
	case Allgather:
		st.hostGather = hostGatherArgs{In: a.In, Out: a.Out, Bytes: bytes, seqArgs: s, hostArgs: h, tailArgs: t}
		return "allgather_fused", &st.hostGather
	case OneShotLL:
		return "oneshotll", vec()
	case TwoShotLL:
		return "twoshotll", vec()
	case TwoShot:
		st.host = hostVecArgs{In: a.In, Out: a.Out, N: uint64(a.Count), seqArgs: s, hostArgs: h, tailArgs: t}
		return "twoshot", &st.host
	case ReduceScatter:
		st.host = hostVecArgs{In: a.In, Out: a.Out, N: uint64(a.BlockCount()), seqArgs: s, hostArgs: h, tailArgs: t}
		return "rsfused", &st.host
	case ReduceScatterLL:
		return "rsll", vec()
	}
	return "oneshot", vec()
}
