// Package fused is the fused kernels of Braid's GPU path, as the host sees
// them: the layout of the region every rank registers (flags, slots,
// low-latency lines), the kinds of kernel (one-shot and two-shot
// allreduce, in slots or in low-latency lines; broadcast; allgather and
// reduce-scatter, in slots or, for small blocks, in lines), how many rounds and blocks a call takes, what fits the
// host region, the kernels' argument lists, typed, and the choice of a
// call's kernel from what every rank shares (Config.Shape). Package cuda
// loads the kernels (kernels/reduce.cu, embedded as PTX and an sm_90
// cubin) and finds them by name; package gpu owns the regions, the
// sequence numbers and the streams, and launches what Shape chose
// (Launch); the planner in package braid weighs the kernel Shape returns
// against the schedules (plan.DeviceModel).
//
// Everything here but Launch is plain computation: the tests check the
// layout constants and every argument list against kernels/reduce.cu and
// the embedded PTX, the rounds against a model of the kernels' loops, and
// the choice, all without a GPU.
//
// # Example
//
// The kernel that a 64 MiB float32 sum allreduce runs on four GPUs, with
// the two-shot kernel on and the host region mapped:
//
//	cfg := fused.NewConfig(4, fused.Settings{TwoShot: true})
//	cfg.Regions = regions // every rank's region, as mapped here
//	cfg.Host = host       // the host region, as mapped here
//	p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 16 << 20}
//	k, ok := cfg.Shape(fused.TwoShot, p, dtype.Float32, dtype.Sum)
//	// ok; k.Grid() blocks, k.Rounds() rounds, k.HostBytes through host.
//	k.In, k.Out, k.Seqs, k.Rank = in, out, seqs, rank // seqs: fused.SeqWords counters
//	k.Timeout, k.Status = wait, status
//	err := fused.Launch(ctx, stream, k) // in the worker's closure
package fused
