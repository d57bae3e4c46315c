// ---------------------------------------------------------------------------
// The resident low-latency allreduce: a kernel of one block that stays on
// the GPU between calls and runs each small allreduce that the host hands
// it, so that a synchronous call costs no kernel launch:
//
//     braid_llserve_<op>_<type>(u32 *bell, u32 served, u32 epoch, u64 idle_ns,
//                               u32 *seqs, u32 rank, u32 nranks, u64 slot_bytes,
//                               u32 *status, char *r0, ..., char *r7)
//
// bell is mapped pinned host memory, BELL_WORDS words (layout.cuh), a
// 64-byte line each for:
//
//     [BELL_ARGS]   the host's: the call's in, out, n and timeout_ns, each in
//                   a 16-byte record { low word, ticket, high word, ticket }
//     [BELL_DONE]   the kernel's: the ticket of the last call it ran
//     [BELL_EXITED] the kernel's: the epoch of the kernel that ended
//     [BELL_QUIT]   the host's: an epoch to end
//
// A call's ticket is the last one's plus 1 (served + 1 for the first one this
// kernel runs). The host writes each record as two 8-byte stores, each with
// the ticket beside its half. Lanes 0 to 3 of the first warp poll one record
// each, with 16-byte loads over the bus, until every record carries the next
// ticket in both of its words: then they hold the whole call, read in one
// trip (a half of a record reaches the GPU whole, as the low-latency lines'
// do), where a ticket polled alone and then the arguments would take two. An
// acquire fence at system scope then orders the call's reads of its input
// after the host's, and so after the work the host saw end before it rang.
// The block runs the call as braid_oneshotll does (oneshotll_body, with its
// sequence counters, lines, parity and rank order: so the ranks need not
// agree on which calls run here and which as launched kernels, and every
// rank gets the same bits), then thread 0 stores the ticket into BELL_DONE
// with a system-scope release, after a barrier that orders every thread's
// stores before it. served is the last ticket run before this kernel
// started.
//
// The kernel ends, storing its epoch into BELL_EXITED, when the host stores
// that epoch into BELL_QUIT, or when no call came for idle_ns (0: never); it
// looks at both every 64 polls. A call in which a peer did not arrive
// (*status set) leaves the lines out of step and the communicator failed:
// the host rings no more, and the kernel ends on either. The host starts a
// kernel again where it finds that one ended.
//
// Only calls the host runs synchronously come here, after the work queued
// on the communicator's stream before them has run: the counters in seqs
// then hold the call's number, as for a launched kernel.
// ---------------------------------------------------------------------------

// fence_acquire_sys orders this thread's later reads after what it read
// before (at system scope: the host's writes that those reads saw).
__device__ __forceinline__ void fence_acquire_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

template <typename S, typename Op, bool Avg>
__device__ __forceinline__ void llserve_body(u32 *bell, u32 served, u32 epoch, u64 idle_ns, u32 *seqs, u32 rank,
                                             u32 nranks, u64 slot_bytes, u32 *status, char *const *base) {
  typedef typename Traits<S>::T T;
  __shared__ u64 args[4];
  __shared__ u32 go;
  u64 since = globaltimer();
  for (;;) {
    if (threadIdx.x < 32) {
      const u32 lane = threadIdx.x, want = served + 1;
      const uint4 *rec = (const uint4 *)(bell + BELL_ARGS) + (lane & 3);
      u32 a = 0, b = 0, c = 0, d = 0;
      bool call = false;
      for (u32 spin = 1;; spin++) {
        if (lane < 4) {
          asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                       : "l"(rec)
                       : "memory");
        }
        if (__all_sync(0xffffffffu, lane >= 4 || (b == want && d == want))) {
          call = true;
          break;
        }
        if ((spin & 63) == 0) {
          bool end = false;
          if (lane == 0)
            end = *(const volatile u32 *)(bell + BELL_QUIT) == epoch ||
                  (idle_ns != 0 && globaltimer() - since > idle_ns);
          if (__shfl_sync(0xffffffffu, end, 0)) break;
        }
      }
      if (call && lane < 4) args[lane] = (u64)a | ((u64)c << 32);
      if (lane == 0) {
        go = call;
        if (call) fence_acquire_sys();
      }
    }
    __syncthreads();
    if (!go) break;
    const u32 t = served + 1;
    const u32 seq = *(const volatile u32 *)seqs;
    oneshotll_body<S, Op, Avg>((const T *)args[0], (T *)args[1], args[2], seq, rank, nranks, slot_bytes, args[3],
                               status, base);
    seq_end(seqs, seq, 1, nullptr);  // a barrier, then every counter (one block)
    __syncthreads();
    if (threadIdx.x == 0) st_release_sys(bell + BELL_DONE, t);
    served = t;
    since = globaltimer();
  }
  if (threadIdx.x == 0) st_release_sys(bell + BELL_EXITED, epoch);
}

// LLSERVE defines braid_llserve_<opname>_<tname>.
#define LLSERVE(opname, Op, Avg, tname, S)                                                                          \
  extern "C" __global__ void __launch_bounds__(512) braid_llserve_##opname##_##tname(                               \
      u32 *bell, u32 served, u32 epoch, u64 idle_ns, u32 *seqs, u32 rank, u32 nranks, u64 slot_bytes, u32 *status, \
      char *r0, char *r1, char *r2, char *r3, char *r4, char *r5, char *r6, char *r7) {                              \
    char *const base[8] = {r0, r1, r2, r3, r4, r5, r6, r7};                                                         \
    llserve_body<S, Op, Avg>(bell, served, epoch, idle_ns, seqs, rank, nranks, slot_bytes, status, base);           \
  }
