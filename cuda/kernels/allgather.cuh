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
// braid_allgather_ll: the allgather in low-latency lines (ll.cuh's
// allgatherll_body), with braid_allgather_fused's parameters.
extern "C" __global__ void __launch_bounds__(512) braid_allgather_ll(
    const u8 *in, u8 *out, u64 bytes, u32 *seqs, u32 rounds, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes, u64 timeout_ns,
    u32 *status, char *r0, char *r1, char *r2, char *r3, char *r4, char *r5, char *r6, char *r7) {
  char *const base[8] = {r0, r1, r2, r3, r4, r5, r6, r7};
  const u32 seq = seq_begin(seqs);
  allgatherll_body(in, out, bytes, seq, rank, nranks, slot_bytes, timeout_ns, status, base);
  seq_end(seqs, seq + rounds);
}
