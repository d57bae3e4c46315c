package fused

import (
	"strconv"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
)

// Region layout, as kernels/layout.cuh lays out the region every rank
// registers: flags for MaxBlocks blocks and MaxRanks ranks, then the slots
// from SlotsOffset, then the low-latency lines (LLOffset).
const (
	MaxRanks    = 8    // ranks a fused kernel takes (its region bases r0..r7)
	MaxBlocks   = 256  // ONESHOT_BLOCKS: the flags of this many blocks
	SlotsOffset = 8192 // ONESHOT_SLOTS: where the slots start
)

// SeqWords is the number of sequence counters (32-bit words of device
// memory) that the fused kernels of one communicator keep on each rank
// (Kernel.Seqs): one per block index, all holding the next call's first
// sequence number between kernels (kernels/fused.cuh, seq_begin and
// seq_end).
const SeqWords = MaxBlocks

// Threads is the block size of a fused kernel whose Kernel.Threads is 0,
// and the most it takes (__launch_bounds__(512)).
const Threads = 512

// MaxRamp is the largest Kernel.Ramp.
const MaxRamp = 4

// BcastDirectMax is the largest fused broadcast that the root pushes to
// every peer in one phase (kernels/layout.cuh, BCAST_DIRECT_MAX); larger
// ones on more than 2 GPUs scatter parts, which the others then exchange.
const BcastDirectMax = 1 << 20

// DefaultBlocks is the most blocks a fused kernel runs with when
// Kernel.Blocks is 0.
const DefaultBlocks = 64

// LLMax is the largest vector, in bytes, of the low-latency one-shot
// allreduce (OneShotLL). Its lines carry 8 bytes of data in 16
// (kernels/layout.cuh, ONESHOT_LL_SLOT).
const LLMax = 256 << 10

// HostRegionBytes is the size of the host region of the multi-path
// kernels (Kernel.Host): a half per parity of rounds, as the slots
// (kernels/layout.cuh, HOST_HALF).
const HostRegionBytes = 16 << 20

// RegionBytes is the size of a region for n ranks with slots of
// slotBytes: the flags, then two parities of n slots, then two parities of
// n sets of low-latency lines (LLOffset).
func RegionBytes(n, slotBytes int) int {
	return LLOffset(n, slotBytes) + 2*n*2*LLMax
}

// LLOffset is where a region's low-latency lines start; the host clears
// them, with the flags, before the region is first used.
func LLOffset(n, slotBytes int) int { return SlotsOffset + 2*n*slotBytes }

// LLFits reports whether OneShotLL can run an allreduce of count elements
// of es bytes from in to out, or ReduceScatterLL or AllgatherLL a call of
// blocks of that many: LLSizeFits, and both buffers 8-byte aligned.
func LLFits(in, out cuda.DevicePtr, count, es int) bool {
	return LLSizeFits(count, es) && in%8 == 0 && out%8 == 0
}

// LLSizeFits reports whether an allreduce of count elements of es bytes
// fits OneShotLL (or a block of that many ReduceScatterLL and
// AllgatherLL: a source's lines hold as much): at most LLMax bytes, in
// whole 8-byte words. It depends on nothing but the size, which every
// rank shares.
func LLSizeFits(count, es int) bool {
	b := count * es
	return b > 0 && b <= LLMax && b%8 == 0
}

// TwoShotLLMax is the largest vector, in bytes, of the low-latency
// two-shot allreduce on n ranks (TwoShotLL): a chunk of the vector per
// rank, each in half of a source's lines.
func TwoShotLLMax(n int) int { return LLMax / 2 * max(n, 1) }

// TwoShotLLFits reports whether TwoShotLL can run an allreduce of count
// elements of es bytes from in to out on n ranks: TwoShotLLSizeFits, and
// both buffers 8-byte aligned.
func TwoShotLLFits(in, out cuda.DevicePtr, count, es, n int) bool {
	return TwoShotLLSizeFits(count, es, n) && in%8 == 0 && out%8 == 0
}

// TwoShotLLSizeFits reports whether an allreduce of count elements of es
// bytes on n ranks fits TwoShotLL: at most TwoShotLLMax(n) bytes, in
// whole 8-byte words.
func TwoShotLLSizeFits(count, es, n int) bool {
	b := count * es
	return b > 0 && n >= 2 && (b/8+n-1)/n*8 <= LLMax/2 && b%8 == 0
}

// Blocks is the grid a fused kernel uses for bytes when Kernel.Blocks is
// 0: BlocksFor(bytes, DefaultBlocks).
func Blocks(bytes int) int { return BlocksFor(bytes, DefaultBlocks) }

// BlocksFor is a grid for a fused kernel that moves bytes: a block per
// 4 KiB, at least 1 and at most most (itself at most MaxBlocks).
func BlocksFor(bytes, most int) int {
	return min(max((bytes+4095)/4096, 1), max(min(most, MaxBlocks), 1))
}

// HostFits is the most Kernel.HostBytes a kind of kernel takes with
// blocks blocks on n ranks: the broadcast uses an area a block in each
// half of the region, the allgather n (one a rank), the reduce-scatter
// n·n (one a rank and block of the vector), the two-shot n·n + n.
func HostFits(k Kind, blocks, n int) int {
	areas := max(blocks, 1)
	switch k {
	case TwoShot:
		areas *= n*n + n
	case ReduceScatter:
		areas *= n * n
	case Allgather:
		areas *= n
	}
	return HostRegionBytes / 2 / areas &^ 15
}

// Kind names a fused kernel.
type Kind uint8

const (
	OneShot         Kind = iota // allreduce, one-shot
	TwoShot                     // allreduce, reduce-scatter and allgather in one kernel
	ReduceScatter               // Count is each rank's block; In holds n blocks
	Allgather                   // Count is each rank's block; Out holds n blocks
	Bcast                       // Out is the buffer, Root's is sent
	OneShotLL                   // allreduce, one-shot in low-latency lines (LLFits)
	TwoShotLL                   // allreduce, two-shot in low-latency lines (TwoShotLLFits)
	ReduceScatterLL             // reduce-scatter in low-latency lines (LLFits of a block); Count is a rank's block
	AllgatherLL                 // allgather in low-latency lines (LLFits of a block); Count is a rank's block
)

// Lines reports whether kernels of kind k run in low-latency lines, whose
// 16-byte stores carry 8 bytes: from and to 8-byte aligned buffers only.
func (k Kind) Lines() bool {
	return k == OneShotLL || k == TwoShotLL || k == ReduceScatterLL || k == AllgatherLL
}

// kindNames are the kinds' names, as plan.Fused.Kind names them.
var kindNames = [...]string{OneShot: "oneshot", TwoShot: "twoshot", ReduceScatter: "reducescatter",
	Allgather: "allgather", Bcast: "bcast", OneShotLL: "oneshot-ll", TwoShotLL: "twoshot-ll",
	ReduceScatterLL: "reducescatter-ll", AllgatherLL: "allgather-ll"}

// String returns k's name as plan.Fused.Kind names it ("oneshot",
// "twoshot-ll", "bcast", ...).
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind " + strconv.Itoa(int(k))
}

// Slot is the slot, in bytes, that the one-shot allreduce of count
// elements of es bytes needs; the other kinds move any count through any
// slot (Kernel.Rounds).
func (k Kind) Slot(count, es, n int) int {
	if k == OneShot {
		return count * es
	}
	return 0
}

// Kernel is one call of a fused kernel (kernels/reduce.cu): every rank
// pushes data into slots of its peers' registered regions with stores over
// NVLink, raises flags there and waits for its own, all in one kernel.
// The one-shot allreduce does it once: every rank pushes In to every peer
// and combines the slots in rank order into Out. The others are
// pipelined: they move the vector in rounds of at most one area of a slot
// per block and peer, so they take any count (see Rounds). Every rank of
// the call launches it with the same Kind, Count, DType, Op, Root,
// SlotBytes, Blocks, Threads, Area, Ramp and HostBytes, and with counters
// (Seqs) that hold the same value.
type Kernel struct {
	Kind  Kind
	DType dtype.DType
	Op    dtype.Op
	In    cuda.DevicePtr
	Out   cuda.DevicePtr
	Count int
	// Seqs is this rank's sequence counters: SeqWords 32-bit words of
	// device memory, each holding the call's first sequence number
	// (from 1) when the kernel starts. Round r of the call is number
	// seq+r, and flags compare with it; the kernel advances every word
	// to seq+Rounds() when it ends, so that the next call, launched by
	// the host or replayed from a CUDA graph, starts there. Only the
	// fused kernels of one communicator, on one stream, use them.
	Seqs cuda.DevicePtr
	Rank int
	// Regions are the bases of every rank's region as mapped here, this
	// rank's own among them (at most MaxRanks).
	Regions []cuda.DevicePtr
	// SlotBytes is the size of one slot (a multiple of 256; at least the
	// vector for the one-shot kernel).
	SlotBytes int
	Timeout   time.Duration // how long to wait for a peer's flag
	// Status is two mapped host words (device address): into the first a
	// block that gave up stores 1 + the rank it waited for; into the
	// second a kernel of one block stores its end, Seqs' value after it,
	// once its result is in place, where SignalEnd asks for it.
	Status cuda.DevicePtr
	// SignalEnd asks a kernel of one block (Grid() 1) to store its end
	// into Status's second word, for a caller that polls that word
	// instead of waiting for the stream: kernels built with cuda's done
	// marker only (cuda.Ctx.KernelsSignalDone). The store is a release
	// at system scope, which costs a call queued back to back or
	// replayed from a graph about 1.5 µs on an H200: ask only where the
	// host waits for the call.
	SignalEnd bool
	Root      int // Bcast
	Blocks    int // 0: Blocks(Count·DType.Size())
	// Threads is the block size: 0 means Threads (512), else a multiple
	// of 32 up to 512.
	Threads int
	// Host, where not 0, is mapped pinned host memory that every rank of
	// the call sees (a device address here, HostRegionBytes long): the
	// two-shot allreduce, the pipelined reduce-scatter and allgather, and
	// a broadcast above BcastDirectMax, on more than 2 GPUs, then also
	// move data through it, across the bus, beside NVLink (multi-path):
	// the broadcast and the allgather up to HostBytes a block and round
	// (the allgather of this rank's block), the two-shot and the
	// reduce-scatter up to HostBytes of every chunk or block a block and
	// round. Every rank passes the same HostBytes; HostFits says which
	// fit the region.
	Host      cuda.DevicePtr
	HostBytes int
	// Area caps the bytes of a slot each block uses a round (pipelined
	// kinds): smaller areas cut a vector into more rounds, whose pushes
	// overlap the waits and reductions of the ones before. 0, or more than
	// SlotBytes/Blocks, means SlotBytes/Blocks.
	Area int
	// Stride, for a reduce-scatter, where above Count, is the elements
	// from one block of In to the next as the kernel reads them (and the
	// block it writes to Out): a multiple of 16 bytes, so that every
	// block starts 16-byte aligned and the kernel takes its 16-byte loads
	// and stores (AlignedStride; Config.Shape sets it from the size, which
	// every rank shares). The caller stages In into scratch at that stride
	// and copies Count elements of the result out (package gpu); the
	// kernel reduces the padding too, and nothing reads it. 0: Count.
	Stride int
	// Ramp, for a broadcast above BcastDirectMax on more than 2 GPUs, cuts
	// its last full round (or the whole vector, if smaller) into Ramp + 1
	// rounds of a half, a quarter, ... of it, the last two alike, so that
	// the last exchange among the non-roots, which nothing overlaps, is
	// short (0 to MaxRamp; every rank passes the same).
	Ramp int
}

// Grid is the number of blocks a runs.
func (a *Kernel) Grid() int {
	if a.Blocks > 0 {
		return a.Blocks
	}
	if a.Kind == TwoShotLL {
		// A thread per word of a chunk.
		n := max(len(a.Regions), 1)
		return Blocks((a.Count*a.DType.Size()/8 + n - 1) / n * 8)
	}
	return Blocks(a.Count * a.DType.Size())
}

// Rounds is how many sequence numbers the call takes: 1 for the one-shot
// kernels; for the pipelined ones, the rounds in which its vector passes
// through areas of SlotBytes/grid bytes (kernels/reduce.cu counts them the
// same way, and TestRounds holds the two together). It is 0 when an area
// is too small for the kind: 16 bytes a round, 32 for the two-phase
// kernels (two-shot, broadcast above BcastDirectMax on more than 2 GPUs).
func (a *Kernel) Rounds() int {
	blocks := a.Grid()
	n := len(a.Regions)
	if blocks < 1 || a.SlotBytes < 0 {
		return 0
	}
	area := a.SlotBytes / blocks
	if a.Area > 0 {
		area = min(area, a.Area)
	}
	area &^= 15
	es := a.DType.Size()
	rounds := func(items, perRound int) int {
		if perRound <= 0 {
			return 0
		}
		return max((items+perRound-1)/perRound, 1)
	}
	switch a.Kind {
	case OneShot, OneShotLL, TwoShotLL, ReduceScatterLL, AllgatherLL:
		return 1
	case TwoShot:
		w := 16 / es
		c := ((a.Count+n-1)/n + w - 1) / w * w
		if area/2/es/w*w == 0 {
			return 0
		}
		return rounds(c, (area/2/es/w*w+a.hostBytes()/es/w*w)*blocks)
	case ReduceScatter:
		w := 16 / es
		if area/es/w*w == 0 {
			return 0
		}
		return rounds(a.BlockCount(), (area/es/w*w+a.hostBytes()/es/w*w)*blocks)
	case Allgather:
		if area == 0 {
			return 0
		}
		return rounds(a.Count*es, (area+a.hostBytes())*blocks)
	case Bcast:
		if n == 2 || a.Count*es <= BcastDirectMax {
			if area == 0 {
				return 0
			}
			return rounds(a.Count*es, (area+a.hostBytes())*blocks)
		}
		if area/2&^15 == 0 || a.Ramp < 0 || a.Ramp > MaxRamp {
			return 0
		}
		// Full rounds, then the last whole one, or the vector, in Ramp + 1.
		whole := area/2&^15*blocks*(n-1) + a.hostBytes()*blocks
		head := a.Count*es - min(a.Count*es, whole)
		return (head+whole-1)/whole + a.Ramp + 1
	}
	return 0
}

// BlockCount is the elements of each block the kernel runs on: Stride
// where it is set (a reduce-scatter staged at an aligned stride), else
// Count.
func (a *Kernel) BlockCount() int {
	if a.Kind == ReduceScatter && a.Stride > a.Count {
		return a.Stride
	}
	return a.Count
}

// AlignedStride returns count rounded up to a whole number of 16-byte
// words of es-byte elements: the stride at which a reduce-scatter's
// blocks all start 16-byte aligned.
func AlignedStride(count, es int) int {
	w := max(16/max(es, 1), 1)
	return (count + w - 1) / w * w
}

// StrideMin is the smallest block, in bytes, of a reduce-scatter that
// Config.Shape stages at an aligned stride where its blocks are not a
// multiple of 16 bytes. Unaligned, every block but the first is combined
// an element at a time (kernels/fused.cuh: reduce_into takes 16-byte
// words only where every pointer is 16-byte aligned): three H200s moved a
// reduce-scatter of 64 MiB at 0.49× NCCL's speed. Staged, the call pays
// two local copies (the n blocks in, one out: at about 4 TB/s, a block
// of B bytes on 3 GPUs adds about B/500 GB/s) and their launches (a few
// µs), and the kernel runs as fast as for aligned blocks (about B/160
// GB/s on 3 GPUs in plan.DefaultDeviceModel); if the unaligned kernel
// only doubles the bandwidth term, staging wins from about 2 MB a block.
// An estimate from the model, not a measurement.
const StrideMin = 2 << 20

// hostBytes is what a block moves through Host a round.
func (a *Kernel) hostBytes() int {
	switch {
	case a.Host == 0:
		return 0
	case a.Kind != Bcast && a.Kind != TwoShot && a.Kind != ReduceScatter && a.Kind != Allgather:
		return 0
	}
	return max(a.HostBytes, 0) &^ 15
}

// threads is the block size a runs with.
func (a *Kernel) threads() int {
	if a.Threads > 0 {
		return a.Threads
	}
	return Threads
}
