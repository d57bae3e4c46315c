package cuda

import (
	_ "embed"
	"fmt"
	"os"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
)

// reducePTX is kernels/reduce.ptx, compiled from kernels/reduce.cu by
// kernels/gen.sh:
//
//	nvcc -ptx -arch=sm_90 -O3 -std=c++17 -o cuda/kernels/reduce.ptx cuda/kernels/reduce.cu
//
//go:generate bash kernels/gen.sh
//go:embed kernels/reduce.ptx
var reducePTX []byte

// ReducePTX returns the embedded PTX of the reduction kernels.
func ReducePTX() []byte { return reducePTX }

// reduceThreads is the block size of the reduction kernels.
const reduceThreads = 512

// reduceKernels are the reduction kernels of one context.
type reduceKernels struct {
	mod      Module
	loadTime time.Duration
	reduce   [16][16]Function // [dtype][op]
	divide   [16]Function     // [dtype]
	oneshot  [16][16]Function // [dtype][op]
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

// LoadKernels loads the embedded reduction kernels into the worker's
// context, if not loaded yet. Reduce and Divide call it; calling it first
// keeps the driver's PTX compilation (a one-time cost per process and
// device, cached by the driver across runs) out of the first reduction.
func (c *Ctx) LoadKernels() error {
	if c.w.kernels != nil {
		return nil
	}
	start := time.Now()
	image := reducePTX
	if path := os.Getenv("BRAID_CUDA_PTX"); path != "" {
		// For kernel work: PTX built on the GPU machine, tried before it is
		// committed.
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("cuda: reduction kernels from BRAID_CUDA_PTX: %w", err)
		}
		image = b
	}
	mod, err := c.LoadModule(image)
	if err != nil {
		return fmt.Errorf("cuda: reduction kernels: %w", err)
	}
	k := &reduceKernels{mod: mod}
	for _, d := range dtype.All() {
		for _, op := range dtype.AllOps() {
			if !dtype.Supports(d, op) {
				continue
			}
			name := "braid_reduce_" + op.String() + "_" + typeSuffix[d]
			if k.reduce[d][op], err = c.Function(mod, name); err != nil {
				c.UnloadModule(mod)
				return fmt.Errorf("cuda: reduction kernels: %w", err)
			}
			name = "braid_oneshot_" + op.String() + "_" + typeSuffix[d]
			if k.oneshot[d][op], err = c.Function(mod, name); err != nil {
				c.UnloadModule(mod)
				return fmt.Errorf("cuda: reduction kernels: %w", err)
			}
			name = "braid_twoshot_" + op.String() + "_" + typeSuffix[d]
			if k.twoshot[d][op], err = c.Function(mod, name); err != nil {
				c.UnloadModule(mod)
				return fmt.Errorf("cuda: reduction kernels: %w", err)
			}
			name = "braid_rsfused_" + op.String() + "_" + typeSuffix[d]
			if k.rsfused[d][op], err = c.Function(mod, name); err != nil {
				c.UnloadModule(mod)
				return fmt.Errorf("cuda: reduction kernels: %w", err)
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

// OneShot is one call of the one-shot or two-shot allreduce kernel
// (kernels/reduce.cu, braid_oneshot_* and braid_twoshot_*). One-shot:
// every rank pushes In into a slot of every peer's registered region,
// raises a flag there, waits for every peer's flag in its own region and
// combines the slots in rank order into Out. Two-shot: rank p reduces
// chunk p of the vector from the pieces the others pushed, and pushes the
// result back to all. Either is one kernel. Every rank of the call
// launches it with the same Seq, Count, DType, Op, TwoShot and Blocks.
type OneShot struct {
	Kind  FusedKind
	DType dtype.DType
	Op    dtype.Op
	In    DevicePtr
	Out   DevicePtr
	Count int
	Seq   uint32 // the call's number, from 1; flags compare with it
	Rank  int
	// Regions are the bases of every rank's region as mapped here, this
	// rank's own among them (at most OneShotMaxRanks).
	Regions []DevicePtr
	// SlotBytes is the size of one slot (a multiple of 256, at least
	// Count elements; two-shot: TwoShotSlot).
	SlotBytes int
	Timeout   time.Duration // how long to wait for a peer's flag
	// Status is a mapped host word (device address) where a block that
	// gave up stores 1 + the rank it waited for.
	Status DevicePtr
	Root   int // FusedBcast
	Blocks int // 0: by size
}

// One-shot kernel limits, as kernels/reduce.cu lays out a region: flags
// for OneShotMaxBlocks blocks and OneShotMaxRanks ranks, then the slots
// from OneShotSlotsOffset.
const (
	OneShotMaxRanks    = 8
	OneShotMaxBlocks   = 64
	OneShotSlotsOffset = 4096
)

// OneShotRegionBytes is the size of a one-shot region for n ranks with
// slots of slotBytes: the flags, then two parities of n slots.
func OneShotRegionBytes(n, slotBytes int) int { return OneShotSlotsOffset + 2*n*slotBytes }

// OneShotBlocks is the grid the one-shot kernel uses for bytes when
// OneShot.Blocks is 0: a block per 4 KiB, at least 1 and at most
// OneShotMaxBlocks.
func OneShotBlocks(bytes int) int { return min(max((bytes+4095)/4096, 1), OneShotMaxBlocks) }

// FusedKind names the kernels LaunchOneShot runs.
type FusedKind uint8

const (
	FusedOneShot       FusedKind = iota // allreduce, one-shot
	FusedTwoShot                        // allreduce, reduce-scatter and allgather in one kernel
	FusedReduceScatter                  // Count is each rank's block; In holds n blocks
	FusedAllgather                      // Count is each rank's block; Out holds n blocks
	FusedBcast                          // Out is the buffer, Root's is sent
)

// Slot is the slot, in bytes, a call of k on count elements of es bytes on
// n ranks needs.
func (k FusedKind) Slot(count, es, n int) int {
	if k == FusedTwoShot {
		return TwoShotSlot(count, es, n)
	}
	return count * es
}

// TwoShotSlot is the slot, in bytes, that a two-shot allreduce of count
// elements of es bytes on n ranks needs: two chunks of ⌈count/n⌉ elements,
// each rounded up to 16 bytes.
func TwoShotSlot(count, es, n int) int {
	w := 16 / es
	c := ((count+n-1)/n + w - 1) / w * w
	return 2 * c * es
}

// LaunchOneShot enqueues the one-shot or two-shot allreduce a on s.
func (c *Ctx) LaunchOneShot(s Stream, a OneShot) error {
	n := len(a.Regions)
	switch {
	case !dtype.Supports(a.DType, a.Op):
		return fmt.Errorf("cuda: one-shot: op %v is not defined on %v", a.Op, a.DType)
	case n < 1 || n > OneShotMaxRanks || a.Rank < 0 || a.Rank >= n:
		return fmt.Errorf("cuda: one-shot: rank %d of %d (at most %d ranks)", a.Rank, n, OneShotMaxRanks)
	case a.Count < 0 || a.SlotBytes%256 != 0 || a.Kind.Slot(a.Count, a.DType.Size(), n) > a.SlotBytes:
		return fmt.Errorf("cuda: one-shot: %d elements of %d bytes in slots of %d bytes", a.Count, a.DType.Size(), a.SlotBytes)
	case a.Blocks < 0 || a.Blocks > OneShotMaxBlocks:
		return fmt.Errorf("cuda: one-shot: %d blocks (at most %d)", a.Blocks, OneShotMaxBlocks)
	}
	if a.Count == 0 {
		return nil
	}
	if err := c.LoadKernels(); err != nil {
		return err
	}
	blocks := a.Blocks
	if blocks == 0 {
		blocks = OneShotBlocks(a.Count * a.DType.Size())
	}
	var r [OneShotMaxRanks]uint64
	for i, p := range a.Regions {
		r[i] = uint64(p)
	}
	k := c.w.kernels
	tail := []uint64{uint64(a.Seq), uint64(uint32(a.Rank)), uint64(uint32(n)),
		uint64(a.SlotBytes), uint64(max(a.Timeout, 0)), uint64(a.Status),
		r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]}
	bytes := uint64(a.Count * a.DType.Size())
	switch a.Kind {
	case FusedBcast:
		if a.Root < 0 || a.Root >= n {
			return fmt.Errorf("cuda: fused broadcast: root %d of %d", a.Root, n)
		}
		return c.Launch(k.bcast, D1(blocks), D1(reduceThreads), 0, s,
			append([]uint64{uint64(a.Out), bytes, uint64(uint32(a.Root))}, tail...)...)
	case FusedAllgather:
		return c.Launch(k.gather, D1(blocks), D1(reduceThreads), 0, s,
			append([]uint64{uint64(a.In), uint64(a.Out), bytes}, tail...)...)
	}
	f := k.oneshot[a.DType][a.Op]
	switch a.Kind {
	case FusedTwoShot:
		f = k.twoshot[a.DType][a.Op]
	case FusedReduceScatter:
		f = k.rsfused[a.DType][a.Op]
	}
	return c.Launch(f, D1(blocks), D1(reduceThreads), 0, s,
		uint64(a.In), uint64(a.Out), uint64(a.Count), uint64(a.Seq), uint64(uint32(a.Rank)), uint64(uint32(n)),
		uint64(a.SlotBytes), uint64(max(a.Timeout, 0)), uint64(a.Status),
		r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])
}
