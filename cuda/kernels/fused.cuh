// fused.cuh: what the fused kernels (oneshot.cuh to bcast.cuh) share:
// the host region's areas, the device-resident sequence numbers, the
// flags and the wait on them (signal_wait), the loads and copies between
// regions, and reduce_into, which combines ranks' pieces in rank order.
// The layout they work in is layout.cuh's.

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
//
// Every fused kernel begins in seq_begin with griddepcontrol.wait, so it
// may be launched with programmatic stream serialization (package cuda's
// LaunchOverlapped): the GPU may then start its blocks while the kernel
// before it on the stream still runs, and the wait holds them until that
// kernel has ended and its writes are visible, which includes the
// counters it advanced. Launched the usual way, the wait returns at once.
// The launch_dependents after it lets the kernel after this one start
// likewise, as soon as every block of this one has begun. Both need
// sm_90 (the kernels are built for it). braid_fused_abi_overlap marks
// kernels built so: the host launches overlapped only where the module
// has it.
extern "C" __global__ void braid_fused_abi_seqs() {}
extern "C" __global__ void braid_fused_abi_overlap() {}
// braid_fused_abi_host marks kernels whose reduce-scatter (rsfused) and
// allgather take the host region (u8 *host, u64 host_bytes after
// area_bytes), as the two-shot allreduce and the broadcast do: package
// cuda's loader requires it, so that the host never passes those
// parameters to kernels that do not take them.
extern "C" __global__ void braid_fused_abi_host() {}
// braid_fused_abi_bcast2host marks kernels whose one-phase broadcast (on
// 2 GPUs) carries host_bytes a block through the host region too: the
// loader requires it, since the host sets host_bytes there now and an
// older broadcast would skip that part of every round.
extern "C" __global__ void braid_fused_abi_bcast2host() {}
// braid_fused_abi_endflag marks kernels whose seq_end stores the call's
// end into done (below) when the host asks for it by the top bit of
// rounds (END_FLAG): the host polls that word only where the module has
// it. (Kernels marked braid_fused_abi_done, before it, stored it in every
// call of one block, which cost CUDA graphs of small calls 1.5 µs a call
// on two H200s: 1.74 -> 3.29 µs an 8-byte allreduce.)
extern "C" __global__ void braid_fused_abi_endflag() {}
#define END_FLAG 0x80000000u
__device__ __forceinline__ u32 seq_begin(const u32 *seqs) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  return *(const volatile u32 *)(seqs + blockIdx.x);
}

__device__ __forceinline__ void st_release_sys(u32 *p, u32 v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// seq_end advances the counters by rounds' low 31 bits. A kernel of one
// block whose rounds carries END_FLAG (a synchronous call, which the host
// waits for) also tells the host that its result is in place: thread 0
// stores the counters' new value into done (the word after the status
// word, in mapped host memory) with release semantics at system scope,
// after the barrier, so after every store of the block. The caller polls
// that word (gpu's runPolled) instead of a word that the stream stores
// once the kernel has ended, which would cost the host a driver call and
// the GPU a memory operation behind the kernel. Calls queued back to back
// or replayed from a graph do not ask: the system-scope release is then
// pure cost.
__device__ __forceinline__ void seq_end(u32 *seqs, u32 seq, u32 rounds, u32 *done) {
  const u32 next = seq + (rounds & ~END_FLAG);
  __syncthreads();  // every thread of the block has read word blockIdx.x
  for (u32 j = blockIdx.x + threadIdx.x * gridDim.x; j < ONESHOT_BLOCKS; j += blockDim.x * gridDim.x) seqs[j] = next;
  if (done != nullptr && (rounds & END_FLAG) != 0 && gridDim.x == 1 && threadIdx.x == 0) st_release_sys(done, next);
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
