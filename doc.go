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
package braid
