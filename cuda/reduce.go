package cuda

import (
	_ "embed"
	"fmt"
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
	mod, err := c.LoadModule(reducePTX)
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
		}
		if d.IsFloat() {
			if k.divide[d], err = c.Function(mod, "braid_divide_"+typeSuffix[d]); err != nil {
				c.UnloadModule(mod)
				return fmt.Errorf("cuda: reduction kernels: %w", err)
			}
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
