// Reduction kernels for Braid's GPU path, compiled to PTX and embedded in
// package cuda (cuda/reduce.go). The PTX beside this file is generated from it
// and committed; regenerate it with (needs nvcc 13.0, e.g. on the GPU machine):
//
//     nvcc -ptx -arch=sm_90 -O3 -std=c++17 -o cuda/kernels/reduce.ptx cuda/kernels/reduce.cu
//
// which is what cuda/kernels/gen.sh runs. The file includes no header, so that
// NVRTC or any CUDA C++ compiler builds it the same way; float16 and bfloat16
// conversions are written as PTX instructions.
//
// Every kernel of the reduce family has the same parameters:
//
//     braid_reduce_<op>_<type>(T *dst0, T *dst1, const T *a, const T *b,
//                              unsigned long long n, unsigned int div)
//
// and writes dst0[i] = a[i] op b[i] for i < n, and the same value to dst1[i]
// when dst1 is not null (a reduction fused with one or two copies). For op avg
// the sum, rounded to T, is then divided by div and rounded again: with div = 1
// avg is sum, and on the last step of an average over k ranks div = k. div is
// ignored by the other ops. A destination may be exactly a or exactly b, or
// overlap neither.
//
// braid_divide_<type>(T *dst, const T *src, unsigned long long n, unsigned int div)
// writes dst[i] = src[i] / div for the floating-point types.
//
// The semantics are those of Braid's host kernels (internal/reduce), bit for
// bit: integers wrap; float16 and bfloat16 are widened to float32, combined and
// rounded back to nearest even; min and max propagate NaN and order -0 below
// +0 (Go's built-in min and max); division rounds once.
//
// Every kernel is launched with 512 threads a block (__launch_bounds__), any
// number of blocks.
//
// Speed: when every pointer is 16-byte aligned, each thread moves 16 bytes per
// load and store (uint4) and keeps four such loads of each input in flight,
// in a grid-stride loop, so that any grid size covers any n; the last few
// elements, and all elements of misaligned buffers, go one at a time.

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;
typedef unsigned short half_bits;  // float16, IEEE binary16
typedef unsigned short bf16_bits;  // bfloat16, the top half of a float32

// Tags for the two 16-bit floating-point types, which share a storage type.
struct F16 {};
struct BF16 {};

// Traits<S> gives, for storage tag S: the stored type T, the type C in which
// the operation is computed, and the conversions between them.
template <typename S> struct Traits;

#define PLAIN_TRAITS(S)                                          \
  template <> struct Traits<S> {                                 \
    typedef S T;                                                 \
    typedef S C;                                                 \
    static __device__ __forceinline__ C load(T x) { return x; }  \
    static __device__ __forceinline__ T store(C x) { return x; } \
  };
PLAIN_TRAITS(float)
PLAIN_TRAITS(double)
PLAIN_TRAITS(i8)
PLAIN_TRAITS(u8)
PLAIN_TRAITS(i32)
PLAIN_TRAITS(u32)
PLAIN_TRAITS(i64)
PLAIN_TRAITS(u64)

template <> struct Traits<F16> {
  typedef half_bits T;
  typedef float C;
  static __device__ __forceinline__ C load(T x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
  }
  static __device__ __forceinline__ T store(C f) {
    half_bits x;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
    return x;
  }
};

template <> struct Traits<BF16> {
  typedef bf16_bits T;
  typedef float C;
  static __device__ __forceinline__ C load(T x) {
    return __int_as_float(((u32)x) << 16);
  }
  static __device__ __forceinline__ T store(C f) {
    bf16_bits x;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(x) : "f"(f));
    return x;
  }
};

// Bit patterns of floating-point values, for min and max of equal operands.
__device__ __forceinline__ float or_bits(float a, float b) {
  return __int_as_float(__float_as_int(a) | __float_as_int(b));
}
__device__ __forceinline__ float and_bits(float a, float b) {
  return __int_as_float(__float_as_int(a) & __float_as_int(b));
}
__device__ __forceinline__ double or_bits(double a, double b) {
  return __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b));
}
__device__ __forceinline__ double and_bits(double a, double b) {
  return __longlong_as_double(__double_as_longlong(a) & __double_as_longlong(b));
}

// Go's min and max on floating point: NaN if either operand is NaN, and
// -0 < +0. Equal operands have equal bits except for a pair of zeros, where
// OR of the bits gives -0 (min) and AND gives +0 (max).
template <typename F> __device__ __forceinline__ F go_min(F a, F b) {
  if (a != a || b != b) return a + b;
  if (a == b) return or_bits(a, b);
  return a < b ? a : b;
}
template <typename F> __device__ __forceinline__ F go_max(F a, F b) {
  if (a != a || b != b) return a + b;
  if (a == b) return and_bits(a, b);
  return a > b ? a : b;
}

// Unsigned<T> is the unsigned type of T's width: integer sums and products
// are computed in it, where wrap-around is defined.
template <typename T> struct Unsigned { typedef T U; };
template <> struct Unsigned<i8> { typedef u8 U; };
template <> struct Unsigned<i32> { typedef u32 U; };
template <> struct Unsigned<i64> { typedef u64 U; };

template <typename C> struct IsFloat { enum { value = 0 }; };
template <> struct IsFloat<float> { enum { value = 1 }; };
template <> struct IsFloat<double> { enum { value = 1 }; };

// The operators, on the compute type C.
struct OpSum {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) {
    if constexpr (IsFloat<C>::value) {
      return a + b;
    } else {
      typedef typename Unsigned<C>::U U;
      return (C)(U)((U)a + (U)b);
    }
  }
};
struct OpProd {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) {
    if constexpr (IsFloat<C>::value) {
      return a * b;
    } else {
      typedef typename Unsigned<C>::U U;
      return (C)(U)((U)a * (U)b);
    }
  }
};
struct OpMin {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) {
    if constexpr (IsFloat<C>::value) {
      return go_min(a, b);
    } else {
      return a < b ? a : b;
    }
  }
};
struct OpMax {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) {
    if constexpr (IsFloat<C>::value) {
      return go_max(a, b);
    } else {
      return a > b ? a : b;
    }
  }
};
struct OpBAnd {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a & b; }
};
struct OpBOr {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a | b; }
};
struct OpBXor {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a ^ b; }
};
// OpAvg is the sum; the kernel divides afterwards.
struct OpAvg : OpSum {};

// combine computes one element of the result, stored type in and out.
template <typename S, typename Op, bool Avg>
__device__ __forceinline__ typename Traits<S>::T combine(typename Traits<S>::T a,
                                                         typename Traits<S>::T b,
                                                         typename Traits<S>::C div) {
  typedef Traits<S> Tr;
  typename Traits<S>::T r = Tr::store(Op::apply(Tr::load(a), Tr::load(b)));
  if constexpr (Avg) r = Tr::store(Tr::load(r) / div);
  return r;
}

// Vec is 16 bytes seen as W elements of T.
template <typename T> union Vec {
  uint4 v;
  T e[16 / sizeof(T)];
};

template <typename S, typename Op, bool Avg>
__device__ __forceinline__ void reduce_body(typename Traits<S>::T *dst0, typename Traits<S>::T *dst1,
                                            const typename Traits<S>::T *a, const typename Traits<S>::T *b,
                                            u64 n, u32 udiv) {
  typedef typename Traits<S>::T T;
  typedef typename Traits<S>::C C;
  const C div = (C)udiv;
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 addr_bits = (u64)dst0 | (u64)dst1 | (u64)a | (u64)b;
  u64 done = 0;  // elements handled by the vector loops
  if ((addr_bits & 15) == 0) {
    const int W = 16 / sizeof(T);
    const int U = 4;  // vectors in flight per thread and input
    const u64 nvec = n / W;
    const uint4 *va = (const uint4 *)a;
    const uint4 *vb = (const uint4 *)b;
    uint4 *vd0 = (uint4 *)dst0;
    uint4 *vd1 = (uint4 *)dst1;
    u64 i = tid;
    for (; i + (U - 1) * stride < nvec; i += U * stride) {
      Vec<T> x[U], y[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        x[u].v = va[i + u * stride];
        y[u].v = vb[i + u * stride];
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
#pragma unroll
        for (int k = 0; k < W; k++) x[u].e[k] = combine<S, Op, Avg>(x[u].e[k], y[u].e[k], div);
        vd0[i + u * stride] = x[u].v;
        if (dst1) vd1[i + u * stride] = x[u].v;
      }
    }
    for (; i < nvec; i += stride) {
      Vec<T> x, y;
      x.v = va[i];
      y.v = vb[i];
#pragma unroll
      for (int k = 0; k < W; k++) x.e[k] = combine<S, Op, Avg>(x.e[k], y.e[k], div);
      vd0[i] = x.v;
      if (dst1) vd1[i] = x.v;
    }
    done = nvec * W;
  }
  for (u64 i = done + tid; i < n; i += stride) {
    T r = combine<S, Op, Avg>(a[i], b[i], div);
    dst0[i] = r;
    if (dst1) dst1[i] = r;
  }
}

template <typename S>
__device__ __forceinline__ void divide_body(typename Traits<S>::T *dst, const typename Traits<S>::T *src,
                                            u64 n, u32 udiv) {
  typedef Traits<S> Tr;
  typedef typename Traits<S>::T T;
  typedef typename Traits<S>::C C;
  const C div = (C)udiv;
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  u64 done = 0;
  if ((((u64)dst | (u64)src) & 15) == 0) {
    const int W = 16 / sizeof(T);
    const u64 nvec = n / W;
    const uint4 *vs = (const uint4 *)src;
    uint4 *vd = (uint4 *)dst;
    for (u64 i = tid; i < nvec; i += stride) {
      Vec<T> x;
      x.v = vs[i];
#pragma unroll
      for (int k = 0; k < W; k++) x.e[k] = Tr::store(Tr::load(x.e[k]) / div);
      vd[i] = x.v;
    }
    done = nvec * W;
  }
  for (u64 i = done + tid; i < n; i += stride) dst[i] = Tr::store(Tr::load(src[i]) / div);
}

#define REDUCE(opname, Op, Avg, tname, S)                                                  \
  extern "C" __global__ void __launch_bounds__(512) braid_reduce_##opname##_##tname(     \
      Traits<S>::T *dst0, Traits<S>::T *dst1, const Traits<S>::T *a, const Traits<S>::T *b, \
      u64 n, u32 div) {                                                                    \
    reduce_body<S, Op, Avg>(dst0, dst1, a, b, n, div);                                     \
  }

#define DIVIDE(tname, S)                                                                   \
  extern "C" __global__ void __launch_bounds__(512) braid_divide_##tname(                  \
      Traits<S>::T *dst, const Traits<S>::T *src, u64 n, u32 div) {                        \
    divide_body<S>(dst, src, n, div);                                                      \
  }

#define FLOAT_KERNELS(tname, S)          \
  REDUCE(sum, OpSum, false, tname, S)    \
  REDUCE(prod, OpProd, false, tname, S)  \
  REDUCE(min, OpMin, false, tname, S)    \
  REDUCE(max, OpMax, false, tname, S)    \
  REDUCE(avg, OpAvg, true, tname, S)     \
  DIVIDE(tname, S)

#define INT_KERNELS(tname, S)            \
  REDUCE(sum, OpSum, false, tname, S)    \
  REDUCE(prod, OpProd, false, tname, S)  \
  REDUCE(min, OpMin, false, tname, S)    \
  REDUCE(max, OpMax, false, tname, S)    \
  REDUCE(band, OpBAnd, false, tname, S)  \
  REDUCE(bor, OpBOr, false, tname, S)    \
  REDUCE(bxor, OpBXor, false, tname, S)

FLOAT_KERNELS(f32, float)
FLOAT_KERNELS(f64, double)
FLOAT_KERNELS(f16, F16)
FLOAT_KERNELS(bf16, BF16)
INT_KERNELS(i8, i8)
INT_KERNELS(u8, u8)
INT_KERNELS(i32, i32)
INT_KERNELS(u32, u32)
INT_KERNELS(i64, i64)
INT_KERNELS(u64, u64)

// ---------------------------------------------------------------------------
// One-shot allreduce for small vectors on GPUs that reach each other's memory
// (NVLink or NVSwitch, through CUDA IPC mappings), in one kernel and with no
// host in the loop:
//
//     braid_oneshot_<op>_<type>(const T *in, T *out, u64 n, u32 *seqs, u32 rounds,
//                               u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes,
//                               u64 timeout_ns, u32 *status, char *r0, ..., char *r7)
//
// r0..r7 are the bases of every rank's registered region as mapped in this
// process (this rank's own region among them); nranks <= 8. A region is
//
//     flags: u32 [ONESHOT_BLOCKS][8] at offset 0 (flag [b][from])
//     slots: 2 parities x nranks slots of slot_bytes, from offset ONESHOT_SLOTS
//
// The call's sequence number seq is not an argument: the kernel reads it
// from seqs, this rank's counters in device memory, and advances them by
// rounds (1 here) when it ends (seq_begin, seq_end below), so that a launch
// captured in a CUDA graph runs a new number at every replay.
//
// Block b of the grid owns a contiguous piece of the vector. It pushes its
// piece of in to every peer p's slot [seq & 1][rank] (stores over NVLink), then
// sets flag [b][rank] of every peer to 2·seq with a system-scope release, waits
// until its own flags [b][p] of every peer reach 2·seq (acquire), and combines
// the pieces in rank order, its own from in: every rank computes the same
// expression, so every rank gets the same bits, and the same bits as Braid's
// host kernels folding ranks 0, 1, ..., n-1 left to right (avg: the sum, then
// one division by nranks).
//
// Reuse needs no second barrier. A rank writes parity seq & 1 of a peer's
// slots only in call seq; it started call seq after its call seq-1 ended,
// which waited for every peer's flags of seq-1, which those peers set after
// their call seq-2 had ended, the last reader of that parity. Flags only
// grow (modulo 2^32, compared by signed difference), so a peer already at
// seq+1 does not hide seq.
//
// A peer that does not arrive within timeout_ns (globaltimer) makes the
// block give up: it stores 1 + that peer's rank in *status (mapped host
// memory that the host reads after the stream) and leaves out undefined.
// ---------------------------------------------------------------------------

#define ONESHOT_BLOCKS 256
#define ONESHOT_SLOTS 8192
// The host region of the multi-path kernels (mapped pinned memory that
// every rank sees) has a half per parity, of HOST_HALF bytes each: round g
// uses half g & 1 only, whatever the kernel, as with the slots.
#define HOST_HALF (8 << 20)

// host_area is this block's area number index in half g & 1 of the host
// region, whose areas take bytes a block, each area's blocks in a row.
__device__ __forceinline__ u8 *host_area(u8 *host, u32 g, u64 index, u64 bytes) {
  return host + (u64)(g & 1) * HOST_HALF + (index * gridDim.x + blockIdx.x) * bytes;
}

// Device-resident sequence numbers. A fused kernel reads its call's first
// sequence number from seqs, ONESHOT_BLOCKS words in this rank's device
// memory that only the fused kernels of one communicator touch, all on one
// stream, and advances them by the call's rounds when it ends: a launch
// replayed from a CUDA graph then runs a new number every time, as a launch
// from the host does, and both kinds of launch draw from one sequence.
// Between kernels every word holds the same value, the next call's seq.
// Block b reads word b when it starts (seq_begin) and, when it ends
// (seq_end), writes seq + rounds into every word j with j mod gridDim.x ==
// b: its own, once all its threads have read it, and those of the blocks
// this grid does not have, which no block of the kernel reads. So no word
// is written while a block of the kernel may still read it, and the next
// kernel on the stream, which starts after this one ended, reads the new
// value in every block, whatever its grid. Every rank makes the same calls
// in the same order, so the ranks' counters stay in step. The host counts
// the same numbers (gpu.fusedState.seq) and, before the sequence would pass
// gpu.SeqLimit, clears the flags and lines and sets every word back to 1.
//
// braid_fused_abi_seqs marks kernels built with these parameter lists
// (u32 *seqs, u32 rounds where a sequence number was passed before):
// package cuda's loader requires it, so that a host that passes counters
// never launches kernels that expect a number.
extern "C" __global__ void braid_fused_abi_seqs() {}
__device__ __forceinline__ u32 seq_begin(const u32 *seqs) {
  return *(const volatile u32 *)(seqs + blockIdx.x);
}
__device__ __forceinline__ void seq_end(u32 *seqs, u32 next) {
  __syncthreads();  // every thread of the block has read word blockIdx.x
  for (u32 j = blockIdx.x + threadIdx.x * gridDim.x; j < ONESHOT_BLOCKS; j += blockDim.x * gridDim.x) seqs[j] = next;
}

__device__ __forceinline__ void st_release_sys(u32 *p, u32 v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ u32 ld_acquire_sys(const u32 *p) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The peers a signal_wait waits for, as a mask of ranks.
#define ALL_PEERS (~0u)
#define NO_PEERS (0u)

// signal_wait raises this block's flag [b][rank] to v in every peer's region
// (after everything the block wrote), then waits until its own flags [b][p]
// reach v for every peer p in the mask from. It returns false, after
// recording the peer in *status, if one does not within timeout_ns. Every
// thread calls it. With sig false it only waits; with from NO_PEERS it only
// raises.
__device__ __forceinline__ bool signal_wait(char *const *base, u32 rank, u32 nranks, u32 v, u64 timeout_ns,
                                            u32 *status, bool sig = true, u32 from = ALL_PEERS) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  const u32 t = threadIdx.x;
  if (t < nranks && t != rank) {
    // The release is cumulative: it orders the stores that every thread
    // of the block made before __syncthreads, which this thread has
    // observed through the barrier. (A __threadfence_system() before it
    // cost 0.5 µs a call on H200s and changed nothing.)
    if (sig) st_release_sys((u32 *)(base[t]) + blockIdx.x * 8 + rank, v);
    const u32 *flag = (const u32 *)(base[rank]) + blockIdx.x * 8 + t;
    const u64 start = globaltimer();
    while ((from >> t & 1) && (int)(ld_acquire_sys(flag) - v) < 0) {
      if (globaltimer() - start > timeout_ns) {
        atomicCAS(status, 0u, t + 1);
        __threadfence_system();
        failed = 1;
        break;
      }
    }
  }
  __syncthreads();
  return !failed;
}

// ld loads *p bypassing L1 (ld.cg): p may be in a slot that a peer
// rewrites between rounds. Fresh loads (ld.cv) also take nothing from L2,
// for host memory that peers rewrite across the bus.
template <bool Fresh, typename V> __device__ __forceinline__ V ld(const V *p) {
  if constexpr (Fresh) {
    return __ldcv(p);
  } else {
    return __ldcg(p);
  }
}

// copy_vec copies the whole words of type V in elements [lo, hi) of src
// to dst, four loads in flight per thread, and returns where they end;
// dst + lo and src + lo are V-aligned.
template <typename V, bool Fresh, typename T>
__device__ __forceinline__ u64 copy_vec(T *dst, const T *src, u64 lo, u64 hi) {
  const u64 W = sizeof(V) / sizeof(T);
  const u64 bd = blockDim.x;
  const V *s = (const V *)(src + lo);
  V *d = (V *)(dst + lo);
  const u64 nv = (hi - lo) / W;
  u64 i = threadIdx.x;
  for (; i + 3 * bd < nv; i += 4 * bd) {
    const V a = ld<Fresh>(s + i), b = ld<Fresh>(s + i + bd), c = ld<Fresh>(s + i + 2 * bd), e = ld<Fresh>(s + i + 3 * bd);
    d[i] = a;
    d[i + bd] = b;
    d[i + 2 * bd] = c;
    d[i + 3 * bd] = e;
  }
  for (; i < nv; i += bd) d[i] = ld<Fresh>(s + i);
  return lo + nv * W;
}

// copy_piece copies elements [lo, hi) of src to dst: 16 bytes at a time
// where both are 16-byte aligned, else 8 or 4 where both are that aligned
// (the blocks of an allgather or reduce-scatter whose size is not a
// multiple of 16 bytes), else an element at a time. Fresh: see ld.
template <bool Fresh = false, typename T>
__device__ __forceinline__ void copy_piece(T *dst, const T *src, u64 lo, u64 hi) {
  if (hi <= lo) return;
  const u64 a = (u64)(dst + lo) | (u64)(src + lo);
  u64 tail = lo;
  if ((a & 15) == 0) {
    tail = copy_vec<uint4, Fresh>(dst, src, lo, hi);
  } else if ((a & 7) == 0) {
    if constexpr (sizeof(T) < 8) tail = copy_vec<uint2, Fresh>(dst, src, lo, hi);
  } else if ((a & 3) == 0) {
    if constexpr (sizeof(T) < 4) tail = copy_vec<u32, Fresh>(dst, src, lo, hi);
  }
  for (u64 i = tail + threadIdx.x; i < hi; i += blockDim.x) dst[i] = ld<Fresh>(src + i);
}

// fanout_vec copies the whole words of type V in elements [lo, hi) of src
// to each of dst[0..nd): one load, nd stores; every address V-aligned.
template <typename V, typename T>
__device__ __forceinline__ u64 fanout_vec(T *const *dst, u32 nd, const T *src, u64 lo, u64 hi) {
  const u64 W = sizeof(V) / sizeof(T);
  const u64 bd = blockDim.x;
  const V *s = (const V *)(src + lo);
  const u64 nv = (hi - lo) / W;
  u64 i = threadIdx.x;
  for (; i + bd < nv; i += 2 * bd) {
    const V a = __ldcg(s + i), b = __ldcg(s + i + bd);
    for (u32 k = 0; k < nd; k++) {
      V *d = (V *)(dst[k] + lo);
      d[i] = a;
      d[i + bd] = b;
    }
  }
  for (; i < nv; i += bd) {
    const V a = __ldcg(s + i);
    for (u32 k = 0; k < nd; k++) ((V *)(dst[k] + lo))[i] = a;
  }
  return lo + nv * W;
}

// fanout copies elements [lo, hi) of src to each of dst[0..nd): one load,
// nd stores, in the widest words (16, 8 or 4 bytes) every address allows.
template <typename T>
__device__ __forceinline__ void fanout(T *const *dst, u32 nd, const T *src, u64 lo, u64 hi) {
  if (hi <= lo || nd == 0) return;
  u64 a = (u64)(src + lo);
  for (u32 k = 0; k < nd; k++) a |= (u64)(dst[k] + lo);
  u64 tail = lo;
  if ((a & 15) == 0) {
    tail = fanout_vec<uint4>(dst, nd, src, lo, hi);
  } else if ((a & 7) == 0) {
    if constexpr (sizeof(T) < 8) tail = fanout_vec<uint2>(dst, nd, src, lo, hi);
  } else if ((a & 3) == 0) {
    if constexpr (sizeof(T) < 4) tail = fanout_vec<u32>(dst, nd, src, lo, hi);
  }
  for (u64 i = tail + threadIdx.x; i < hi; i += blockDim.x) {
    const T x = __ldcg(src + i);
    for (u32 k = 0; k < nd; k++) dst[k][i] = x;
  }
}

// reduce_into writes, for i in [lo, hi), the combination of src[0][i],
// src[1][i], ..., src[nsrc-1][i] in that order (avg: the sum, divided by
// nsrc) to out[i] and to push[k][i] for k < npush; nsrc <= 8, npush <= 7.
// Each thread loads every source of two vectors before it combines them,
// so that up to 16 loads are in flight. Fresh: see ld.
template <typename S, typename Op, bool Avg, bool Fresh = false>
__device__ __forceinline__ void reduce_into(typename Traits<S>::T *out, typename Traits<S>::T *const *push, u32 npush,
                                            const typename Traits<S>::T *const *src, u32 nsrc, u64 lo, u64 hi) {
  typedef Traits<S> Tr;
  typedef typename Traits<S>::T T;
  typedef typename Traits<S>::C C;
  const int W = 16 / sizeof(T);
  if (hi <= lo) return;
  u64 bits = (u64)(out + lo);
  const T *s[8];
  T *d[7];
#pragma unroll
  for (int r = 0; r < 8; r++) {
    s[r] = r < nsrc ? src[r] + lo : src[0] + lo;
    bits |= (u64)s[r];
  }
#pragma unroll
  for (int k = 0; k < 7; k++) {
    d[k] = k < npush ? push[k] + lo : out + lo;
    bits |= (u64)d[k];
  }
  u64 tail = lo;
  if ((bits & 15) == 0) {
    const u64 nv = (hi - lo) / W;
    const u64 bd = blockDim.x;
    for (u64 i0 = threadIdx.x; i0 < nv; i0 += 2 * bd) {
      Vec<T> x[2][8];
#pragma unroll
      for (int u = 0; u < 2; u++) {
#pragma unroll
        for (int r = 0; r < 8; r++) {
          if (r < nsrc && i0 + u * bd < nv) x[u][r].v = ld<Fresh>((const uint4 *)s[r] + i0 + u * bd);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; u++) {
        const u64 i = i0 + u * bd;
        if (i < nv) {
          Vec<T> acc = x[u][0];
#pragma unroll
          for (int r = 1; r < 8; r++) {
            if (r < nsrc) {
#pragma unroll
              for (int k = 0; k < W; k++) acc.e[k] = combine<S, Op, false>(acc.e[k], x[u][r].e[k], (C)1);
            }
          }
          if (Avg) {
#pragma unroll
            for (int k = 0; k < W; k++) acc.e[k] = Tr::store(Tr::load(acc.e[k]) / (C)nsrc);
          }
          ((uint4 *)(out + lo))[i] = acc.v;
#pragma unroll
          for (int k = 0; k < 7; k++) {
            if (k < npush) ((uint4 *)d[k])[i] = acc.v;
          }
        }
      }
    }
    tail = lo + nv * W;
  }
  for (u64 i = tail + threadIdx.x; i < hi; i += blockDim.x) {
    T acc = ld<Fresh>(src[0] + i);
    for (u32 r = 1; r < nsrc; r++) acc = combine<S, Op, false>(acc, ld<Fresh>(src[r] + i), (C)1);
    if (Avg) acc = Tr::store(Tr::load(acc) / (C)nsrc);
    out[i] = acc;
    for (u32 k = 0; k < npush; k++) push[k][i] = acc;
  }
}

template <typename S, typename Op, bool Avg>
__device__ __forceinline__ void oneshot_body(const typename Traits<S>::T *in, typename Traits<S>::T *out, u64 n,
                                             u32 seq, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes, u64 timeout_ns,
                                             u32 *status, char *const *base) {
  typedef typename Traits<S>::T T;
  const int W = 16 / sizeof(T);
  // This block's piece [lo, hi), whole vectors except at the end.
  const u64 per = ((n + gridDim.x - 1) / gridDim.x + W - 1) / W * W;
  const u64 lo = min((u64)blockIdx.x * per, n);
  const u64 hi = min(lo + per, n);
  const u64 parity = seq & 1;
  // 1. Push the piece into every peer's slot for this rank.
  T *dst[8];
  u32 nd = 0;
  for (u32 p = 0; p < nranks; p++) {
    if (p != rank) dst[nd++] = (T *)(base[p] + ONESHOT_SLOTS + (parity * nranks + rank) * slot_bytes);
  }
  fanout(dst, nd, in, lo, hi);
  // 2. Tell every peer; 3. wait for every peer. Flags carry 2·seq: the
  // two-shot kernel's first phase raises them to 2·seq − 1, so that both
  // kernels keep them growing.
  if (!signal_wait(base, rank, nranks, 2 * seq, timeout_ns, status)) return;
  // 4. Combine in rank order.
  const char *slots = base[rank] + ONESHOT_SLOTS + parity * nranks * slot_bytes;
  const T *src[8];
  for (u32 r = 0; r < nranks; r++) src[r] = r == rank ? in : (const T *)(slots + r * slot_bytes);
  reduce_into<S, Op, Avg>(out, (T *const *)0, 0, src, nranks, lo, hi);
}

// ---------------------------------------------------------------------------
// Low-latency one-shot allreduce (LL lines), for small vectors whose size is
// a multiple of 8 bytes, with in and out 8-byte aligned:
//
//     braid_oneshotll_<op>_<type>(same arguments as braid_oneshot_...)
//
// The one-shot kernel above pushes data, then raises a flag with a release:
// the flag may only be seen after the data, so the release waits until every
// store of the block has reached the peer, and only then does the flag
// travel. Here data and flag travel together: every 16-byte store carries
// 8 bytes of the vector as two 4-byte words, each beside a copy of the
// call's sequence number,
//
//     { data[0:4], seq, data[4:8], seq }
//
// and a reader that loads the line whole and finds seq in both flag words
// has both data words of this call (a 16-byte store reaches the peer at
// least as two whole 8-byte halves). No fence, no separate flag: a word
// costs one trip over NVLink instead of a store, an acknowledgement and a
// flag. The price is twice the bytes on the wire, which is why only small
// vectors (OneShotLLMax) go this way.
//
// The lines live in their own part of the region, after the slots, where
// nothing else writes: 2 parities x nranks sources x ONESHOT_LL_SLOT bytes
// (data of ONESHOT_LL_SLOT / 2 bytes). Only these kernels write there, so a
// line's flag words hold sequence numbers of this kernel's calls or the
// zeros the host cleared the part to, and sequence numbers start at 1.
//
// Reuse is the one-shot kernel's argument: a rank writes parity seq & 1 of
// a peer's lines in call seq only; it started after its previous fused call
// ended, which needed every peer's data or flags of that call, which the
// peer produced only after its call before (the last reader of the lines of
// an earlier LL call on the other side of this parity) had ended. Two LL
// calls in a row have consecutive numbers, so alternate parities.
//
// Each thread moves whole 8-byte words: it pushes its words to every peer,
// then waits for each peer's line of each word and combines in rank order,
// its own word from in (the same expression and order as the one-shot).
// ---------------------------------------------------------------------------

#define ONESHOT_LL_SLOT (512 << 10)

__device__ __forceinline__ void ll_store(uint4 *p, u64 v, u32 flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"((u32)v), "r"(flag),
               "r"((u32)(v >> 32)), "r"(flag)
               : "memory");
}

// ll_load returns true, with the line's data in *v, once the line holds
// flag in both of its flag words.
__device__ __forceinline__ bool ll_load(const uint4 *p, u32 flag, u64 *v) {
  u32 a, b, c, d;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
               : "l"(p)
               : "memory");
  *v = (u64)a | ((u64)c << 32);
  return b == flag && d == flag;
}

template <typename T> union Word {
  u64 u;
  T e[8 / sizeof(T)];
};

// ll_wait waits until line l holds flag, and returns its data in *v; it
// returns false, after recording peer in *status, if that takes longer
// than timeout_ns.
__device__ __forceinline__ bool ll_wait(const uint4 *l, u32 flag, u64 *v, u64 timeout_ns, u32 *status, u32 peer) {
  if (ll_load(l, flag, v)) return true;
  const u64 start = globaltimer();
  for (u32 spin = 1; !ll_load(l, flag, v); spin++) {
    if ((spin & 255) == 0 && globaltimer() - start > timeout_ns) {
      atomicCAS(status, 0u, peer + 1);
      __threadfence_system();
      return false;
    }
  }
  return true;
}

// ll_combine folds x into acc (the next rank's word in rank order).
template <typename S, typename Op>
__device__ __forceinline__ void ll_combine(Word<typename Traits<S>::T> &acc, const Word<typename Traits<S>::T> &x) {
  typedef typename Traits<S>::C C;
#pragma unroll
  for (int k = 0; k < (int)(8 / sizeof(typename Traits<S>::T)); k++) acc.e[k] = combine<S, Op, false>(acc.e[k], x.e[k], (C)1);
}

// ll_finish divides by nranks (avg).
template <typename S, bool Avg>
__device__ __forceinline__ void ll_finish(Word<typename Traits<S>::T> &acc, u32 nranks) {
  typedef Traits<S> Tr;
  typedef typename Traits<S>::C C;
  if (Avg) {
#pragma unroll
    for (int k = 0; k < (int)(8 / sizeof(typename Traits<S>::T)); k++) acc.e[k] = Tr::store(Tr::load(acc.e[k]) / (C)nranks);
  }
}

// ll_line is line j of source `from` in rank p's low-latency lines of a
// parity (lines: where they start in a region).
__device__ __forceinline__ uint4 *ll_line(char *const *base, u64 lines, u64 parity, u32 nranks, u32 p, u32 from, u64 j) {
  return (uint4 *)(base[p] + lines + (parity * nranks + from) * ONESHOT_LL_SLOT) + j;
}

// ll_reduce combines one word of every rank in rank order, this rank's
// own and every peer r's from line line(r) of this rank's lines once it
// holds seq, into *acc (avg: divided by nranks): the one-shot's expression,
// so every rank gets the same bits. It returns false, after recording the
// peer, if one does not arrive within timeout_ns.
template <typename S, typename Op, bool Avg, typename Line>
__device__ __forceinline__ bool ll_reduce(u64 own, u32 rank, u32 nranks, u32 seq, Line line, u64 timeout_ns, u32 *status,
                                          Word<typename Traits<S>::T> *acc) {
  Word<typename Traits<S>::T> x;
  for (u32 r = 0; r < nranks; r++) {
    if (r == rank) {
      x.u = own;
    } else if (!ll_wait(line(r), seq, &x.u, timeout_ns, status, r)) {
      return false;
    }
    if (r == 0) {
      *acc = x;
    } else {
      ll_combine<S, Op>(*acc, x);
    }
  }
  ll_finish<S, Avg>(*acc, nranks);
  return true;
}

template <typename S, typename Op, bool Avg>
__device__ __forceinline__ void oneshotll_body(const typename Traits<S>::T *in, typename Traits<S>::T *out, u64 n,
                                               u32 seq, u32 rank, u32 nranks, u64 slot_bytes, u64 timeout_ns,
                                               u32 *status, char *const *base) {
  typedef typename Traits<S>::T T;
  const u64 words = n * sizeof(T) / 8;
  const u64 lines = ONESHOT_SLOTS + 2 * (u64)nranks * slot_bytes;  // the lines' offset in a region
  const u64 parity = seq & 1;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 *src = (const u64 *)in;
  // 1. Push: word i of this rank goes to line i of source `rank` at every peer.
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
    const u64 v = src[i];
    for (u32 p = 0; p < nranks; p++) {
      if (p != rank) ll_store(ll_line(base, lines, parity, nranks, p, rank, i), v, seq);
    }
  }
  // 2. Wait for every peer's word and combine in rank order.
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
    Word<T> acc;
    auto line = [&](u32 r) { return ll_line(base, lines, parity, nranks, rank, r, i); };
    if (!ll_reduce<S, Op, Avg>(src[i], rank, nranks, seq, line, timeout_ns, status, &acc)) return;
    ((u64 *)out)[i] = acc.u;
  }
}

// Two-shot allreduce in low-latency lines, for vectors too large for every
// rank to send whole to every peer (the one-shot's lines carry n - 1 times
// the vector, doubled, out of each GPU): chunk q of the vector (c words,
// c = ceil(words / nranks)) goes to rank q, which combines it in rank order
// (the one-shot's expression, so the same bits), writes it and pushes the
// result to every peer. A source's lines hold phase 1 in their first half
// and phase 2 in their second, so c is at most ONESHOT_LL_SLOT / 32 words.
// Thread j handles word j of every chunk in all three steps, so every
// element of in and out is read and written by one thread only (in place
// works), and no step needs a barrier. Reuse is the one-shot's argument.
template <typename S, typename Op, bool Avg>
__device__ __forceinline__ void twoshotll_body(const typename Traits<S>::T *in, typename Traits<S>::T *out, u64 n,
                                               u32 seq, u32 rank, u32 nranks, u64 slot_bytes, u64 timeout_ns,
                                               u32 *status, char *const *base) {
  typedef typename Traits<S>::T T;
  const u64 words = n * sizeof(T) / 8;
  const u64 c = (words + nranks - 1) / nranks;
  const u64 half = ONESHOT_LL_SLOT / 2 / 16;  // lines of a phase
  const u64 lines = ONESHOT_SLOTS + 2 * (u64)nranks * slot_bytes;
  const u64 parity = seq & 1;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 *src = (const u64 *)in;
  u64 *dst = (u64 *)out;
  // 1. Word j of chunk q to rank q.
  for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < c; j += stride) {
    for (u32 q = 0; q < nranks; q++) {
      const u64 i = q * c + j;
      if (q != rank && i < words) ll_store(ll_line(base, lines, parity, nranks, q, rank, j), src[i], seq);
    }
  }
  // 2. Combine this rank's chunk, write it, push it to every peer.
  for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < c && rank * c + j < words; j += stride) {
    const u64 i = rank * c + j;
    Word<T> acc;
    auto line = [&](u32 r) { return ll_line(base, lines, parity, nranks, rank, r, j); };
    if (!ll_reduce<S, Op, Avg>(src[i], rank, nranks, seq, line, timeout_ns, status, &acc)) return;
    dst[i] = acc.u;
    for (u32 p = 0; p < nranks; p++) {
      if (p != rank) ll_store(ll_line(base, lines, parity, nranks, p, rank, half + j), acc.u, seq);
    }
  }
  // 3. Every other chunk, from its rank.
  for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < c; j += stride) {
    for (u32 q = 0; q < nranks; q++) {
      const u64 i = q * c + j;
      if (q == rank || i >= words) continue;
      u64 v;
      if (!ll_wait(ll_line(base, lines, parity, nranks, rank, q, half + j), seq, &v, timeout_ns, status, q)) return;
      dst[i] = v;
    }
  }
}

// ---------------------------------------------------------------------------
// Pipelined fused kernels: the two-shot allreduce, reduce-scatter, allgather
// and broadcast, for any size, through slots of a fixed size.
//
// Each block owns one area of every slot: area b is bytes
// [b * area, (b + 1) * area) with area = (slot_bytes / gridDim.x) rounded
// down to 16 bytes. Block b only writes area b of a peer's slot and only
// reads area b of its own, so a block talks to the same block of every peer
// and to no other. The vector is moved in rounds; a round moves at most an
// area per block and peer. Round r of a call that starts at sequence number
// seq is round g = seq + r: it uses slots of parity g & 1 and raises flags
// to 2g - 1 (first phase, two-phase kernels) and 2g. The kernel advances
// its counters (seq_end) by the call's number of rounds, which the host
// passes (fused.Kernel.Rounds counts them as the loops below do, and
// TestRounds holds the two together), so rounds, like calls, never share a
// number.
//
// Reuse: block b writes area b of parity g & 1 at a peer (round g) only
// after it has seen a flag that the peer's block b raised once it had
// finished reading round g - 2 there, the last earlier round of that
// parity; each kernel below says which flag. A block pushes the next
// round before it reads the current one where that argument allows, so
// that its stores are in flight while it waits and combines. Across calls
// the argument of the one-shot kernel holds: every block of a kernel takes
// part in every round, so when a rank's kernel ends, every peer's blocks
// have reached its last round and finished reading the one before.
//
// Every rank of a call launches the same grid with the same slot_bytes.
// ---------------------------------------------------------------------------

// block_area is the bytes of a slot that belong to this block: the call's
// area_bytes, at most an even share of the slot, in whole 16 bytes.
__device__ __forceinline__ u64 block_area(u64 slot_bytes, u64 area_bytes) {
  const u64 share = slot_bytes / gridDim.x;
  return (area_bytes == 0 ? share : min(area_bytes, share)) & ~(u64)15;
}

// split returns this block's part [*lo, *hi) of len items from off,
// cut in whole multiples of w.
__device__ __forceinline__ void split(u64 off, u64 len, u64 w, u64 *lo, u64 *hi) {
  const u64 per = ((len + gridDim.x - 1) / gridDim.x + w - 1) / w * w;
  *lo = off + min((u64)blockIdx.x * per, len);
  *hi = off + min((u64)blockIdx.x * per + per, len);
}

// pipeline runs the one-phase rounds of a pipelined kernel over items
// [0, total), span a round, cut per block in multiples of w: it pushes
// round 0, then for each round g raises flags to 2g and waits for the
// peers', pushes round g + 1 and takes round g. push(g, lo, hi) writes the
// block's part [lo, hi) of round g into the peers' slots; take(g, lo, hi)
// reads it from this rank's. A peer's flag 2g + 2 then says that it has
// taken round g, the last read of parity g & 1 before round g + 2's push.
template <typename Push, typename Take>
__device__ __forceinline__ void pipeline(u64 total, u64 span, u64 w, u32 seq, char *const *base, u32 rank,
                                         u32 nranks, u64 timeout_ns, u32 *status, Push push, Take take) {
  const u64 rounds = max((total + span - 1) / span, (u64)1);
  u64 lo, hi;
  split(0, min(span, total), w, &lo, &hi);
  push(seq, lo, hi);
  for (u64 r = 0; r < rounds; r++) {
    const u32 g = seq + (u32)r;
    if (!signal_wait(base, rank, nranks, 2 * g, timeout_ns, status)) return;
    u64 nlo = 0, nhi = 0;
    if (r + 1 < rounds) {
      split((r + 1) * span, min(span, total - min((r + 1) * span, total)), w, &nlo, &nhi);
      push(g + 1, nlo, nhi);
    }
    take(g, lo, hi);
    lo = nlo;
    hi = nhi;
  }
}

// AREA is block b's area of slot [parity][q] in rank p's region, as T *.
#define AREA(T, p, q) \
  ((T *)(base[p] + ONESHOT_SLOTS + (parity * nranks + (q)) * slot_bytes + (u64)blockIdx.x * area))

// The two-shot allreduce: the vector is cut into nranks chunks of c
// elements (c = ceil(n / nranks) rounded up to 16 bytes); rank p reduces
// chunk p. A round moves up to e elements of every chunk per block, e half
// an area. Round g, for a block:
//
//     A(g)  push the sub-range of chunk p into rank p's slot [g & 1][rank]
//           (first half of the area), for every peer p;
//           raise flags to 2g - 1 and wait for the peers';
//     B(g)  combine this rank's sub-range in rank order (its own from in),
//           write it into out and push it into every peer's slot
//           [g & 1][rank] (second half); raise flags to 2g;
//     A(g + 1), then wait for the peers' flags of 2g;
//     C(g)  copy the peers' reduced sub-ranges from the second halves out;
//
// so that the pushes of the next round overlap the wait for this one's.
// Flag 2g + 1 of a peer then says that it has finished C(g), and 2g that it
// has finished B(g): a block writes a half of parity g & 1 again (A(g + 2),
// B(g + 2)) only after it waited for 2g + 1. Each rank sends
// 2(nranks - 1)/nranks of the vector, as a ring does, in 2 steps a round.
template <typename S, typename Op, bool Avg>
__device__ __forceinline__ void twoshot_body(const typename Traits<S>::T *in, typename Traits<S>::T *out, u64 n,
                                             u32 seq, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes, u8 *host,
                                             u64 host_bytes, u64 timeout_ns, u32 *status, char *const *base) {
  typedef typename Traits<S>::T T;
  const int W = 16 / sizeof(T);
  const u64 c = ((n + nranks - 1) / nranks + W - 1) / W * W;
  const u64 area = block_area(slot_bytes, area_bytes);
  const u64 e = area / 2 / sizeof(T) / W * W;
  if (e == 0) return;  // the host never launches this
  // Multi-path: eh elements of every chunk a block and round go through
  // host memory after the e that go over NVLink.
  const u64 eh = host ? host_bytes / sizeof(T) / W * W : 0;
  const u64 span = (e + eh) * gridDim.x;
  const u64 rounds = max((c + span - 1) / span, (u64)1);
  // This block's part of round r of every chunk: [*lo, *hi) over NVLink,
  // [*hlo, *hhi) through host.
  auto range = [&](u64 r, u64 *lo, u64 *hi, u64 *hlo, u64 *hhi) {
    const u64 off = min(r * span, c);
    const u64 nl = min(e * gridDim.x, c - off);
    split(off, nl, W, lo, hi);
    split(off + nl, min(eh * gridDim.x, c - off - nl), W, hlo, hhi);
  };
  // The host areas of a block in half g & 1: that of chunk p from rank
  // q (first phase), and that of rank q's combined chunk (second phase,
  // read by every peer), as pointers to element at.
  auto hostA = [&](u32 g, u32 p, u32 q, u64 at) {
    return (T *)host_area(host, g, (u64)p * nranks + q, eh * sizeof(T)) - at;
  };
  auto hostB = [&](u32 g, u32 q, u64 at) { return (T *)host_area(host, g, (u64)nranks * nranks + q, eh * sizeof(T)) - at; };
  // A(g): the pushes of round r (number g) of the sub-ranges [lo, hi)
  // and [hlo, hhi) of every chunk.
  auto push1 = [&](u32 g, u64 lo, u64 hi, u64 hlo, u64 hhi) {
    const u64 parity = g & 1;
    for (u32 p = 0; p < nranks; p++) {
      if (p == rank) continue;
      const u64 at = (u64)p * c + lo;
      copy_piece(AREA(T, p, rank) - at, in, min(at, n), min((u64)p * c + hi, n));
      if (eh) {
        const u64 ha = (u64)p * c + hlo;
        copy_piece(hostA(g, p, rank, ha), in, min(ha, n), min((u64)p * c + hhi, n));
      }
    }
  };
  u64 lo, hi, hlo, hhi;
  range(0, &lo, &hi, &hlo, &hhi);
  push1(seq, lo, hi, hlo, hhi);
  for (u64 r = 0; r < rounds; r++) {
    const u32 g = seq + (u32)r;
    const u64 parity = g & 1;
    if (!signal_wait(base, rank, nranks, 2 * g - 1, timeout_ns, status)) return;
    // B(g).
    const u64 at = (u64)rank * c + lo;
    const T *src[8];
    T *push[8];
    u32 np = 0;
    for (u32 q = 0; q < nranks; q++) {
      src[q] = q == rank ? in : (const T *)AREA(T, rank, q) - at;
      if (q != rank) push[np++] = AREA(T, q, rank) + e - at;
    }
    reduce_into<S, Op, Avg>(out, push, np, src, nranks, min(at, n), min((u64)rank * c + hi, n));
    if (eh) {
      const u64 ha = (u64)rank * c + hlo;
      for (u32 q = 0; q < nranks; q++) src[q] = q == rank ? in : (const T *)hostA(g, rank, q, ha);
      push[0] = hostB(g, rank, ha);
      reduce_into<S, Op, Avg, true>(out, push, 1, src, nranks, min(ha, n), min((u64)rank * c + hhi, n));
    }
    signal_wait(base, rank, nranks, 2 * g, timeout_ns, status, true, NO_PEERS);
    // A(g + 1).
    u64 nlo = 0, nhi = 0, nhlo = 0, nhhi = 0;
    if (r + 1 < rounds) {
      range(r + 1, &nlo, &nhi, &nhlo, &nhhi);
      push1(g + 1, nlo, nhi, nhlo, nhhi);
    }
    if (!signal_wait(base, rank, nranks, 2 * g, timeout_ns, status, false)) return;
    // C(g).
    for (u32 q = 0; q < nranks; q++) {
      if (q == rank) continue;
      const u64 qa = (u64)q * c + lo;
      copy_piece(out, (const T *)AREA(T, rank, q) + e - qa, min(qa, n), min((u64)q * c + hi, n));
      if (eh) {
        const u64 qh = (u64)q * c + hlo;
        copy_piece<true>(out, (const T *)hostB(g, q, qh), min(qh, n), min((u64)q * c + hhi, n));
      }
    }
    lo = nlo;
    hi = nhi;
    hlo = nhlo;
    hhi = nhhi;
  }
}

// The reduce-scatter: rank p's block of count elements is the combination,
// in rank order, of block p of every rank's in. A round moves up to an area
// of every block per block of the grid. Round g: A(g) pushes the block's
// sub-range of block p into rank p's slot [g & 1][rank]; the block raises
// flags to 2g and waits for every peer's; it pushes A(g + 1), then B(g)
// combines its own sub-range from the slots. A peer's flag 2g + 2 says it
// has finished B(g), the last read of parity g & 1 before A(g + 2).
template <typename S, typename Op, bool Avg>
__device__ __forceinline__ void rsfused_body(const typename Traits<S>::T *in, typename Traits<S>::T *out, u64 count,
                                             u32 seq, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes, u64 timeout_ns,
                                             u32 *status, char *const *base) {
  typedef typename Traits<S>::T T;
  const int W = 16 / sizeof(T);
  const u64 area = block_area(slot_bytes, area_bytes);
  const u64 e = area / sizeof(T) / W * W;
  if (e == 0) return;
  const u64 span = e * gridDim.x;
  auto push = [&](u32 g, u64 lo, u64 hi) {
    const u64 parity = g & 1;
    for (u32 p = 0; p < nranks; p++) {
      if (p != rank) copy_piece(AREA(T, p, rank) - lo, in + (u64)p * count, lo, hi);
    }
  };
  auto take = [&](u32 g, u64 lo, u64 hi) {
    const u64 parity = g & 1;
    const T *src[8];
    for (u32 q = 0; q < nranks; q++) {
      src[q] = q == rank ? in + (u64)rank * count : (const T *)AREA(T, rank, q) - lo;
    }
    reduce_into<S, Op, Avg>(out, (T *const *)0, 0, src, nranks, lo, hi);
  };
  pipeline(count, span, W, seq, base, rank, nranks, timeout_ns, status, push, take);
}

// The allgather moves bytes: a round moves up to an area of every rank's
// block per block of the grid. Round g: A(g) pushes the block's sub-range
// into every peer's slot [g & 1][rank] and copies it to its own place in
// out; the block raises flags to 2g and waits; it pushes A(g + 1), then
// C(g) copies every peer's sub-range out. A peer's flag 2g + 2 says it has
// finished C(g).
__device__ __forceinline__ void allgather_body(const u8 *in, u8 *out, u64 bytes, u32 seq, u32 rank, u32 nranks,
                                               u64 slot_bytes, u64 area_bytes, u64 timeout_ns, u32 *status,
                                               char *const *base) {
  const u64 area = block_area(slot_bytes, area_bytes);
  if (area == 0) return;
  const u64 span = area * gridDim.x;
  u8 *own = out + (u64)rank * bytes;
  auto push = [&](u32 g, u64 lo, u64 hi) {
    const u64 parity = g & 1;
    u8 *dst[8];
    u32 nd = 0;
    for (u32 p = 0; p < nranks; p++) {
      if (p != rank) dst[nd++] = AREA(u8, p, rank) - lo;
    }
    if (own != in) dst[nd++] = own;
    fanout(dst, nd, in, lo, hi);
  };
  auto take = [&](u32 g, u64 lo, u64 hi) {
    const u64 parity = g & 1;
    for (u32 q = 0; q < nranks; q++) {
      if (q != rank) copy_piece(out + (u64)q * bytes, (const u8 *)AREA(u8, rank, q) - lo, lo, hi);
    }
  };
  pipeline(bytes, span, 16, seq, base, rank, nranks, timeout_ns, status, push, take);
}
extern "C" __global__ void __launch_bounds__(512) braid_allgather_fused(
    const u8 *in, u8 *out, u64 bytes, u32 *seqs, u32 rounds, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes, u64 timeout_ns,
    u32 *status, char *r0, char *r1, char *r2, char *r3, char *r4, char *r5, char *r6, char *r7) {
  char *const base[8] = {r0, r1, r2, r3, r4, r5, r6, r7};
  const u32 seq = seq_begin(seqs);
  allgather_body(in, out, bytes, seq, rank, nranks, slot_bytes, area_bytes, timeout_ns, status, base);
  seq_end(seqs, seq + rounds);
}

// The broadcast. Up to BCAST_DIRECT_MAX bytes, and always on 2 GPUs, in
// one phase: a round moves up to an area per block; the root pushes it
// into the slot [g & 1][root] of every peer, flags go to 2g, and the
// others copy it out (a peer's 2g + 2 says it has copied round g).
//
// Above, as a scatter and an allgather among the nranks - 1 ranks other
// than the root. A round moves nranks - 1 parts, each of up to half an
// area per block: the root pushes part k of round g into the first half
// of the k-th other rank's slot [g & 1][root] and raises its flag to
// 2g - 1; that rank raises 2g - 1 too and, once the root's flag has
// reached 2g - 1, copies its part into buf and pushes it into the second
// half of the slot [g & 1][rank] of every other non-root, raises 2g,
// waits for the other non-roots' 2g, and copies their parts. It need not
// wait for the others to start round g: their 2g - 2, which it waited for
// in round g - 1, says they have copied round g - 2 out of the halves it
// now rewrites. The root sends the vector once, as in a chain, and every
// part travels two hops at most. The last full round is cut into ramp + 1
// rounds of halving size (the last two alike), so that the others' last
// exchange, which no push of the root overlaps, is short.
//
// Multi-path (host_bytes > 0): each round also carries up to host_bytes
// per block after its parts, through host memory: the root stores them
// into its block's area [g & 1] of host (mapped pinned memory that every
// rank sees; an area of host_bytes a block in each half), across the bus, before it
// raises 2g - 1, and every other rank loads them from there into buf. The
// bus adds to the root's links what NVLink alone cannot carry out of it
// (Temuçin's MASc thesis, Queen's University 2021, section 4), and the
// host's copy reaches every rank at once.
//
// The root streams: it reads nothing, so it pushes round g as soon as
// every other rank has raised 2g - 4, so has finished the first phase of
// round g - 2, the last earlier reader of that parity's first halves and
// host area, and can run almost two rounds ahead of the slowest rank; for
// round seq + 1 it waits for every other rank to start the call (2g - 3),
// since another kernel's last round may have used that parity. Across
// calls: it pushes the call's first round at once
// (its parity is not that of the round before, the last one a peer may
// still read), and ends once every peer has reached its last round, so has
// finished the one before, as the other kernels do. (fused.Kernel.Rounds
// counts rounds the same way.)
#define BCAST_DIRECT_MAX (1 << 20)
__device__ __forceinline__ void bcast_body(u8 *buf, u64 bytes, u32 root, u32 ramp_in, u32 seq, u32 rank, u32 nranks,
                                           u64 slot_bytes, u64 area_bytes, u8 *host, u64 host_bytes, u64 timeout_ns,
                                           u32 *status, char *const *base) {
  const u64 area = block_area(slot_bytes, area_bytes);
  if (nranks < 2 || area == 0) return;
  if (nranks == 2 || bytes <= BCAST_DIRECT_MAX) {
    const u64 span = area * gridDim.x;
    const u64 rounds = max((bytes + span - 1) / span, (u64)1);
    for (u64 r = 0; r < rounds; r++) {
      const u32 g = seq + (u32)r;
      const u64 parity = g & 1;
      u64 lo, hi;
      split(r * span, min(span, bytes - min(r * span, bytes)), 16, &lo, &hi);
      if (rank == root) {
        u8 *dst[8];
        u32 nd = 0;
        for (u32 p = 0; p < nranks; p++) {
          if (p != root) dst[nd++] = AREA(u8, p, root) - lo;
        }
        fanout(dst, nd, (const u8 *)buf, lo, hi);
      }
      if (!signal_wait(base, rank, nranks, 2 * g, timeout_ns, status)) return;
      if (rank != root) copy_piece(buf, (const u8 *)AREA(u8, rank, root) - lo, lo, hi);
    }
    return;
  }
  const u64 e = area / 2 / 16 * 16;
  if (e == 0) return;
  const u64 m = nranks - 1;
  const u64 span = e * gridDim.x;            // of one part
  const u64 hb = host ? host_bytes / 16 * 16 : 0;
  const u64 whole = m * span + hb * gridDim.x;  // a full round
  // The rounds: full ones, then the last whole (or the vector, if smaller)
  // in ramp + 1 rounds of a half, a quarter, ... of it, the last two
  // alike, so that the others' last exchange, which nothing overlaps, is
  // short.
  const u64 ramp = min(ramp_in, 8u);
  const u64 tail = min(bytes, whole);
  const u64 head = bytes - tail;
  const u64 heads = (head + whole - 1) / whole;
  const u64 rounds = heads + ramp + 1;
  // Round r: the bytes of part k that this block moves, [*lo, *hi), and
  // those it moves through host memory, [*hlo, *hhi).
  auto part = [&](u64 r, u64 k, u64 *lo, u64 *hi, u64 *hlo, u64 *hhi) {
    u64 off, len;
    if (r < heads) {
      off = r * whole;
      len = min(whole, head - off);
    } else {
      const u64 j = r - heads;
      off = head + ((tail - (tail >> j)) & ~(u64)15);
      len = (j == ramp ? bytes : head + ((tail - (tail >> (j + 1))) & ~(u64)15)) - off;
    }
    const u64 nl = min(len, m * span);
    const u64 ps = ((nl + m - 1) / m + 15) / 16 * 16;  // a part, at most span
    u64 blo, bhi;
    split(0, ps, 16, &blo, &bhi);
    *lo = off + min(k * ps + blo, nl);
    *hi = off + min(k * ps + bhi, nl);
    split(off + nl, len - nl, 16, hlo, hhi);
  };
  auto part_of = [&](u32 p) -> u64 { return p < root ? p : p - 1; };
  // This block's host area of parity g & 1, as a pointer to byte lo.
  auto hostArea = [&](u32 g, u64 lo) { return host_area(host, g, 0, hb) - lo; };
  const u32 others = ALL_PEERS & ~(1u << root);
  if (rank == root) {
    for (u64 r = 0; r < rounds; r++) {
      const u32 g = seq + (u32)r;
      const u64 parity = g & 1;
      // Round g rewrites what the others read of round g - 2 in their
      // first phase (raising 2g - 4 after it); round seq + 1 what they
      // read of round seq - 1, in any kernel, done once they have started
      // this one (2g - 3).
      const u32 ready = r == 1 ? 2 * g - 3 : 2 * g - 4;
      if (r > 0 && !signal_wait(base, rank, nranks, ready, timeout_ns, status, false)) return;
      u64 lo, hi, hlo, hhi;
      for (u32 p = 0; p < nranks; p++) {
        if (p == root) continue;
        part(r, part_of(p), &lo, &hi, &hlo, &hhi);
        copy_piece(AREA(u8, p, root) - lo, buf, lo, hi);
      }
      if (hb) copy_piece(hostArea(g, hlo), buf, hlo, hhi);
      signal_wait(base, rank, nranks, 2 * g - 1, timeout_ns, status, true, NO_PEERS);
    }
    // It ends once every other rank has finished reading what it pushed
    // for the round before the last (2g - 2 for the last round g), or
    // what earlier kernels pushed (2seq - 1: it has started the call), so
    // that the next kernel's first round, whose parity is that round's,
    // may push at once, as after any kernel; the others' last rounds
    // overlap that next kernel's first pushes.
    const u32 last = seq + (u32)rounds - 1;
    signal_wait(base, rank, nranks, rounds == 1 ? 2 * seq - 1 : 2 * (last - 1), timeout_ns, status, false);
    return;
  }
  // A non-root's part of round g goes into half (g >> 1) & 1 of its slot
  // [g & 1][rank] in every other non-root's region (a slot of a non-root
  // has no root's part), so that the four buffers rotate: round g
  // rewrites what round g - 4 left there.
  auto exchanged = [&](u32 p, u32 q, u32 g, u64 lo) {
    const u64 parity = g & 1;
    return AREA(u8, p, q) + (u64)((g >> 1) & 1) * e - lo;
  };
  // The others' parts of round g, out of this rank's slots into buf.
  auto copy_out = [&](u64 r, u32 g) {
    u64 lo, hi, hlo, hhi;
    for (u32 q = 0; q < nranks; q++) {
      if (q == rank || q == root) continue;
      part(r, part_of(q), &lo, &hi, &hlo, &hhi);
      copy_piece(buf, (const u8 *)exchanged(rank, q, g, lo), lo, hi);
    }
  };
  // Every peer has started the call: the buffers that earlier kernels
  // used are free.
  if (!signal_wait(base, rank, nranks, 2 * seq - 1, timeout_ns, status)) return;
  for (u64 r = 0; r < rounds; r++) {
    const u32 g = seq + (u32)r;
    const u64 parity = g & 1;
    // The root's 2g - 1: round g is in the slots. From the call's fifth
    // round, the others' 2g - 6: they have finished round g - 3, in which
    // they copied round g - 4 out of the buffers this round rewrites.
    if (r > 0 && !signal_wait(base, rank, nranks, 2 * g - 1, timeout_ns, status, false, 1u << root)) return;
    if (r >= 4 && !signal_wait(base, rank, nranks, 2 * (g - 3), timeout_ns, status, false, others)) return;
    u64 lo, hi, hlo, hhi;
    part(r, part_of(rank), &lo, &hi, &hlo, &hhi);
    u8 *dst[8];
    u32 nd = 0;
    dst[nd++] = buf;
    for (u32 q = 0; q < nranks; q++) {
      if (q != rank && q != root) dst[nd++] = exchanged(q, rank, g, lo);
    }
    fanout(dst, nd, (const u8 *)AREA(u8, rank, root) - lo, lo, hi);
    // The host's part while the pushes travel.
    if (hb) copy_piece<true>(buf, (const u8 *)hostArea(g, hlo), hlo, hhi);
    // Round g - 1's exchange, whose flags (2g - 2) were raised while this
    // round's pushes went out; then 2g: this rank has pushed round g and
    // copied round g - 1 (the root reads nothing the others push).
    if (r > 0) {
      if (!signal_wait(base, rank, nranks, 2 * (g - 1), timeout_ns, status, false, others)) return;
      copy_out(r - 1, g - 1);
    }
    signal_wait(base, rank, nranks, 2 * g, timeout_ns, status, true, NO_PEERS);
  }
  const u32 last = seq + (u32)rounds - 1;
  if (!signal_wait(base, rank, nranks, 2 * last, timeout_ns, status, false, others)) return;
  copy_out(rounds - 1, last);
}
extern "C" __global__ void __launch_bounds__(512) braid_bcast_fused(
    u8 *buf, u64 bytes, u32 root, u32 ramp_in, u32 *seqs, u32 rounds, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes,
    u8 *host, u64 host_bytes, u64 timeout_ns, u32 *status, char *r0, char *r1, char *r2, char *r3, char *r4, char *r5,
    char *r6, char *r7) {
  char *const base[8] = {r0, r1, r2, r3, r4, r5, r6, r7};
  const u32 seq = seq_begin(seqs);
  bcast_body(buf, bytes, root, ramp_in, seq, rank, nranks, slot_bytes, area_bytes, host, host_bytes, timeout_ns, status, base);
  seq_end(seqs, seq + rounds);
}
#undef AREA

// FUSED_KERNEL defines the kernel braid_<kind>_<opname>_<tname>, whose
// parameters are those every fused kernel takes (HOST adds the multi-path
// kernels' host region), as a call of body<S, Op, Avg> with the rest,
// between seq_begin and seq_end: a body that gives up returns to here, so
// that its block still advances the counters.
#define HOST_PARAMS u8 *host, u64 host_bytes,
#define NO_HOST_PARAMS
#define FUSED_KERNEL(kind, body, opname, Op, Avg, tname, S, HOST, ...)                           \
  extern "C" __global__ void __launch_bounds__(512) braid_##kind##_##opname##_##tname(            \
      const Traits<S>::T *in, Traits<S>::T *out, u64 n, u32 *seqs, u32 rounds, u32 rank,         \
      u32 nranks, u64 slot_bytes, u64 area_bytes, HOST u64 timeout_ns, u32 *status, char *r0,    \
      char *r1, char *r2, char *r3, char *r4, char *r5, char *r6, char *r7) {                     \
    char *const base[8] = {r0, r1, r2, r3, r4, r5, r6, r7};                                      \
    const u32 seq = seq_begin(seqs);                                                              \
    body<S, Op, Avg>(__VA_ARGS__);                                                                \
    seq_end(seqs, seq + rounds);                                                                  \
  }
#define FUSED_ARGS in, out, n, seq, rank, nranks, slot_bytes

#define ONESHOT(opname, Op, Avg, tname, S)                                                                    \
  FUSED_KERNEL(oneshot, oneshot_body, opname, Op, Avg, tname, S, NO_HOST_PARAMS, FUSED_ARGS, area_bytes,      \
               timeout_ns, status, base)                                                                      \
  FUSED_KERNEL(oneshotll, oneshotll_body, opname, Op, Avg, tname, S, NO_HOST_PARAMS, FUSED_ARGS, timeout_ns,  \
               status, base)                                                                                  \
  FUSED_KERNEL(twoshotll, twoshotll_body, opname, Op, Avg, tname, S, NO_HOST_PARAMS, FUSED_ARGS, timeout_ns,  \
               status, base)                                                                                  \
  FUSED_KERNEL(twoshot, twoshot_body, opname, Op, Avg, tname, S, HOST_PARAMS, FUSED_ARGS, area_bytes, host,   \
               host_bytes, timeout_ns, status, base)                                                          \
  FUSED_KERNEL(rsfused, rsfused_body, opname, Op, Avg, tname, S, NO_HOST_PARAMS, FUSED_ARGS, area_bytes,      \
               timeout_ns, status, base)

#define FLOAT_ONESHOT(tname, S)           \
  ONESHOT(sum, OpSum, false, tname, S)    \
  ONESHOT(prod, OpProd, false, tname, S)  \
  ONESHOT(min, OpMin, false, tname, S)    \
  ONESHOT(max, OpMax, false, tname, S)    \
  ONESHOT(avg, OpAvg, true, tname, S)

#define INT_ONESHOT(tname, S)             \
  ONESHOT(sum, OpSum, false, tname, S)    \
  ONESHOT(prod, OpProd, false, tname, S)  \
  ONESHOT(min, OpMin, false, tname, S)    \
  ONESHOT(max, OpMax, false, tname, S)    \
  ONESHOT(band, OpBAnd, false, tname, S)  \
  ONESHOT(bor, OpBOr, false, tname, S)    \
  ONESHOT(bxor, OpBXor, false, tname, S)

FLOAT_ONESHOT(f32, float)
FLOAT_ONESHOT(f64, double)
FLOAT_ONESHOT(f16, F16)
FLOAT_ONESHOT(bf16, BF16)
INT_ONESHOT(i8, i8)
INT_ONESHOT(u8, u8)
INT_ONESHOT(i32, i32)
INT_ONESHOT(u32, u32)
INT_ONESHOT(i64, i64)
INT_ONESHOT(u64, u64)
