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

// ReducePTX returns the PTX of the reduction kernels that LoadKernels
// loads where it loads PTX: the embedded one, or BRAID_CUDA_KERNELS's
// (so that a build from the GPU machine is checked before it is
// committed).
func ReducePTX() ([]byte, error) {
	b, _, err := kernelImage(0, 0)
	return b, err
}

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
	rsll     [16][16]Function // [dtype][op]: the reduce-scatter in low-latency lines
	serve    [16][16]Function // [dtype][op]: braid_llserve
	bcast    Function
	gather   Function
	gatherLL Function // braid_allgather_ll
	overlap  bool     // the fused kernels begin with griddepcontrol.wait (fusedOverlapABI)
	done     bool     // a fused kernel of one block stores its end after the status word (fusedDoneABI)
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
	{"rsll", func(k *reduceKernels) *[16][16]Function { return &k.rsll }},
	{"llserve", func(k *reduceKernels) *[16][16]Function { return &k.serve }},
}

// fusedABI is an empty kernel that marks the fused kernels' parameter
// lists (kernels/reduce.cu: sequence counters in device memory, not a
// sequence number): LoadKernels refuses a module without it.
const fusedABI = "braid_fused_abi_seqs"

// fusedHostABI marks kernels whose reduce-scatter and allgather take the
// host region (kernels/fused.cuh): LoadKernels refuses a module without
// it, whose kernels would take fewer parameters than package gpu/fused
// passes.
const fusedHostABI = "braid_fused_abi_host"

// fusedBcast2HostABI marks kernels whose broadcast in one phase (on 2
// GPUs) carries host_bytes a block through the host region after its area
// (kernels/bcast.cuh, bcast_direct): LoadKernels refuses a module without
// it, whose broadcast would leave the host part of every round unwritten.
const fusedBcast2HostABI = "braid_fused_abi_bcast2host"

// fusedDoneABI marks kernels whose fused kernels of one block store the
// call's end (its last sequence number + 1) into the word after the
// status word once their results are in place, when the top bit of their
// rounds parameter asks for it (kernels/fused.cuh: seq_end, END_FLAG;
// gpu/fused's Kernel.SignalEnd). Kernels built before it do not take the
// bit; those marked braid_fused_abi_done (a652fd7) stored the end in
// every call, and are taken as not storing it.
const fusedDoneABI = "braid_fused_abi_endflag"

// fusedOverlapABI marks kernels whose fused kernels begin with
// griddepcontrol.wait, so that LaunchOverlapped may start them early
// (kernels/fused.cuh); kernels built before it are launched the usual
// way.
const fusedOverlapABI = "braid_fused_abi_overlap"

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
	for _, abi := range []struct{ marker, what string }{
		{fusedABI, "the fused kernels' sequence counters"},
		{fusedHostABI, "the host path of the reduce-scatter and allgather"},
		{fusedBcast2HostABI, "the host path of the broadcast on 2 GPUs"},
	} {
		if _, err := c.Function(mod, abi.marker); err != nil {
			c.UnloadModule(mod)
			return fmt.Errorf("cuda: reduction kernels (%s) predate %s (no %s): regenerate them with cuda/kernels/gen.sh: %w", what, abi.what, abi.marker, err)
		}
	}
	_, err = c.Function(mod, fusedOverlapABI)
	k.overlap = err == nil
	_, err = c.Function(mod, fusedDoneABI)
	k.done = err == nil
	for _, f := range []struct {
		dst  *Function
		name string
	}{{&k.bcast, "braid_bcast_fused"}, {&k.gather, "braid_allgather_fused"}, {&k.gatherLL, "braid_allgather_ll"}} {
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

// KernelsOverlap reports whether the loaded kernels' fused kernels may be
// launched with LaunchOverlapped: they begin with griddepcontrol.wait
// (fusedOverlapABI), and the driver has cuLaunchKernelEx. It loads the
// kernels first, and is false where that fails.
func (c *Ctx) KernelsOverlap() bool {
	return c.LoadKernels() == nil && c.w.kernels.overlap && CanOverlap()
}

// KernelsSignalDone reports whether the loaded kernels' fused kernels of
// one block store the call's end into the word after their status word
// (fusedDoneABI). It loads the kernels first, and is false where that
// fails.
func (c *Ctx) KernelsSignalDone() bool {
	return c.LoadKernels() == nil && c.w.kernels.done
}

// Kernel returns a kernel of the embedded module, loading the module
// first if needed: braid_<family>_<op>_<type> for a family of
// kernelFamilies (the fused kernels of package gpu/fused among them),
// braid_<family> for the kernels of one signature whatever the type
// ("bcast_fused", "allgather_fused", "allgather_ll"; d and op are not
// used).
func (c *Ctx) Kernel(family string, d dtype.DType, op dtype.Op) (Function, error) {
	if err := c.LoadKernels(); err != nil {
		return 0, err
	}
	k := c.w.kernels
	switch family {
	case "bcast_fused":
		return k.bcast, nil
	case "allgather_fused":
		return k.gather, nil
	case "allgather_ll":
		return k.gatherLL, nil
	}
	for _, f := range kernelFamilies {
		if f.name != family {
			continue
		}
		if !dtype.Supports(d, op) {
			return 0, fmt.Errorf("cuda: kernel %s: op %v is not defined on %v", family, op, d)
		}
		return f.of(k)[d][op], nil
	}
	return 0, fmt.Errorf("cuda: no kernel family %q in the embedded module", family)
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
