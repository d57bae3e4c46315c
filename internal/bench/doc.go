// Package bench is the engine of `braid bench`: it times one collective over
// a range of sizes on a communicator, checks results when asked, and prints
// an OSU-like table (or CSV or JSON) from rank 0.
//
// Sizes follow nccl-tests: the size of a row is the whole vector (the
// allgather output, the reducescatter input); each rank contributes or
// receives size/n. Latency is each rank's mean over the timed loop; the
// table shows the mean over ranks (avg) and the extremes (min, max);
// bandwidth is computed from the slowest rank (max), as the anchors do, and
// busbw is algbw times nccl-tests' factor (BusFactor).
//
// Several algorithms can be timed side by side at each size (Config.Algos,
// braid bench --all-algos): the communicator is created with a Forcer as
// its planner, each algorithm gets a communicator of its own split from it,
// and the run named Auto keeps the planner's choice. With Config.Imbalance
// (MIF), every size is timed again with random compute before each call, as
// the micro-benchmarks of "Efficient Process Arrival Pattern Aware
// Collective Communication for Deep Learning" (Alizadeh et al., EuroMPI/USA
// 2022, §6.1) do; see Run.
//
// Example:
//
//	rows, err := bench.Run(ctx, comm, bench.Config{Coll: sched.Allreduce, MinSize: 8, MaxSize: 1 << 20, Check: true})
//
// Side by side:
//
//	f, _ := bench.NewForcer("")
//	comm, _ := braid.Init(ctx, &braid.Options{Planner: f})
//	rows, err := bench.Run(ctx, comm, bench.Config{Coll: sched.Bcast, MaxSize: 16 << 20,
//		Algos: []string{"binomial", "chain:seg=256K", bench.Auto}, Forcer: f})
package bench
