// Package algo holds Braid's static collective algorithms, each a generator
// of schedules: given sched.Params and a rank, an Algorithm returns that
// rank's sched.Program, plain data that the executor runs, the simulator
// times and sched.Validate checks. Generators are pure: no goroutines, I/O or
// clocks.
//
// Algorithms register themselves by collective and name; Lookup finds one,
// ForCollective and All list them:
//
//	allreduce: ring, segring, recdouble, rabenseifner, reducebcast
//	reduce:    linear, binomial
//	bcast:     linear, binomial
//	allgather: ring, segring, recdouble, bruck
//	reducescatter: ring, segring
//	gather, scatter: linear
//	alltoall:  pairwise
//	barrier:   dissemination
//
// The segmented rings ("segring") are the rings pipelined: every block goes
// round in messages of at most sched.Params.Segment elements (DefaultSegment
// when 0), so that reductions overlap transfers and staging stays in cache.
//
// Every program is right for any number of ranks n ≥ 1 and any count ≥ 0,
// in place or not. Each step depends only on the steps that touched the
// memory it touches (computed, for both the in-place and the out-of-place
// placement of the buffers, by a small tracker as the program is built),
// which lets the executor overlap everything else. Reductions give every
// rank the same bits: each sum is computed by one rank and copied to the
// others, or (recursive doubling) by both partners from the same two
// operands. Each algorithm's α-β-γ cost is in a comment beside it.
//
// Example:
//
//	a, err := algo.Lookup(sched.Allreduce, "ring")
//	if err != nil { ... }
//	p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 1 << 20}
//	if err := a.Supports(p); err != nil { ... }
//	prog := a.Program(p, rank)            // one rank's part
//	err = sched.Validate(p, algo.Programs(a, p)) // the whole schedule
//
// algo imports only sched (and, later, cost).
package algo
