package exec_test

import (
	"testing"

	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/par"
	"github.com/braid-ccl/braid/sched"
)

// TestLargeStepsThreads: on 2 ranks, each rank copies its input to its
// output, receive-and-reduces the peer's input into its output, receives
// it again into Tmp and reduces that into the output with a Reduce step,
// so out = in0 + 2·in1 on rank 0, with every copy and reduction of 1 KiB
// or more split across 4 threads (package par); the count is odd.
func TestLargeStepsThreads(t *testing.T) {
	defer par.SetThreads(4, 1024)()
	const m = 100_003
	progs := make([]sched.Program, 2)
	for r := range 2 {
		b := sched.NewBuilder(r)
		in, out, tmp := sched.Chunk{Buf: sched.In, Len: m}, sched.Chunk{Buf: sched.Out, Len: m}, sched.Chunk{Buf: sched.Tmp, Len: m}
		cp := b.Copy(in, out)
		b.Send(1-r, 0, in)
		b.Send(1-r, 1, in)
		rr := b.RecvReduce(1-r, 0, out, cp)
		rv := b.Recv(1-r, 1, tmp)
		b.Reduce(tmp, out, rr, rv)
		b.P.TmpLen = m
		b.P.Final = []sched.Chunk{out}
		progs[r] = b.P
	}
	vals := func(r int) []float32 {
		v := make([]float32, m)
		for i := range v {
			v[i] = float32(r*1000 + i%991)
		}
		return v
	}
	bufs := make([]exec.Buffers, 2)
	for r := range 2 {
		bufs[r] = exec.Buffers{In: f32(vals(r)...), Out: make([]byte, 4*m), DType: dtype.Float32, Op: dtype.Sum, NRanks: 2}
	}
	before := par.Splits()
	for r, err := range runAll(t, progs, bufs, nil) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range 2 {
		mine, peer := vals(r), vals(1-r)
		for i, x := range floats(bufs[r].Out) {
			if want := mine[i] + 2*peer[i]; x != want {
				t.Fatalf("rank %d: out[%d] = %v, want %v", r, i, x, want)
			}
		}
	}
	if par.Splits() == before {
		t.Fatal("no copy or reduction was split")
	}
}
