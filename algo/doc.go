// Package algo holds Braid's static collective algorithms, each a generator
// of schedules: given sched.Params and a rank, an Algorithm returns that
// rank's sched.Program, plain data that the executor runs, the simulator
// times and sched.Validate checks. Generators are pure: no goroutines, I/O or
// clocks.
//
// Algorithms register themselves by collective and name; Lookup finds one,
// ForCollective and All list them:
//
//	allreduce: ring, segring, recdouble, rabenseifner, reducebcast, direct, twostep, hier, hierpipe, treepack
//	reduce:    linear, binomial, knomial, treepack
//	bcast:     linear, binomial, knomial, chain, scatterallgather, topochain, hier, treepack
//	allgather: ring, segring, recdouble, bruck, direct
//	reducescatter: ring, segring, direct
//	gather, scatter: linear
//	alltoall:  pairwise
//	barrier:   dissemination
//
// The segmented rings ("segring") are the rings pipelined: every block goes
// round in messages of at most sched.Params.Segment elements (DefaultSegment
// when 0), so that reductions overlap transfers and staging stays in cache.
// The pipelined chain ("chain") does the same for a broadcast along a
// chain of ranks (ChainSegment when 0). The k-nomial trees ("knomial")
// have degree sched.Params.Radix (KnomialRadix when 0); "scatterallgather"
// is van de Geijn's broadcast for long messages, a binomial scatter and a
// ring allgather.
//
// The "direct" algorithms exchange blocks with every peer at once (one step
// of latency; over shared memory, messages above the eager limit are read
// single-copy from the peer's buffer, so the direct reduce-scatter is the
// "local rank i reduces chunk i of every peer" of Ramesh et al., HotI
// 2023). "twostep" is the shared-memory allreduce for small messages: a
// leader reduces, then sends the result to all. "hier" uses
// sched.Params.Layout: a direct reduce-scatter within each host, an
// allreduce of each chunk among its owners across hosts, a direct allgather
// within each host (broadcast: the root to each host's leader, then within
// hosts). "hierpipe" is the 3-stage hierarchical pipelined allreduce of
// Temuçin's MASc thesis (Queen's University 2021, Algorithm 5.1) over the
// groups of sched.Params.Layout: pieces of Params.Segment elements each go
// through a reduction to the group's leader, an allreduce among the leaders
// and a broadcast from the leader, so that the stages of successive pieces
// overlap; Tune picks the number of pieces (Table 5.1's role). "topochain"
// is the pipelined chain ordered so that it crosses each host and NUMA
// boundary once (Xin, Xie and Li, Computer Systems & Applications 2020,
// §4.3). "treepack" splits the data among the weighted spanning trees of
// sched.Params.Trees, a packing of the machine's links (Blink, MLSys 2020):
// it supports only params that carry trees.
//
// Every program is right for any number of ranks n ≥ 1 and any count ≥ 0,
// in place or not. Each step depends only on the steps that touched the
// memory it touches (computed, for both the in-place and the out-of-place
// placement of the buffers, by a small tracker as the program is built),
// which lets the executor overlap everything else. Reductions give every
// rank the same bits: each sum is computed by one rank and copied to the
// others, or (recursive doubling) by both partners from the same two
// operands.
//
// # Cost model
//
// Every algorithm implements Coster: its Cost is a closed form in the
// α-β-γ model of package cost, over the slowest link between two of the
// call's ranks (cost.Model.Flat), stated in a comment beside it with its
// source where a paper gives one. The rules the formulas follow:
//
//   - a message of b bytes takes α + b/β;
//   - messages between the same two ranks go one after another, α each (so
//     a pipeline of s segments pays sα);
//   - a rank's messages to or from distinct ranks that wait for nothing
//     overlap their latencies, but their bytes leave (or arrive) one after
//     another at β;
//   - a step that waits for another (a send of data just received, a
//     receive into memory still being read) starts when it ends, as the
//     executor issues steps;
//   - adding b bytes into others takes bγ on the rank that adds; copies
//     are free;
//   - nothing moves, and the cost is 0, on one rank or with no elements
//     (the barrier's empty messages excepted).
//
// Cost is the time until the last rank finishes. Parameters the params
// leave 0 count as the defaults Program uses. Algorithms with parameters
// implement Tuner as well: Tune fills Segment (segring, chain, treepack)
// or Radix (knomial) with the value that minimises Cost.
//
// Example:
//
//	a, err := algo.Lookup(sched.Allreduce, "ring")
//	if err != nil { ... }
//	p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 1 << 20}
//	if err := a.Supports(p); err != nil { ... }
//	prog := a.Program(p, rank)            // one rank's part
//	err = sched.Validate(p, algo.Programs(a, p)) // the whole schedule
//	secs := a.(algo.Coster).Cost(p, 4, cost.Default()) // float32 elements
//
// algo imports only sched and cost.
package algo
