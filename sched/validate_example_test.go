package sched_test

import (
	"fmt"

	"github.com/braid-ccl/braid/sched"
)

// ExampleValidate shows the error for a schedule in which both ranks wait to
// receive before they send.
func ExampleValidate() {
	p := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 8}
	progs := make([]sched.Program, 2)
	for r := range progs {
		b := sched.NewBuilder(r)
		c := b.Copy(sched.Chunk{Buf: sched.In, Len: 8}, sched.Chunk{Buf: sched.Out, Len: 8})
		v := b.RecvReduce(1-r, 0, sched.Chunk{Buf: sched.Out, Len: 8}, c)
		b.Send(1-r, 0, sched.Chunk{Buf: sched.In, Len: 8}, v)
		b.P.Final = []sched.Chunk{{Buf: sched.Out, Len: 8}}
		progs[r] = b.P
	}
	fmt.Println(sched.Validate(p, progs))
	// Output:
	// sched: deadlock (2 of 2 ranks stuck): rank 0 step 2 (send in[0:8] -> r1 tag 0 after [1]) waits for its step 1 (recvreduce r1 tag 0 -> out[0:8] after [0]), which waits for rank 1 step 2 (send in[0:8] -> r0 tag 0 after [1]) to start; rank 1 step 2 (send in[0:8] -> r0 tag 0 after [1]) waits for its step 1 (recvreduce r0 tag 0 -> out[0:8] after [0]), which waits for rank 0 step 2 (send in[0:8] -> r1 tag 0 after [1]) to start
}
