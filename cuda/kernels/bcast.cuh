// The broadcast. Up to BCAST_DIRECT_MAX bytes (layout.cuh), and always on
// 2 GPUs, in one phase: a round moves up to an area per block; the root
// pushes it into the slot [g & 1][root] of every peer, flags go to 2g, and
// the others copy it out (a peer's 2g + 2 says it has copied round g). On
// 2 GPUs a round may also carry up to host_bytes a block through host
// memory (multi-path, below), after its area.
//
// Above, as a scatter and an allgather among the nranks - 1 ranks other
// than the root. A round moves nranks - 1 parts, each of up to half an
// area per block: the root pushes part k of round g into the first half
// of the k-th other rank's slot [g & 1][root] and raises its flag to
// 2g - 1; that rank raises 2g - 1 too and, once the root's flag has
// reached 2g - 1, copies its part into buf and pushes it into the second
// half of the slot [g & 1][rank] of every other non-root, raises 2g,
// waits for the other non-roots' 2g, and copies their parts. It need not
// wait for the others to start round g: their 2g - 2, which it waited for
// in round g - 1, says they have copied round g - 2 out of the halves it
// now rewrites. The root sends the vector once, as in a chain, and every
// part travels two hops at most. The last full round is cut into ramp + 1
// rounds of halving size (the last two alike), so that the others' last
// exchange, which no push of the root overlaps, is short.
//
// Multi-path (host_bytes > 0): each round also carries up to host_bytes
// per block after its parts, through host memory: the root stores them
// into its block's area [g & 1] of host (mapped pinned memory that every
// rank sees; an area of host_bytes a block in each half), across the bus, before it
// raises 2g - 1, and every other rank loads them from there into buf. The
// bus adds to the root's links what NVLink alone cannot carry out of it
// (Temuçin's MASc thesis, Queen's University 2021, section 4), and the
// host's copy reaches every rank at once.
//
// The root streams: it reads nothing, so it pushes round g as soon as
// every other rank has raised 2g - 4, so has finished the first phase of
// round g - 2, the last earlier reader of that parity's first halves and
// host area, and can run almost two rounds ahead of the slowest rank; for
// round seq + 1 it waits for every other rank to start the call (2g - 3),
// since another kernel's last round may have used that parity. Across
// calls: it pushes the call's first round at once
// (its parity is not that of the round before, the last one a peer may
// still read), and ends once every peer has reached its last round, so has
// finished the one before, as the other kernels do. (fused.Kernel.Rounds
// counts rounds the same way.)

// bcast_direct is the broadcast in one phase. A round moves an area a
// block over NVLink and, where HOST (on 2 GPUs, where the host sets
// host_bytes), then hb bytes a block through host memory, which the root
// stores into its block's host area of parity g & 1 before it raises 2g
// and the peer loads after it.
template <bool HOST>
__device__ __forceinline__ void bcast_direct(u8 *buf, u64 bytes, u32 root, u32 seq, u32 rank, u32 nranks,
                                             u64 slot_bytes, u64 area, u8 *host, u64 hb, u64 timeout_ns,
                                             u32 *status, char *const *base) {
  const u64 span = area * gridDim.x;
  const u64 whole = HOST ? span + hb * gridDim.x : span;
  const u64 rounds = max((bytes + whole - 1) / whole, (u64)1);
  for (u64 r = 0; r < rounds; r++) {
    const u32 g = seq + (u32)r;
    const u64 parity = g & 1;
    const u64 off = min(r * whole, bytes);
    const u64 len = min(whole, bytes - off);
    const u64 nl = HOST ? min(len, span) : len;
    u64 lo, hi, hlo = 0, hhi = 0;
    split(off, nl, 16, &lo, &hi);
    if (HOST) split(off + nl, len - nl, 16, &hlo, &hhi);
    if (rank == root) {
      u8 *dst[8];
      u32 nd = 0;
      for (u32 p = 0; p < nranks; p++) {
        if (p != root) dst[nd++] = AREA(u8, p, root) - lo;
      }
      fanout(dst, nd, (const u8 *)buf, lo, hi);
      if (HOST) copy_piece(host_area(host, g, 0, hb) - hlo, (const u8 *)buf, hlo, hhi);
    }
    if (!signal_wait(base, rank, nranks, 2 * g, timeout_ns, status)) return;
    if (rank != root) {
      copy_piece(buf, (const u8 *)AREA(u8, rank, root) - lo, lo, hi);
      if (HOST) copy_piece<true>(buf, (const u8 *)host_area(host, g, 0, hb) - hlo, hlo, hhi);
    }
  }
}

__device__ __forceinline__ void bcast_body(u8 *buf, u64 bytes, u32 root, u32 ramp_in, u32 seq, u32 rank, u32 nranks,
                                           u64 slot_bytes, u64 area_bytes, u8 *host, u64 host_bytes, u64 timeout_ns,
                                           u32 *status, char *const *base) {
  const u64 area = block_area(slot_bytes, area_bytes);
  if (nranks < 2 || area == 0) return;
  if (nranks == 2 || bytes <= BCAST_DIRECT_MAX) {
    // Two instances, so that the rounds without a host part (every call
    // on 3+ GPUs that gets here, and the small ones on 2) run the same
    // code as before the host path existed.
    if (host && host_bytes >= 16) {
      bcast_direct<true>(buf, bytes, root, seq, rank, nranks, slot_bytes, area, host, host_bytes / 16 * 16, timeout_ns,
                         status, base);
    } else {
      bcast_direct<false>(buf, bytes, root, seq, rank, nranks, slot_bytes, area, nullptr, 0, timeout_ns, status, base);
    }
    return;
  }
  const u64 e = area / 2 / 16 * 16;
  if (e == 0) return;
  const u64 m = nranks - 1;
  const u64 span = e * gridDim.x;            // of one part
  const u64 hb = host ? host_bytes / 16 * 16 : 0;
  const u64 whole = m * span + hb * gridDim.x;  // a full round
  // The rounds: full ones, then the last whole (or the vector, if smaller)
  // in ramp + 1 rounds of a half, a quarter, ... of it, the last two
  // alike, so that the others' last exchange, which nothing overlaps, is
  // short.
  const u64 ramp = min(ramp_in, 8u);
  const u64 tail = min(bytes, whole);
  const u64 head = bytes - tail;
  const u64 heads = (head + whole - 1) / whole;
  const u64 rounds = heads + ramp + 1;
  // Round r: the bytes of part k that this block moves, [*lo, *hi), and
  // those it moves through host memory, [*hlo, *hhi).
  auto part = [&](u64 r, u64 k, u64 *lo, u64 *hi, u64 *hlo, u64 *hhi) {
    u64 off, len;
    if (r < heads) {
      off = r * whole;
      len = min(whole, head - off);
    } else {
      const u64 j = r - heads;
      off = head + ((tail - (tail >> j)) & ~(u64)15);
      len = (j == ramp ? bytes : head + ((tail - (tail >> (j + 1))) & ~(u64)15)) - off;
    }
    const u64 nl = min(len, m * span);
    const u64 ps = ((nl + m - 1) / m + 15) / 16 * 16;  // a part, at most span
    u64 blo, bhi;
    split(0, ps, 16, &blo, &bhi);
    *lo = off + min(k * ps + blo, nl);
    *hi = off + min(k * ps + bhi, nl);
    split(off + nl, len - nl, 16, hlo, hhi);
  };
  auto part_of = [&](u32 p) -> u64 { return p < root ? p : p - 1; };
  // This block's host area of parity g & 1, as a pointer to byte lo.
  auto hostArea = [&](u32 g, u64 lo) { return host_area(host, g, 0, hb) - lo; };
  const u32 others = ALL_PEERS & ~(1u << root);
  if (rank == root) {
    for (u64 r = 0; r < rounds; r++) {
      const u32 g = seq + (u32)r;
      const u64 parity = g & 1;
      // Round g rewrites what the others read of round g - 2 in their
      // first phase (raising 2g - 4 after it); round seq + 1 what they
      // read of round seq - 1, in any kernel, done once they have started
      // this one (2g - 3).
      const u32 ready = r == 1 ? 2 * g - 3 : 2 * g - 4;
      if (r > 0 && !signal_wait(base, rank, nranks, ready, timeout_ns, status, false)) return;
      u64 lo, hi, hlo, hhi;
      for (u32 p = 0; p < nranks; p++) {
        if (p == root) continue;
        part(r, part_of(p), &lo, &hi, &hlo, &hhi);
        copy_piece(AREA(u8, p, root) - lo, buf, lo, hi);
      }
      if (hb) copy_piece(hostArea(g, hlo), buf, hlo, hhi);
      signal_wait(base, rank, nranks, 2 * g - 1, timeout_ns, status, true, NO_PEERS);
    }
    // It ends once every other rank has finished reading what it pushed
    // for the round before the last (2g - 2 for the last round g), or
    // what earlier kernels pushed (2seq - 1: it has started the call), so
    // that the next kernel's first round, whose parity is that round's,
    // may push at once, as after any kernel; the others' last rounds
    // overlap that next kernel's first pushes.
    const u32 last = seq + (u32)rounds - 1;
    signal_wait(base, rank, nranks, rounds == 1 ? 2 * seq - 1 : 2 * (last - 1), timeout_ns, status, false);
    return;
  }
  // A non-root's part of round g goes into half (g >> 1) & 1 of its slot
  // [g & 1][rank] in every other non-root's region (a slot of a non-root
  // has no root's part), so that the four buffers rotate: round g
  // rewrites what round g - 4 left there.
  auto exchanged = [&](u32 p, u32 q, u32 g, u64 lo) {
    const u64 parity = g & 1;
    return AREA(u8, p, q) + (u64)((g >> 1) & 1) * e - lo;
  };
  // The others' parts of round g, out of this rank's slots into buf.
  auto copy_out = [&](u64 r, u32 g) {
    u64 lo, hi, hlo, hhi;
    for (u32 q = 0; q < nranks; q++) {
      if (q == rank || q == root) continue;
      part(r, part_of(q), &lo, &hi, &hlo, &hhi);
      copy_piece(buf, (const u8 *)exchanged(rank, q, g, lo), lo, hi);
    }
  };
  // Every peer has started the call: the buffers that earlier kernels
  // used are free.
  if (!signal_wait(base, rank, nranks, 2 * seq - 1, timeout_ns, status)) return;
  for (u64 r = 0; r < rounds; r++) {
    const u32 g = seq + (u32)r;
    const u64 parity = g & 1;
    // The root's 2g - 1: round g is in the slots. From the call's fifth
    // round, the others' 2g - 6: they have finished round g - 3, in which
    // they copied round g - 4 out of the buffers this round rewrites.
    if (r > 0 && !signal_wait(base, rank, nranks, 2 * g - 1, timeout_ns, status, false, 1u << root)) return;
    if (r >= 4 && !signal_wait(base, rank, nranks, 2 * (g - 3), timeout_ns, status, false, others)) return;
    u64 lo, hi, hlo, hhi;
    part(r, part_of(rank), &lo, &hi, &hlo, &hhi);
    u8 *dst[8];
    u32 nd = 0;
    dst[nd++] = buf;
    for (u32 q = 0; q < nranks; q++) {
      if (q != rank && q != root) dst[nd++] = exchanged(q, rank, g, lo);
    }
    fanout(dst, nd, (const u8 *)AREA(u8, rank, root) - lo, lo, hi);
    // The host's part while the pushes travel.
    if (hb) copy_piece<true>(buf, (const u8 *)hostArea(g, hlo), hlo, hhi);
    // Round g - 1's exchange, whose flags (2g - 2) were raised while this
    // round's pushes went out; then 2g: this rank has pushed round g and
    // copied round g - 1 (the root reads nothing the others push).
    if (r > 0) {
      if (!signal_wait(base, rank, nranks, 2 * (g - 1), timeout_ns, status, false, others)) return;
      copy_out(r - 1, g - 1);
    }
    signal_wait(base, rank, nranks, 2 * g, timeout_ns, status, true, NO_PEERS);
  }
  const u32 last = seq + (u32)rounds - 1;
  if (!signal_wait(base, rank, nranks, 2 * last, timeout_ns, status, false, others)) return;
  copy_out(rounds - 1, last);
}
extern "C" __global__ void __launch_bounds__(512) braid_bcast_fused(
    u8 *buf, u64 bytes, u32 root, u32 ramp_in, u32 *seqs, u32 rounds, u32 rank, u32 nranks, u64 slot_bytes, u64 area_bytes,
    u8 *host, u64 host_bytes, u64 timeout_ns, u32 *status, char *r0, char *r1, char *r2, char *r3, char *r4, char *r5,
    char *r6, char *r7) {
  char *const base[8] = {r0, r1, r2, r3, r4, r5, r6, r7};
  const u32 seq = seq_begin(seqs);
  bcast_body(buf, bytes, root, ramp_in, seq, rank, nranks, slot_bytes, area_bytes, host, host_bytes, timeout_ns, status, base);
  seq_end(seqs, seq, rounds, status + 1);
}
