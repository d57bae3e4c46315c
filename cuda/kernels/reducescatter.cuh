// The reduce-scatter: rank p's block of count elements is the combination,
// in rank order, of block p of every rank's in. A round moves up to an area
// of every block per block of the grid over NVLink, and with host_bytes
// (the multi-path share) up to that many bytes more of it through the host
// region. Round g: A(g) pushes the block's sub-range of block p into rank
// p's slot [g & 1][rank], and its host part into its host area (p, rank)
// of half g & 1; the block raises flags to 2g and waits for every peer's;
// it pushes A(g + 1), then B(g) combines its own sub-range from the slots
// and the peers' host areas (rank, q). A peer's flag 2g + 2 says it has
// finished B(g), the last read of parity g & 1 before A(g + 2).
template <typename S, typename Op, bool Avg>
__device__ __forceinline__ void rsfused_body(const typename Traits<S>::T *in, typename Traits<S>::T *out, u64 count,
                                             u32 seq, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes, u8 *host,
                                             u64 host_bytes, u64 timeout_ns, u32 *status, char *const *base) {
  typedef typename Traits<S>::T T;
  const int W = 16 / sizeof(T);
  const u64 area = block_area(slot_bytes, area_bytes);
  const u64 e = area / sizeof(T) / W * W;
  if (e == 0) return;
  const u64 eh = host ? host_bytes / sizeof(T) / W * W : 0;
  // Host area (p, q) of half g & 1: rank q's part of block p, as a
  // pointer to element at.
  auto hostA = [&](u32 g, u32 p, u32 q, u64 at) {
    return (T *)host_area(host, g, (u64)p * nranks + q, eh * sizeof(T)) - at;
  };
  auto push = [&](u32 g, u64 lo, u64 hi, u64 hlo, u64 hhi) {
    const u64 parity = g & 1;
    for (u32 p = 0; p < nranks; p++) {
      if (p == rank) continue;
      copy_piece(AREA(T, p, rank) - lo, in + (u64)p * count, lo, hi);
      if (eh) copy_piece(hostA(g, p, rank, hlo), in + (u64)p * count, hlo, hhi);
    }
  };
  auto take = [&](u32 g, u64 lo, u64 hi, u64 hlo, u64 hhi) {
    const u64 parity = g & 1;
    const T *src[8];
    for (u32 q = 0; q < nranks; q++) {
      src[q] = q == rank ? in + (u64)rank * count : (const T *)AREA(T, rank, q) - lo;
    }
    reduce_into<S, Op, Avg>(out, (T *const *)0, 0, src, nranks, lo, hi);
    if (eh) {
      for (u32 q = 0; q < nranks; q++) src[q] = q == rank ? in + (u64)rank * count : (const T *)hostA(g, rank, q, hlo);
      reduce_into<S, Op, Avg, true>(out, (T *const *)0, 0, src, nranks, hlo, hhi);
    }
  };
  pipeline(count, e, eh, W, seq, base, rank, nranks, timeout_ns, status, push, take);
}
