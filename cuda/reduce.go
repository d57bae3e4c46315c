package cuda

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
)

// reducePTX is kernels/reduce.ptx.gz and reduceCubin90 the same kernels
// compiled for compute capability 9.0 (H100, H200), both gzipped and made
// from kernels/reduce.cu by kernels/gen.sh (nvcc -ptx and -cubin,
// -arch=sm_90). A device of capability 9.0 loads the cubin, which needs no
// compilation; others load the PTX, which the driver compiles the first
// time (about 30 s on an H200, then cached by the driver across runs).
//
//go:generate bash kernels/gen.sh
//go:embed kernels/reduce.ptx.gz
var reducePTX []byte

//go:embed kernels/reduce_sm90.cubin.gz
var reduceCubin90 []byte

// ReducePTX returns the PTX of the reduction kernels.
func ReducePTX() ([]byte, error) { return gunzip(reducePTX) }

// gunzip returns the content of a gzipped image.
func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// kernelImage returns the module to load on a device of compute capability
// major.minor, and what it is. BRAID_CUDA_KERNELS names a directory of
// gen.sh's output to use instead (kernel work: a build from the GPU
// machine, tried before it is committed).
func kernelImage(major, minor int) ([]byte, string, error) {
	ptx, cubin, from := reducePTX, reduceCubin90, "embedded"
	if dir := os.Getenv("BRAID_CUDA_KERNELS"); dir != "" {
		var err error
		if ptx, err = os.ReadFile(filepath.Join(dir, "reduce.ptx.gz")); err != nil {
			return nil, "", fmt.Errorf("cuda: reduction kernels from BRAID_CUDA_KERNELS: %w", err)
		}
		if cubin, err = os.ReadFile(filepath.Join(dir, "reduce_sm90.cubin.gz")); err != nil {
			cubin = nil
		}
		from = dir
	}
	if major == 9 && minor == 0 && len(cubin) > 0 {
		if b, err := gunzip(cubin); err == nil {
			return b, from + " sm_90 cubin", nil
		}
		// A damaged cubin: the PTX still works, compiled by the driver.
	}
	b, err := gunzip(ptx)
	if err != nil {
		return nil, "", fmt.Errorf("cuda: reduction kernels (%s PTX): %w", from, err)
	}
	return b, from + " PTX", nil
}

// reduceThreads is the block size of the reduction kernels.
const reduceThreads = 512

// DefaultThreads is the block size of a fused kernel whose
// OneShot.Threads is 0.
const DefaultThreads = reduceThreads

// reduceKernels are the reduction kernels of one context.
type reduceKernels struct {
	mod      Module
	image    string // what was loaded: kernelImage's description
	loadTime time.Duration
	reduce   [16][16]Function // [dtype][op]
	divide   [16]Function     // [dtype]
	oneshot  [16][16]Function // [dtype][op]
	ll       [16][16]Function // [dtype][op]: braid_oneshotll
	ll2      [16][16]Function // [dtype][op]: braid_twoshotll
	twoshot  [16][16]Function // [dtype][op]
	rsfused  [16][16]Function // [dtype][op]
	bcast    Function
	gather   Function
}

// typeSuffix is the kernel name suffix of each element type.
var typeSuffix = map[dtype.DType]string{
	dtype.Float32: "f32", dtype.Float64: "f64", dtype.Float16: "f16", dtype.BFloat16: "bf16",
	dtype.Int8: "i8", dtype.Uint8: "u8", dtype.Int32: "i32", dtype.Uint32: "u32",
	dtype.Int64: "i64", dtype.Uint64: "u64",
}

// kernelFamilies are the kernels there are one of for every type and op
// a type supports, named by kernelName.
var kernelFamilies = []struct {
	name string
	of   func(*reduceKernels) *[16][16]Function
}{
	{"reduce", func(k *reduceKernels) *[16][16]Function { return &k.reduce }},
	{"oneshot", func(k *reduceKernels) *[16][16]Function { return &k.oneshot }},
	{"oneshotll", func(k *reduceKernels) *[16][16]Function { return &k.ll }},
	{"twoshotll", func(k *reduceKernels) *[16][16]Function { return &k.ll2 }},
	{"twoshot", func(k *reduceKernels) *[16][16]Function { return &k.twoshot }},
	{"rsfused", func(k *reduceKernels) *[16][16]Function { return &k.rsfused }},
}

// kernelName is the name of family's kernel for d and op in
// kernels/reduce.cu: braid_<family>_<op>_<type>.
func kernelName(family string, d dtype.DType, op dtype.Op) string {
	return "braid_" + family + "_" + op.String() + "_" + typeSuffix[d]
}

// LoadKernels loads the embedded reduction kernels into the worker's
// context, if not loaded yet. Reduce and Divide call it; calling it first
// keeps the driver's PTX compilation (a one-time cost per process and
// device, cached by the driver across runs) out of the first reduction.
func (c *Ctx) LoadKernels() error {
	if c.w.kernels != nil {
		return nil
	}
	start := time.Now()
	major, minor, err := c.w.dev.ComputeCapability()
	if err != nil {
		return err
	}
	image, what, err := kernelImage(major, minor)
	if err != nil {
		return err
	}
	mod, err := c.LoadModule(image)
	if err != nil && strings.HasSuffix(what, "cubin") {
		// A cubin this driver does not take: its PTX, compiled here.
		ptx, pwhat, perr := kernelImage(0, 0)
		if perr == nil {
			if mod, perr = c.LoadModule(ptx); perr == nil {
				err, what = nil, pwhat+" (the cubin failed: "+err.Error()+")"
			}
		}
	}
	if err != nil {
		return fmt.Errorf("cuda: reduction kernels (%s): %w", what, err)
	}
	k := &reduceKernels{mod: mod, image: what}
	for _, d := range dtype.All() {
		for _, op := range dtype.AllOps() {
			if !dtype.Supports(d, op) {
				continue
			}
			for _, f := range kernelFamilies {
				if f.of(k)[d][op], err = c.Function(mod, kernelName(f.name, d, op)); err != nil {
					c.UnloadModule(mod)
					return fmt.Errorf("cuda: reduction kernels: %w", err)
				}
			}
		}
		if d.IsFloat() {
			if k.divide[d], err = c.Function(mod, "braid_divide_"+typeSuffix[d]); err != nil {
				c.UnloadModule(mod)
				return fmt.Errorf("cuda: reduction kernels: %w", err)
			}
		}
	}
	for _, f := range []struct {
		dst  *Function
		name string
	}{{&k.bcast, "braid_bcast_fused"}, {&k.gather, "braid_allgather_fused"}} {
		if *f.dst, err = c.Function(mod, f.name); err != nil {
			c.UnloadModule(mod)
			return fmt.Errorf("cuda: reduction kernels: %w", err)
		}
	}
	k.loadTime = time.Since(start)
	c.w.kernels = k
	return nil
}

// KernelLoadTime returns how long LoadKernels took in this worker (module
// load, PTX compilation included, and function lookup), or 0 before.
func (c *Ctx) KernelLoadTime() time.Duration {
	if c.w.kernels == nil {
		return 0
	}
	return c.w.kernels.loadTime
}

// KernelImage says which module LoadKernels loaded (the embedded sm_90
// cubin, or PTX), or "" before.
func (c *Ctx) KernelImage() string {
	if c.w.kernels == nil {
		return ""
	}
	return c.w.kernels.image
}

// ReduceKernel returns the kernel Reduce launches for d and op, for
// inspection (Ctx.FuncAttribute).
func (c *Ctx) ReduceKernel(d dtype.DType, op dtype.Op) (Function, error) {
	if !dtype.Supports(d, op) {
		return 0, fmt.Errorf("cuda: reduce: op %v is not defined on %v", op, d)
	}
	if err := c.LoadKernels(); err != nil {
		return 0, err
	}
	return c.w.kernels.reduce[d][op], nil
}

// Reduction describes one elementwise reduction for Ctx.Reduce:
// Dst[i] = A[i] op B[i] for i < Count, also written to Dst2 unless it is 0.
// The pointers are device addresses of any device this context can reach
// (its own memory, peers' memory with peer access, IPC-opened memory,
// mapped host memory). A destination may be exactly A or exactly B, or
// overlap neither.
type Reduction struct {
	DType dtype.DType
	Op    dtype.Op
	Dst   DevicePtr
	Dst2  DevicePtr // optional second destination
	A, B  DevicePtr
	Count int // elements, not bytes
	// Divisor is used by dtype.Avg only: the sum, rounded to DType, is
	// divided by Divisor and rounded again. 0 and 1 both make Avg a sum
	// (intermediate steps); the last step of an average over k ranks
	// passes k.
	Divisor int
	// Blocks is the number of thread blocks (of 512 threads) to launch,
	// which bounds how many multiprocessors the reduction occupies. 0 means
	// enough to cover the data, up to four per multiprocessor.
	Blocks int
}

// Reduce enqueues r on s. The result has the same bits as Braid's host
// kernels (internal/reduce) give for the same inputs, except for which NaN
// comes out where the result is NaN.
func (c *Ctx) Reduce(s Stream, r Reduction) error {
	if !dtype.Supports(r.DType, r.Op) {
		return fmt.Errorf("cuda: reduce: op %v is not defined on %v", r.Op, r.DType)
	}
	if r.Count < 0 || r.Divisor < 0 || r.Blocks < 0 {
		return fmt.Errorf("cuda: reduce: negative count %d, divisor %d or blocks %d", r.Count, r.Divisor, r.Blocks)
	}
	if r.Count == 0 {
		return nil
	}
	if err := c.LoadKernels(); err != nil {
		return err
	}
	div := r.Divisor
	if div == 0 {
		div = 1
	}
	f := c.w.kernels.reduce[r.DType][r.Op]
	blocks := r.Blocks
	if blocks == 0 {
		blocks = c.defaultBlocks(r.Count, r.DType.Size(), uint64(r.Dst|r.Dst2|r.A|r.B))
	}
	return c.Launch(f, D1(blocks), D1(reduceThreads), 0, s,
		uint64(r.Dst), uint64(r.Dst2), uint64(r.A), uint64(r.B), uint64(r.Count), uint64(uint32(div)))
}

// Divide enqueues dst[i] = src[i] / n for count elements of the
// floating-point type d, rounding once (float16 and bfloat16 through
// float32), as internal/reduce.Divide does on the host. dst may be src.
func (c *Ctx) Divide(s Stream, d dtype.DType, dst, src DevicePtr, count, n int) error {
	if !d.IsFloat() {
		return fmt.Errorf("cuda: divide is not supported on %v: only on floating-point types", d)
	}
	if n < 1 || count < 0 {
		return fmt.Errorf("cuda: divide %d elements by %d: divisor must be at least 1 and count not negative", count, n)
	}
	if count == 0 {
		return nil
	}
	if err := c.LoadKernels(); err != nil {
		return err
	}
	blocks := c.defaultBlocks(count, d.Size(), uint64(dst|src))
	return c.Launch(c.w.kernels.divide[d], D1(blocks), D1(reduceThreads), 0, s,
		uint64(dst), uint64(src), uint64(count), uint64(uint32(n)))
}

// defaultBlocks returns the grid size for count elements of the given size:
// one thread per 16-byte vector (per element if the addresses are not
// 16-byte aligned), up to four blocks per multiprocessor.
func (c *Ctx) defaultBlocks(count, size int, addrBits uint64) int {
	items := count
	if addrBits&15 == 0 {
		items = max(count*size/16, 1)
	}
	blocks := (items + reduceThreads - 1) / reduceThreads
	return min(blocks, 4*max(c.w.sms, 1))
}

// OneShot is one call of a fused kernel (kernels/reduce.cu): every rank
// pushes data into slots of its peers' registered regions with stores over
// NVLink, raises flags there and waits for its own, all in one kernel.
// The one-shot allreduce does it once: every rank pushes In to every peer
// and combines the slots in rank order into Out. The others are pipelined:
// they move the vector in rounds of at most one area of a slot per block
// and peer, so they take any count (see Rounds). Every rank of the call
// launches it with the same Kind, Seq, Count, DType, Op, Root, SlotBytes
// and Blocks.
type OneShot struct {
	Kind  FusedKind
	DType dtype.DType
	Op    dtype.Op
	In    DevicePtr
	Out   DevicePtr
	Count int
	// Seq is the call's first sequence number, from 1: round r of the call
	// is number Seq+r, and flags compare with it. The next call starts at
	// Seq+Rounds().
	Seq  uint32
	Rank int
	// Regions are the bases of every rank's region as mapped here, this
	// rank's own among them (at most OneShotMaxRanks).
	Regions []DevicePtr
	// SlotBytes is the size of one slot (a multiple of 256; at least the
	// vector for the one-shot kernel).
	SlotBytes int
	Timeout   time.Duration // how long to wait for a peer's flag
	// Status is a mapped host word (device address) where a block that
	// gave up stores 1 + the rank it waited for.
	Status DevicePtr
	Root   int // FusedBcast
	Blocks int // 0: FusedBlocks(Count·DType.Size(), DefaultFusedBlocks)
	// Threads is the block size: 0 means 512, else a multiple of 32 up
	// to 512.
	Threads int
	// Host, where not 0, is mapped pinned host memory that every rank of
	// the call sees (a device address here, HostRegionBytes long): the
	// two-shot allreduce and a broadcast above BcastDirectMax on more
	// than 2 GPUs then also move data through it, across the bus, beside
	// NVLink (multi-path): the broadcast up to HostBytes a block and
	// round, the two-shot up to HostBytes of every chunk a block and
	// round. Every rank passes the same HostBytes; HostFits says which
	// fit the region.
	Host      DevicePtr
	HostBytes int
	// Area caps the bytes of a slot each block uses a round (pipelined
	// kinds): smaller areas cut a vector into more rounds, whose pushes
	// overlap the waits and reductions of the ones before. 0, or more than
	// SlotBytes/Blocks, means SlotBytes/Blocks.
	Area int
	// Ramp, for a broadcast above BcastDirectMax on more than 2 GPUs, cuts
	// its last full round (or the whole vector, if smaller) into Ramp + 1
	// rounds of a half, a quarter, ... of it, the last two alike, so that
	// the last exchange among the non-roots, which nothing overlaps, is
	// short (0 to MaxRamp; every rank passes the same).
	Ramp int
}

// MaxRamp is the largest OneShot.Ramp.
const MaxRamp = 4

// One-shot kernel limits, as kernels/reduce.cu lays out a region: flags
// for OneShotMaxBlocks blocks and OneShotMaxRanks ranks, then the slots
// from OneShotSlotsOffset.
const (
	OneShotMaxRanks    = 8
	OneShotMaxBlocks   = 256
	OneShotSlotsOffset = 8192
)

// BcastDirectMax is the largest fused broadcast that the root pushes to
// every peer in one phase (kernels/reduce.cu, BCAST_DIRECT_MAX); larger
// ones on more than 2 GPUs scatter parts, which the others then exchange.
const BcastDirectMax = 1 << 20

// DefaultFusedBlocks is the most blocks a fused kernel runs with when
// OneShot.Blocks is 0.
const DefaultFusedBlocks = 64

// OneShotLLMax is the largest vector, in bytes, of the low-latency
// one-shot allreduce (FusedOneShotLL). Its lines carry 8 bytes of data in
// 16 (kernels/reduce.cu, ONESHOT_LL_SLOT).
const OneShotLLMax = 256 << 10

// OneShotRegionBytes is the size of a one-shot region for n ranks with
// slots of slotBytes: the flags, then two parities of n slots, then two
// parities of n sets of low-latency lines (OneShotLLOffset).
func OneShotRegionBytes(n, slotBytes int) int {
	return OneShotLLOffset(n, slotBytes) + 2*n*2*OneShotLLMax
}

// OneShotLLOffset is where a region's low-latency lines start; the host
// clears them, with the flags, before the region is first used.
func OneShotLLOffset(n, slotBytes int) int { return OneShotSlotsOffset + 2*n*slotBytes }

// LLFits reports whether FusedOneShotLL can run an allreduce of count
// elements of es bytes from in to out: LLSizeFits, and both buffers 8-byte
// aligned.
func LLFits(in, out DevicePtr, count, es int) bool {
	return LLSizeFits(count, es) && in%8 == 0 && out%8 == 0
}

// LLSizeFits reports whether an allreduce of count elements of es bytes
// fits FusedOneShotLL: at most OneShotLLMax bytes, in whole 8-byte words.
// It depends on nothing but the size, which every rank shares.
func LLSizeFits(count, es int) bool {
	b := count * es
	return b > 0 && b <= OneShotLLMax && b%8 == 0
}

// TwoShotLLMax is the largest vector, in bytes, of the low-latency
// two-shot allreduce on n ranks (FusedTwoShotLL): a chunk of the vector
// per rank, each in half of a source's lines.
func TwoShotLLMax(n int) int { return OneShotLLMax / 2 * max(n, 1) }

// TwoShotLLFits reports whether FusedTwoShotLL can run an allreduce of
// count elements of es bytes from in to out on n ranks:
// TwoShotLLSizeFits, and both buffers 8-byte aligned.
func TwoShotLLFits(in, out DevicePtr, count, es, n int) bool {
	return TwoShotLLSizeFits(count, es, n) && in%8 == 0 && out%8 == 0
}

// TwoShotLLSizeFits reports whether an allreduce of count elements of es
// bytes on n ranks fits FusedTwoShotLL: at most TwoShotLLMax(n) bytes, in
// whole 8-byte words.
func TwoShotLLSizeFits(count, es, n int) bool {
	b := count * es
	return b > 0 && n >= 2 && (b/8+n-1)/n*8 <= OneShotLLMax/2 && b%8 == 0
}

// OneShotBlocks is the grid a fused kernel uses for bytes when
// OneShot.Blocks is 0: FusedBlocks(bytes, DefaultFusedBlocks).
func OneShotBlocks(bytes int) int { return FusedBlocks(bytes, DefaultFusedBlocks) }

// FusedBlocks is a grid for a fused kernel that moves bytes: a block per
// 4 KiB, at least 1 and at most most (itself at most OneShotMaxBlocks).
func FusedBlocks(bytes, most int) int {
	return min(max((bytes+4095)/4096, 1), max(min(most, OneShotMaxBlocks), 1))
}

// FusedKind names the kernels LaunchOneShot runs.
type FusedKind uint8

const (
	FusedOneShot       FusedKind = iota // allreduce, one-shot
	FusedTwoShot                        // allreduce, reduce-scatter and allgather in one kernel
	FusedReduceScatter                  // Count is each rank's block; In holds n blocks
	FusedAllgather                      // Count is each rank's block; Out holds n blocks
	FusedBcast                          // Out is the buffer, Root's is sent
	FusedOneShotLL                      // allreduce, one-shot in low-latency lines (LLFits)
	FusedTwoShotLL                      // allreduce, two-shot in low-latency lines (TwoShotLLFits)
)

// Slot is the slot, in bytes, that the one-shot allreduce of count
// elements of es bytes needs; the other kinds move any count through any
// slot (OneShot.Rounds).
func (k FusedKind) Slot(count, es, n int) int {
	if k == FusedOneShot {
		return count * es
	}
	return 0
}

// Grid is the number of blocks a runs.
func (a *OneShot) Grid() int {
	if a.Blocks > 0 {
		return a.Blocks
	}
	if a.Kind == FusedTwoShotLL {
		// A thread per word of a chunk.
		n := max(len(a.Regions), 1)
		return OneShotBlocks((a.Count*a.DType.Size()/8 + n - 1) / n * 8)
	}
	return OneShotBlocks(a.Count * a.DType.Size())
}

// Rounds is how many sequence numbers the call takes: 1 for the one-shot
// kernel; for the pipelined ones, the rounds in which its vector passes
// through areas of SlotBytes/grid bytes (kernels/reduce.cu counts them the
// same way). It is 0 when an area is too small for the kind: 16 bytes a
// round, 32 for the two-phase kernels (two-shot, broadcast above
// BcastDirectMax on more than 2 GPUs).
func (a *OneShot) Rounds() int {
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
	case FusedOneShot, FusedOneShotLL, FusedTwoShotLL:
		return 1
	case FusedTwoShot:
		w := 16 / es
		c := ((a.Count+n-1)/n + w - 1) / w * w
		if area/2/es/w*w == 0 {
			return 0
		}
		return rounds(c, (area/2/es/w*w+a.hostBytes()/es/w*w)*blocks)
	case FusedReduceScatter:
		w := 16 / es
		return rounds(a.Count, area/es/w*w*blocks)
	case FusedAllgather:
		return rounds(a.Count*es, area*blocks)
	case FusedBcast:
		if n == 2 || a.Count*es <= BcastDirectMax {
			return rounds(a.Count*es, area*blocks)
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

// hostBytes is what a block moves through Host a round.
func (a *OneShot) hostBytes() int {
	if a.Host == 0 || (a.Kind != FusedBcast && a.Kind != FusedTwoShot) {
		return 0
	}
	return max(a.HostBytes, 0) &^ 15
}

// HostRegionBytes is the size of the host region of the multi-path
// kernels (OneShot.Host): a half per parity of rounds, as the slots.
const HostRegionBytes = 16 << 20

// HostFits is the most OneShot.HostBytes a kind of kernel takes with
// blocks blocks on n ranks: the broadcast uses an area a block in each
// half of the region, the two-shot n·n + n.
func HostFits(k FusedKind, blocks, n int) int {
	areas := max(blocks, 1)
	if k == FusedTwoShot {
		areas *= n*n + n
	}
	return HostRegionBytes / 2 / areas &^ 15
}

// threads is the block size a runs with.
func (a *OneShot) threads() int {
	if a.Threads > 0 {
		return a.Threads
	}
	return reduceThreads
}

// LaunchOneShot enqueues the one-shot or two-shot allreduce a on s.
func (c *Ctx) LaunchOneShot(s Stream, a OneShot) error {
	n := len(a.Regions)
	switch {
	case !dtype.Supports(a.DType, a.Op):
		return fmt.Errorf("cuda: one-shot: op %v is not defined on %v", a.Op, a.DType)
	case n < 1 || n > OneShotMaxRanks || a.Rank < 0 || a.Rank >= n:
		return fmt.Errorf("cuda: one-shot: rank %d of %d (at most %d ranks)", a.Rank, n, OneShotMaxRanks)
	case a.Ramp < 0 || a.Ramp > MaxRamp:
		return fmt.Errorf("cuda: fused kernel %d: ramp %d (0 to %d)", a.Kind, a.Ramp, MaxRamp)
	case a.Count < 0 || a.SlotBytes%256 != 0 || a.Kind.Slot(a.Count, a.DType.Size(), n) > a.SlotBytes || a.Rounds() == 0:
		return fmt.Errorf("cuda: fused kernel %d: %d elements of %d bytes in slots of %d bytes and %d blocks", a.Kind, a.Count, a.DType.Size(), a.SlotBytes, a.Grid())
	case a.Blocks < 0 || a.Blocks > OneShotMaxBlocks:
		return fmt.Errorf("cuda: one-shot: %d blocks (at most %d)", a.Blocks, OneShotMaxBlocks)
	case a.hostBytes() > HostFits(a.Kind, a.Grid(), n):
		return fmt.Errorf("cuda: fused kernel %d: %d bytes a block through the host region, at most %d", a.Kind, a.hostBytes(), HostFits(a.Kind, a.Grid(), n))
	case a.Threads < 0 || a.Threads > reduceThreads || a.Threads%32 != 0:
		return fmt.Errorf("cuda: one-shot: %d threads a block (a multiple of 32, at most %d)", a.Threads, reduceThreads)
	case a.Kind == FusedOneShotLL && a.Count > 0 && !LLFits(a.In, a.Out, a.Count, a.DType.Size()):
		return fmt.Errorf("cuda: low-latency one-shot: %d elements of %d bytes (at most %d bytes, in 8-byte words, from and to 8-byte aligned buffers)",
			a.Count, a.DType.Size(), OneShotLLMax)
	case a.Kind == FusedTwoShotLL && a.Count > 0 && !TwoShotLLFits(a.In, a.Out, a.Count, a.DType.Size(), n):
		return fmt.Errorf("cuda: low-latency two-shot: %d elements of %d bytes on %d ranks (at most %d bytes, in 8-byte words, from and to 8-byte aligned buffers)",
			a.Count, a.DType.Size(), n, TwoShotLLMax(n))
	}
	if a.Count == 0 {
		return nil
	}
	if err := c.LoadKernels(); err != nil {
		return err
	}
	if a.Kind == FusedBcast && (a.Root < 0 || a.Root >= n) {
		return fmt.Errorf("cuda: fused broadcast: root %d of %d", a.Root, n)
	}
	k := c.w.kernels
	family, args := a.launchArgs()
	f := map[string]Function{"bcast_fused": k.bcast, "allgather_fused": k.gather}[family]
	if fam := map[string]*[16][16]Function{"oneshot": &k.oneshot, "oneshotll": &k.ll, "twoshotll": &k.ll2,
		"twoshot": &k.twoshot, "rsfused": &k.rsfused}[family]; fam != nil {
		f = fam[a.DType][a.Op]
	}
	return c.Launch(f, D1(a.Grid()), D1(a.threads()), 0, s, args...)
}

// fusedParams are the parameters every fused kernel of kernels/reduce.cu
// takes after its own leading ones (FUSED_KERNEL; braid_allgather_fused
// and braid_bcast_fused alike), in their order. Host and HostBytes are
// parameters of the multi-path kernels only (HOST_PARAMS).
type fusedParams struct {
	Seq, Rank, NRanks    uint32
	SlotBytes, AreaBytes uint64
	Host                 DevicePtr
	HostBytes            uint64
	TimeoutNS            uint64
	Status               DevicePtr
	Regions              [OneShotMaxRanks]DevicePtr
}

// pack appends p's parameters to lead, the host region's where host.
func (p *fusedParams) pack(host bool, lead ...uint64) []uint64 {
	args := append(lead, uint64(p.Seq), uint64(p.Rank), uint64(p.NRanks), p.SlotBytes, p.AreaBytes)
	if host {
		args = append(args, uint64(p.Host), p.HostBytes)
	}
	args = append(args, p.TimeoutNS, uint64(p.Status))
	for _, r := range p.Regions {
		args = append(args, uint64(r))
	}
	return args
}

// launchArgs returns the kernel family that runs a (braid_<family>_<op>_<type>,
// or braid_<family> for the broadcast and the allgather) and its
// arguments, as kernels/reduce.cu declares them: the kind's leading ones,
// then fusedParams (TestLaunchArgs counts them against the source).
func (a *OneShot) launchArgs() (string, []uint64) {
	p := fusedParams{Seq: a.Seq, Rank: uint32(a.Rank), NRanks: uint32(len(a.Regions)),
		SlotBytes: uint64(a.SlotBytes), AreaBytes: uint64(max(a.Area, 0)), Host: a.Host, HostBytes: uint64(a.hostBytes()),
		TimeoutNS: uint64(max(a.Timeout, 0)), Status: a.Status}
	copy(p.Regions[:], a.Regions)
	bytes := uint64(a.Count * a.DType.Size())
	vec := []uint64{uint64(a.In), uint64(a.Out), uint64(a.Count)} // FUSED_KERNEL's in, out, n
	switch a.Kind {
	case FusedBcast: // buf, bytes, root, ramp_in
		return "bcast_fused", p.pack(true, uint64(a.Out), bytes, uint64(uint32(a.Root)), uint64(uint32(a.Ramp)))
	case FusedAllgather: // in, out, bytes
		return "allgather_fused", p.pack(false, uint64(a.In), uint64(a.Out), bytes)
	case FusedOneShotLL:
		return "oneshotll", p.pack(false, vec...)
	case FusedTwoShotLL:
		return "twoshotll", p.pack(false, vec...)
	case FusedTwoShot:
		return "twoshot", p.pack(true, vec...)
	case FusedReduceScatter:
		return "rsfused", p.pack(false, vec...)
	}
	return "oneshot", p.pack(false, vec...)
}
