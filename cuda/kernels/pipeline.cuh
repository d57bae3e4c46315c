// ---------------------------------------------------------------------------
// Pipelined fused kernels: the two-shot allreduce, reduce-scatter, allgather
// and broadcast, for any size, through slots of a fixed size.
//
// Each block owns one area of every slot: area b is bytes
// [b * area, (b + 1) * area) with area = (slot_bytes / gridDim.x) rounded
// down to 16 bytes. Block b only writes area b of a peer's slot and only
// reads area b of its own, so a block talks to the same block of every peer
// and to no other. The vector is moved in rounds; a round moves at most an
// area per block and peer. Round r of a call that starts at sequence number
// seq is round g = seq + r: it uses slots of parity g & 1 and raises flags
// to 2g - 1 (first phase, two-phase kernels) and 2g. The kernel advances
// its counters (seq_end) by the call's number of rounds, which the host
// passes (fused.Kernel.Rounds counts them as the loops of the pipelined
// kernels do, and TestRounds holds the two together), so rounds, like
// calls, never share a number.
//
// Reuse: block b writes area b of parity g & 1 at a peer (round g) only
// after it has seen a flag that the peer's block b raised once it had
// finished reading round g - 2 there, the last earlier round of that
// parity; each kernel's file says which flag. A block pushes the next
// round before it reads the current one where that argument allows, so
// that its stores are in flight while it waits and combines. Across calls
// the argument of the one-shot kernel holds: every block of a kernel takes
// part in every round, so when a rank's kernel ends, every peer's blocks
// have reached its last round and finished reading the one before.
//
// Every rank of a call launches the same grid with the same slot_bytes.
// ---------------------------------------------------------------------------

// block_area is the bytes of a slot that belong to this block: the call's
// area_bytes, at most an even share of the slot, in whole 16 bytes.
__device__ __forceinline__ u64 block_area(u64 slot_bytes, u64 area_bytes) {
  const u64 share = slot_bytes / gridDim.x;
  return (area_bytes == 0 ? share : min(area_bytes, share)) & ~(u64)15;
}

// split returns this block's part [*lo, *hi) of len items from off,
// cut in whole multiples of w.
__device__ __forceinline__ void split(u64 off, u64 len, u64 w, u64 *lo, u64 *hi) {
  const u64 per = ((len + gridDim.x - 1) / gridDim.x + w - 1) / w * w;
  *lo = off + min((u64)blockIdx.x * per, len);
  *hi = off + min((u64)blockIdx.x * per + per, len);
}

// pipeline runs the one-phase rounds of a pipelined kernel over items
// [0, total), cut per block in multiples of w: a round moves nv items a
// block over NVLink and, after them, hv through host memory (the
// multi-path share; 0: none). It pushes round 0, then for each round g
// raises flags to 2g and waits for the peers', pushes round g + 1 and
// takes round g. push(g, lo, hi, hlo, hhi) writes the block's parts of
// round g, [lo, hi) into the peers' slots and [hlo, hhi) into the host
// region; take(g, lo, hi, hlo, hhi) reads them from this rank's slots and
// the peers' host areas. A peer's flag 2g + 2 then says that it has taken
// round g, the last read of parity g & 1 (slots and host areas alike)
// before round g + 2's push.
template <typename Push, typename Take>
__device__ __forceinline__ void pipeline(u64 total, u64 nv, u64 hv, u64 w, u32 seq, char *const *base, u32 rank,
                                         u32 nranks, u64 timeout_ns, u32 *status, Push push, Take take) {
  const u64 span = (nv + hv) * gridDim.x;
  const u64 rounds = max((total + span - 1) / span, (u64)1);
  // This block's parts of round r: [*lo, *hi) over NVLink, [*hlo, *hhi)
  // through host.
  auto range = [&](u64 r, u64 *lo, u64 *hi, u64 *hlo, u64 *hhi) {
    const u64 off = min(r * span, total);
    const u64 nl = min(nv * gridDim.x, total - off);
    split(off, nl, w, lo, hi);
    split(off + nl, min(hv * gridDim.x, total - off - nl), w, hlo, hhi);
  };
  u64 lo, hi, hlo, hhi;
  range(0, &lo, &hi, &hlo, &hhi);
  push(seq, lo, hi, hlo, hhi);
  for (u64 r = 0; r < rounds; r++) {
    const u32 g = seq + (u32)r;
    if (!signal_wait(base, rank, nranks, 2 * g, timeout_ns, status)) return;
    u64 nlo = 0, nhi = 0, nhlo = 0, nhhi = 0;
    if (r + 1 < rounds) {
      range(r + 1, &nlo, &nhi, &nhlo, &nhhi);
      push(g + 1, nlo, nhi, nhlo, nhhi);
    }
    take(g, lo, hi, hlo, hhi);
    lo = nlo;
    hi = nhi;
    hlo = nhlo;
    hhi = nhhi;
  }
}

// AREA is block b's area of slot [parity][q] in rank p's region, as T *.
// reduce.cu undefines it after the last pipelined kernel.
#define AREA(T, p, q) \
  ((T *)(base[p] + ONESHOT_SLOTS + (parity * nranks + (q)) * slot_bytes + (u64)blockIdx.x * area))
