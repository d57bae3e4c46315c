// Package sched is Braid's schedule IR: what one rank does during one
// collective, as plain data.
//
// A static algorithm (package algo) is a generator: given Params and a rank it
// returns that rank's Program, an ordered list of Steps (Send, Recv,
// RecvReduce, Copy, Reduce) over chunks of the rank's buffers In, Out and Tmp,
// with explicit dependencies. The executor (package exec) runs a program over
// transports; the simulator runs all ranks' programs over a topology model;
// Validate checks them before either does. Offsets and lengths are in
// elements, so one schedule serves every dtype of the same count.
//
// In-place calls alias In and Out as follows, and every program must give the
// right result both with and without the aliasing:
//
//	Allreduce, Reduce (root), Bcast, Alltoall: In is Out.
//	Allgather, Gather (root):  In is Out[rank*Count : (rank+1)*Count].
//	ReduceScatter, Scatter (root): Out is In[rank*Count : (rank+1)*Count].
//
// sched imports nothing else of Braid.
//
// Example, a two-rank exchange written by hand:
//
//	b := sched.NewBuilder(0)
//	c := b.Copy(sched.Chunk{Buf: sched.In, Len: n}, sched.Chunk{Buf: sched.Out, Len: n})
//	b.Send(1, 0, sched.Chunk{Buf: sched.Out, Len: n}, c)
//	b.RecvReduce(1, 1, sched.Chunk{Buf: sched.Out, Len: n}, c)
//	prog := b.P
package sched
