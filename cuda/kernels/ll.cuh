// ---------------------------------------------------------------------------
// Low-latency one-shot allreduce (LL lines), for small vectors whose size is
// a multiple of 8 bytes, with in and out 8-byte aligned:
//
//     braid_oneshotll_<op>_<type>(same arguments as braid_oneshot_...)
//
// The one-shot kernel pushes data, then raises a flag with a release:
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
// (data of ONESHOT_LL_SLOT / 2 bytes; layout.cuh). Only these kernels
// write there, so a line's flag words hold sequence numbers of this
// kernel's calls or the zeros the host cleared the part to, and sequence
// numbers start at 1.
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

// Reduce-scatter in low-latency lines, for small blocks (fused.Kind
// ReduceScatterLL): n is each rank's block of c = n·sizeof(T)/8 words.
// Word j of block q goes to rank q's lines (source: this rank, line j);
// rank q combines word j of every rank's block q in rank order, its own
// from in (the expression of the one-shot and of rsfused, so the same
// bits), and writes it to out. This is the two-shot's first half. Every
// rank writes into every peer's lines and waits for every peer's, so the
// one-shot's reuse argument holds. Thread j reads in only at words j of
// the blocks and writes out only at word j, so out may be block rank of in.
template <typename S, typename Op, bool Avg>
__device__ __forceinline__ void rsll_body(const typename Traits<S>::T *in, typename Traits<S>::T *out, u64 n, u32 seq,
                                          u32 rank, u32 nranks, u64 slot_bytes, u64 timeout_ns, u32 *status,
                                          char *const *base) {
  typedef typename Traits<S>::T T;
  const u64 c = n * sizeof(T) / 8;
  const u64 lines = ONESHOT_SLOTS + 2 * (u64)nranks * slot_bytes;
  const u64 parity = seq & 1;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 *src = (const u64 *)in;
  for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < c; j += stride) {
    for (u32 q = 0; q < nranks; q++) {
      if (q != rank) ll_store(ll_line(base, lines, parity, nranks, q, rank, j), src[q * c + j], seq);
    }
  }
  for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < c; j += stride) {
    Word<T> acc;
    auto line = [&](u32 r) { return ll_line(base, lines, parity, nranks, rank, r, j); };
    if (!ll_reduce<S, Op, Avg>(src[rank * c + j], rank, nranks, seq, line, timeout_ns, status, &acc)) return;
    ((u64 *)out)[j] = acc.u;
  }
}

// Allgather in low-latency lines, for small blocks (fused.Kind
// AllgatherLL): bytes is each rank's block, c = bytes/8 words. Word j of
// this rank's block goes to line j (source: this rank) of every peer and
// to its own place in out; word j of peer q's block is taken from line j
// of source q here. Every rank writes into every peer's lines and waits
// for every peer's, so the one-shot's reuse argument holds. Thread j
// reads in only at word j before writing out's word j of this rank's
// block, so in may be that block of out.
__device__ __forceinline__ void allgatherll_body(const u8 *in, u8 *out, u64 bytes, u32 seq, u32 rank, u32 nranks,
                                                 u64 slot_bytes, u64 timeout_ns, u32 *status, char *const *base) {
  const u64 c = bytes / 8;
  const u64 lines = ONESHOT_SLOTS + 2 * (u64)nranks * slot_bytes;
  const u64 parity = seq & 1;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 *src = (const u64 *)in;
  u64 *dst = (u64 *)out;
  for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < c; j += stride) {
    const u64 v = src[j];
    for (u32 p = 0; p < nranks; p++) {
      if (p != rank) ll_store(ll_line(base, lines, parity, nranks, p, rank, j), v, seq);
    }
    dst[rank * c + j] = v;
  }
  for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < c; j += stride) {
    for (u32 q = 0; q < nranks; q++) {
      if (q == rank) continue;
      u64 v;
      if (!ll_wait(ll_line(base, lines, parity, nranks, rank, q, j), seq, &v, timeout_ns, status, q)) return;
      dst[q * c + j] = v;
    }
  }
}
