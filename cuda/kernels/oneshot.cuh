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
// rounds (1 here) when it ends (seq_begin, seq_end in fused.cuh), so that
// a launch captured in a CUDA graph runs a new number at every replay.
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
