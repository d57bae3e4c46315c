// The allgather moves bytes: a round moves up to an area of every rank's
// block per block of the grid over NVLink, and with host_bytes (the
// multi-path share) up to that many bytes more of it through the host
// region. Round g: A(g) pushes the block's sub-range into every peer's slot
// [g & 1][rank], and its host part into its host area (rank) of half g & 1,
// which every peer reads, and copies both to its own place in out; the
// block raises flags to 2g and waits; it pushes A(g + 1), then C(g) copies
// every peer's sub-range out, from the slots and the peers' host areas. A
// peer's flag 2g + 2 says it has finished C(g).
__device__ __forceinline__ void allgather_body(const u8 *in, u8 *out, u64 bytes, u32 seq, u32 rank, u32 nranks,
                                               u64 slot_bytes, u64 area_bytes, u8 *host, u64 host_bytes,
                                               u64 timeout_ns, u32 *status, char *const *base) {
  const u64 area = block_area(slot_bytes, area_bytes);
  if (area == 0) return;
  const u64 hb = host ? host_bytes / 16 * 16 : 0;
  u8 *own = out + (u64)rank * bytes;
  // Rank q's host area of half g & 1, as a pointer to byte at.
  auto hostArea = [&](u32 g, u32 q, u64 at) { return host_area(host, g, q, hb) - at; };
  auto push = [&](u32 g, u64 lo, u64 hi, u64 hlo, u64 hhi) {
    const u64 parity = g & 1;
    u8 *dst[8];
    u32 nd = 0;
    for (u32 p = 0; p < nranks; p++) {
      if (p != rank) dst[nd++] = AREA(u8, p, rank) - lo;
    }
    if (own != in) dst[nd++] = own;
    fanout(dst, nd, in, lo, hi);
    if (hb) {
      u8 *hdst[2] = {hostArea(g, rank, hlo), own};
      fanout(hdst, own != in ? 2 : 1, in, hlo, hhi);
    }
  };
  auto take = [&](u32 g, u64 lo, u64 hi, u64 hlo, u64 hhi) {
    const u64 parity = g & 1;
    for (u32 q = 0; q < nranks; q++) {
      if (q == rank) continue;
      copy_piece(out + (u64)q * bytes, (const u8 *)AREA(u8, rank, q) - lo, lo, hi);
      if (hb) copy_piece<true>(out + (u64)q * bytes, (const u8 *)hostArea(g, q, hlo), hlo, hhi);
    }
  };
  pipeline(bytes, area, hb, 16, seq, base, rank, nranks, timeout_ns, status, push, take);
}
extern "C" __global__ void __launch_bounds__(512) braid_allgather_fused(
    const u8 *in, u8 *out, u64 bytes, u32 *seqs, u32 rounds, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes, u8 *host,
    u64 host_bytes, u64 timeout_ns, u32 *status, char *r0, char *r1, char *r2, char *r3, char *r4, char *r5, char *r6,
    char *r7) {
  char *const base[8] = {r0, r1, r2, r3, r4, r5, r6, r7};
  const u32 seq = seq_begin(seqs);
  allgather_body(in, out, bytes, seq, rank, nranks, slot_bytes, area_bytes, host, host_bytes, timeout_ns, status, base);
  seq_end(seqs, seq, rounds, status + 1);
}
// braid_allgather_ll: the allgather in low-latency lines (ll.cuh's
// allgatherll_body), with braid_allgather_fused's parameters.
extern "C" __global__ void __launch_bounds__(512) braid_allgather_ll(
    const u8 *in, u8 *out, u64 bytes, u32 *seqs, u32 rounds, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes, u64 timeout_ns,
    u32 *status, char *r0, char *r1, char *r2, char *r3, char *r4, char *r5, char *r6, char *r7) {
  char *const base[8] = {r0, r1, r2, r3, r4, r5, r6, r7};
  const u32 seq = seq_begin(seqs);
  allgatherll_body(in, out, bytes, seq, rank, nranks, slot_bytes, timeout_ns, status, base);
  seq_end(seqs, seq, rounds, status + 1);
}
