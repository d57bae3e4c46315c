// Package bench is the engine of `braid bench`: it times one collective over
// a range of sizes on a communicator, checks results when asked, and prints
// an OSU-like table (or CSV or JSON) from rank 0.
//
// Sizes follow nccl-tests: the size of a row is the whole vector (the
// allgather output, the reducescatter input); each rank contributes or
// receives size/n. Latency is each rank's mean over the timed loop; the
// table shows the mean over ranks (avg) and the extremes (min, max);
// bandwidth is computed from the slowest rank (max), as the anchors do.
//
// Example:
//
//	rows, err := bench.Run(ctx, comm, bench.Config{Coll: sched.Allreduce, MinSize: 8, MaxSize: 1 << 20, Check: true})
package bench
