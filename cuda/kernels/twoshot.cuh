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
