// Package braid is a collective communication library for distributed deep
// learning: allreduce, broadcast, reduce, allgather, reduce-scatter, gather,
// scatter, alltoall, barrier and point-to-point, between goroutines,
// processes and hosts.
//
// A process joins a job with Init, which reads its place from the launcher
// (braid run, Open MPI, PMI, Slurm or torchrun), and calls collectives on the
// returned Comm with Go slices:
//
//	c, err := braid.Init(ctx, nil)
//	if err != nil { ... }
//	defer c.Close()
//	grad := make([]float32, 1<<20)
//	err = c.Allreduce(ctx, grad, grad, braid.Sum) // in place: the same slice twice
//
// Every call returns a *braid.Error naming the rank, the call and the kind of
// failure; no call hangs on a dead peer or panics across the API. The
// algorithm of each call is chosen by the planner (package plan) unless
// BRAID_ALGO or Options.Algo forces one; BRAID_DEBUG=info logs the choices.
//
// # Disagreeing ranks
//
// Every rank must make the same calls on a communicator, in the same order,
// with the same collective, count, dtype, op and root (and the same
// BRAID_ALGO, so that they run the same algorithm with the same segment).
// Braid reports a disagreement as Mismatch; what each mode of Options.Check
// (BRAID_CHECK) guarantees:
//
// Default mode. Every message of a call carries a 32-bit signature that
// chains the call's arguments (collective, count, dtype, op, root,
// algorithm, segment, radix) with those of every earlier call on the
// communicator, and every rank compares it with its own on every message
// it receives: matched or not, for a call running here, one not begun yet,
// or one of the last 64 that ended here. A call that has waited 250 ms (or
// a quarter of the timeout, if shorter) also sends its signature to each
// rank it waits for, so that ranks that wait for each other with no message
// in flight (every rank naming itself the root of a gather) are compared
// within about that time instead of timing out. Then:
//
//   - No call returns success with a result that depends on a rank that
//     disagreed with this one, on this call or an earlier one: every rank
//     whose data reach the result checked the signature of the rank it
//     received them from.
//   - Every rank gets Mismatch no later than its next collective call on the
//     communicator (Close of a communicator made by Init counts: it is a
//     barrier). A call whose result depends on every rank (allreduce,
//     allgather, reduce-scatter, alltoall, barrier, and reduce and gather
//     on the root) fails itself. The other calls (broadcast and scatter,
//     reduce and gather on the other ranks, any call of no elements) may
//     end well, with a correct result, before the disagreement is known;
//     they are confirmed one call late: in a call that ran as a schedule,
//     the ranks send the root (rank 0 if none) a message of no bytes that
//     carries the call's signature, and the root, once it has every
//     rank's (or at once, for a reduce or gather, whose result checked
//     them all), sends one back to each; in a call that ran through the
//     host's shared area, every rank reads every other's running hash of
//     the area's signatures. A rank's next call, after its own work,
//     waits for that before it returns success, so the rank that
//     disagreed, which sends no good confirmation, makes it fail with
//     Mismatch instead. The confirmation is not on the first call's path
//     and is mostly in flight during the next (docs/RELIABILITY.md gives
//     its cost).
//   - The rank that finds a disagreement aborts the job, so in practice
//     the others learn of it within microseconds, in whatever call they
//     make.
//   - A non-blocking call (IBcast, ...) waits for the confirmations of the
//     calls that ended on this rank before it did; calls that overlap
//     may learn of a disagreement one call later. Calls on GPU buffers
//     are not part of this check.
//
// Signatures are 32-bit hashes: two different calls look alike with
// probability 2^-32. The signature also covers the spanning trees of a
// tree-packing call (ranks that packed other trees, from another
// topology or other devices, disagree). The cost is a hash and an atomic
// update per call (about 25 ns) and nothing per message, plus the
// confirmation of the calls that need one.
//
// Strict mode (BRAID_CHECK=strict, Options.Check = CheckStrict), like
// PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL: before any of a call's data
// moves, the ranks allgather a 48-byte description of their calls with a
// fixed algorithm and compare them; a disagreement makes the call itself
// fail with Mismatch on every rank, and the error names each rank's call,
// e.g. "ranks 0, 2: bcast root 0 of 64 × float32 via binomial; rank 1:
// reduce root 0 of 64 × float32 sum via binomial". It costs one more
// exchange per call: an 8-byte allreduce on 2 local ranks took 1.5 µs
// instead of 0.57, on 4 ranks (on 2 cores) 11.4 µs instead of 6.4 (braid
// bench; README "Failures"). Ranks whose modes differ get Mismatch.
//
// # Timeouts
//
// A call that makes no progress within the timeout (BRAID_TIMEOUT, or its
// context's deadline) fails with Timeout naming the rank and the step it
// waited for, and the other ranks' calls fail with a Timeout that names
// the same rank. When the rank waited for was itself waiting (one rank of a
// ring hangs, and the others wait for each other), the error names the rank
// at the end of the chain: the one that does not answer. BRAID_TIMEOUT
// applies to calls whose context has no deadline; the error says which of
// the two limits passed.
package braid
