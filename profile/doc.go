// Package profile records a rank's Braid calls and writes what it saw: the
// profiler that BRAID_PROFILE=FILE (or Options.Profile) turns on, and the
// merged report of braid prof.
//
// It follows the profiler of Temuçin's thesis ("High-Performance
// Interconnect-Aware MPI Communication for Deep Learning Workloads", MASc
// thesis, Queen's University 2021, chapter 3), which wrapped every MPI call
// through PMPI and kept its figures in memory until MPI_Finalize, at about
// 1 % overhead: per call, the number of calls, the bytes, the time from
// entry to return and its share of the run (§3.3.2, §3.3.3), message sizes
// binned in (2^(n−1), 2^n] bytes (§3.3.4), and the partners of
// point-to-point calls (§3.3.5). Braid adds what the thesis could not
// measure through PMPI: the overlap of non-blocking calls (the thesis could
// not match an MPI_Isend to its MPI_Wait, §3.3.3; a Request knows its
// call) and the algorithm the planner chose.
//
// A rank's figures go into two files at Close:
//
//   - FILE.RANK, the summary (Summary, JSON): per call name (blocking and
//     non-blocking apart) the calls, failures, bytes, time and its share of
//     the rank's wall time from the end of Init to Close, the time of one
//     call (mean, min, max), the size histogram, the algorithms per size,
//     and for non-blocking calls the time blocked in Wait against the time
//     from issue to completion; the point-to-point partners by world rank.
//   - FILE.RANK.trace.json, a Chrome trace (chrome://tracing, Perfetto,
//     Holistic Trace Analysis): one complete event per call, with the
//     argument names that Kineto gives NCCL's collectives ("Collective
//     name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
//     "Seq") and "Algorithm". It keeps every timed call up to MaxEvents,
//     then an even sample.
//
// The summary's counters are exact: every call is counted. Recording costs
// two clock reads and a short critical section per call (about 0.1 µs;
// BenchmarkRecord), which is far below 1 % of a call of 1 MiB; small
// blocking calls, for which it is not, are timed by sampling once a rank
// has timed SampleAfter of them (see SampleBelow). A communicator whose
// recorder is nil pays one pointer test per call.
//
// Example: a rank records its calls, and braid prof (or Load and
// WriteText) reports them.
//
//	r := profile.New("/tmp/prof", rank, size, host)
//	t0 := r.Now()
//	// ... the call ...
//	r.Record(&profile.Call{Name: "allreduce", Group: size, DType: "float32",
//		InElems: n, OutElems: n, Bytes: 4 * n, Algo: "ring", Peer: -1, Start: t0, End: r.Now()})
//	err := r.Close() // writes /tmp/prof.RANK and /tmp/prof.RANK.trace.json
//
//	rep, err := profile.Load([]string{"/tmp/prof"}) // every /tmp/prof.RANK
//	err = rep.WriteText(os.Stdout)
package profile
