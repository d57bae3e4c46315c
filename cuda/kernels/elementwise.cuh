// elementwise.cuh: the elementwise reductions, which the host-driven
// schedules (package gpu) launch on one GPU's buffers. Every kernel of the
// reduce family has the same parameters:
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
// Speed: when every pointer is 16-byte aligned, each thread moves 16 bytes per
// load and store (uint4) and keeps four such loads of each input in flight,
// in a grid-stride loop, so that any grid size covers any n; the last few
// elements, and all elements of misaligned buffers, go one at a time.

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
