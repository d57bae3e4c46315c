// fused_kernels.cuh: the entry points of the typed fused kernels,
// braid_<kind>_<op>_<type> for the bodies of oneshot.cuh (oneshot),
// ll.cuh (oneshotll, twoshotll, rsll), twoshot.cuh (twoshot) and
// reducescatter.cuh (rsfused), and the resident llserve of serve.cuh, for
// every op and type. The broadcast and the allgather move bytes, so one
// kernel serves every type: the broadcast's and the allgather's two (in
// slots and in lines) are in their own files.

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
    seq_end(seqs, seq, rounds, status + 1);                                                      \
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
  FUSED_KERNEL(rsfused, rsfused_body, opname, Op, Avg, tname, S, HOST_PARAMS, FUSED_ARGS, area_bytes, host,   \
               host_bytes, timeout_ns, status, base)                                                          \
  FUSED_KERNEL(rsll, rsll_body, opname, Op, Avg, tname, S, NO_HOST_PARAMS, FUSED_ARGS, timeout_ns, status,     \
               base)                                                                                          \
  LLSERVE(opname, Op, Avg, tname, S)

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
