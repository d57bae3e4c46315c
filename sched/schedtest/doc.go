// Package schedtest runs schedules in memory, as a reference for what they
// compute, and checks them against the collectives' definitions.
//
// Run executes every rank's program of a schedule on float64 data with the
// sum operator, matching sends to receives and honouring dependencies, in a
// pseudo-random interleaving; it aliases In and Out as an in-place call does
// when asked. Expect computes what the collective must return. Check puts the
// two together with sched.Validate and is what every algorithm's test calls.
//
// Example, checking a hand-written two-rank allreduce:
//
//	p := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: n}
//	progs := make([]sched.Program, 2)
//	for r := range progs {
//		b := sched.NewBuilder(r)
//		all := func(buf sched.Buf) sched.Chunk { return sched.Chunk{Buf: buf, Len: n} }
//		s := b.Send(1-r, 0, all(sched.In))
//		v := b.Recv(1-r, 0, all(sched.Tmp))
//		c := b.Copy(all(sched.In), all(sched.Out))
//		b.Reduce(all(sched.Tmp), all(sched.Out), s, v, c)
//		b.P.TmpLen, b.P.Final = n, []sched.Chunk{all(sched.Out)}
//		progs[r] = b.P
//	}
//	err := schedtest.Check(p, progs)
package schedtest
