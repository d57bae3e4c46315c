package schedtest_test

import (
	"fmt"

	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sched/schedtest"
)

// ExampleCheck checks a hand-written two-rank allreduce, then a broken copy
// of it.
func ExampleCheck() {
	const n = 6
	p := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: n}
	all := func(buf sched.Buf) sched.Chunk { return sched.Chunk{Buf: buf, Len: n} }
	progs := make([]sched.Program, 2)
	for r := range progs {
		b := sched.NewBuilder(r)
		s := b.Send(1-r, 0, all(sched.In))
		v := b.Recv(1-r, 0, all(sched.Tmp))
		c := b.Copy(all(sched.In), all(sched.Out))
		b.Reduce(all(sched.Tmp), all(sched.Out), s, v, c)
		b.P.TmpLen, b.P.Final = n, []sched.Chunk{all(sched.Out)}
		progs[r] = b.P
	}
	fmt.Println(schedtest.Check(p, progs))

	progs[1].Steps[3].Deps = []int32{1, 2} // forget that the send reads In
	fmt.Println(schedtest.Check(p, progs))
	// Output:
	// <nil>
	// sched: rank 1 step 3 (reduce tmp[0:6] -> out[0:6] after [1 2]): writes out[0:6] that step 0 (send in[0:6] -> r0 tag 0) reads, without depending on it when the call is in place
}
