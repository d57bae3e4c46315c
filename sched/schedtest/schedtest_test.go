package schedtest_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sched/schedtest"
)

func all(b sched.Buf, n int) sched.Chunk { return sched.Chunk{Buf: b, Len: n} }

// exchange is a correct allreduce for two ranks.
func exchange(n int) (sched.Params, []sched.Program) {
	p := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: n}
	progs := make([]sched.Program, 2)
	for r := range progs {
		b := sched.NewBuilder(r)
		s := b.Send(1-r, 0, all(sched.In, n))
		v := b.Recv(1-r, 0, all(sched.Tmp, n))
		c := b.Copy(all(sched.In, n), all(sched.Out, n))
		b.Reduce(all(sched.Tmp, n), all(sched.Out, n), s, v, c)
		b.P.TmpLen, b.P.Final = n, []sched.Chunk{all(sched.Out, n)}
		progs[r] = b.P
	}
	return p, progs
}

func TestExpect(t *testing.T) {
	f := func(v ...float64) []float64 { return v }
	for _, tc := range []struct {
		c    sched.Collective
		in   [][]float64
		want [][]float64
	}{
		{sched.Allreduce, [][]float64{f(1, 2), f(10, 20), f(100, 200)}, [][]float64{f(111, 222), f(111, 222), f(111, 222)}},
		{sched.Reduce, [][]float64{f(1, 2), f(10, 20), f(100, 200)}, [][]float64{f(), f(111, 222), f()}},
		{sched.Bcast, [][]float64{f(), f(5, 6), f()}, [][]float64{f(5, 6), f(5, 6), f(5, 6)}},
		{sched.Allgather, [][]float64{f(1, 2), f(3, 4), f(5, 6)}, [][]float64{f(1, 2, 3, 4, 5, 6), f(1, 2, 3, 4, 5, 6), f(1, 2, 3, 4, 5, 6)}},
		{sched.ReduceScatter, [][]float64{f(1, 2, 3, 4, 5, 6), f(10, 20, 30, 40, 50, 60), f(0, 0, 0, 0, 0, 100)},
			[][]float64{f(11, 22), f(33, 44), f(55, 166)}},
		{sched.Gather, [][]float64{f(1, 2), f(3, 4), f(5, 6)}, [][]float64{f(), f(1, 2, 3, 4, 5, 6), f()}},
		{sched.Scatter, [][]float64{f(), f(1, 2, 3, 4, 5, 6), f()}, [][]float64{f(1, 2), f(3, 4), f(5, 6)}},
		{sched.Alltoall, [][]float64{f(1, 2, 3, 4, 5, 6), f(7, 8, 9, 10, 11, 12), f(13, 14, 15, 16, 17, 18)},
			[][]float64{f(1, 2, 7, 8, 13, 14), f(3, 4, 9, 10, 15, 16), f(5, 6, 11, 12, 17, 18)}},
	} {
		p := sched.Params{Coll: tc.c, NRanks: 3, Count: 2, Root: 1}
		got := schedtest.Expect(p, tc.in)
		for r := range got {
			if !slices.Equal(got[r], tc.want[r]) {
				t.Errorf("%v: rank %d: got %v, want %v", tc.c, r, got[r], tc.want[r])
			}
		}
	}
}

func TestRun(t *testing.T) {
	p, progs := exchange(3)
	in := [][]float64{{1, 2, 3}, {10, 20, 30}}
	for _, inPlace := range []bool{false, true} {
		for seed := range uint64(20) {
			out, err := schedtest.RunSeed(p, progs, in, inPlace, seed)
			if err != nil {
				t.Fatal(err)
			}
			for r := range out {
				if !slices.Equal(out[r], []float64{11, 22, 33}) {
					t.Fatalf("in place %v, seed %d: rank %d: got %v", inPlace, seed, r, out[r])
				}
			}
		}
	}
	if !slices.Equal(in[0], []float64{1, 2, 3}) {
		t.Errorf("Run modified its input: %v", in[0])
	}
	if _, err := schedtest.Run(p, progs, in[:1], false); err == nil {
		t.Error("Run accepted one input for two ranks")
	}
	if _, err := schedtest.Run(p, progs, [][]float64{{1}, {2}}, false); err == nil {
		t.Error("Run accepted inputs of the wrong length")
	}
	progs[0].Steps[3].Deps = nil
	if _, err := schedtest.Run(p, progs, in, false); err == nil {
		t.Error("Run accepted a schedule that Validate rejects")
	}
}

func TestCheck(t *testing.T) {
	p, progs := exchange(5)
	if err := schedtest.Check(p, progs); err != nil {
		t.Fatal(err)
	}

	// Forgetting to add: rank 1 copies the peer's vector instead.
	_, bad := exchange(5)
	bad[1].Steps[3].Kind = sched.KindCopy
	wantErr(t, schedtest.Check(p, bad), "allreduce on 2 ranks, count 5, in place false: rank 1: element 0 is")

	// A gather that puts rank 1's block where the root's goes.
	gp := sched.Params{Coll: sched.Gather, NRanks: 2, Count: 2, Root: 0}
	g0 := sched.NewBuilder(0)
	v := g0.Recv(1, 0, sched.Chunk{Buf: sched.Out, Off: 0, Len: 2}) // wrong block
	g0.Copy(all(sched.In, 2), sched.Chunk{Buf: sched.Out, Off: 2, Len: 2}, v)
	g1 := sched.NewBuilder(1)
	g1.Send(0, 0, all(sched.In, 2))
	wantErr(t, schedtest.Check(gp, []sched.Program{g0.P, g1.P}), "gather on 2 ranks, count 2, root 0, in place false")

	// Three ranks that each add the others' vectors in their own order
	// get the right sums with integers but not the same bits with
	// fractions.
	const n = 64
	ap := sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: n}
	aprogs := make([]sched.Program, 3)
	for r := range aprogs {
		b := sched.NewBuilder(r)
		c := b.Copy(all(sched.In, n), all(sched.Out, n))
		var sends, recvs []int32
		for d := 1; d < 3; d++ {
			sends = append(sends, b.Send((r+d)%3, 0, all(sched.In, n)))
		}
		tmp := func(d int) sched.Chunk { return sched.Chunk{Buf: sched.Tmp, Off: (d - 1) * n, Len: n} }
		for d := 1; d < 3; d++ {
			recvs = append(recvs, b.Recv((r+3-d)%3, 0, tmp(d)))
		}
		last := c
		for d := 1; d < 3; d++ {
			last = b.Reduce(tmp(d), all(sched.Out, n), append([]int32{recvs[d-1], last}, sends...)...)
		}
		b.P.TmpLen, b.P.Final = 2*n, []sched.Chunk{all(sched.Out, n)}
		aprogs[r] = b.P
	}
	wantErr(t, schedtest.Check(ap, aprogs), "allreduce on 3 ranks, count 64: result differs from rank 0's: rank 1: element")

	// A barrier whose ranks only send: each can leave before the other
	// arrives.
	bp := sched.Params{Coll: sched.Barrier, NRanks: 2}
	bprogs := make([]sched.Program, 2)
	for r := range bprogs {
		b := sched.NewBuilder(r)
		b.Send(1-r, 0, sched.Chunk{Buf: sched.Out})
		b.Recv(1-r, 0, sched.Chunk{Buf: sched.Out})
		bprogs[r] = b.P
	}
	if err := schedtest.Check(bp, bprogs); err != nil {
		t.Errorf("a two-rank exchange is a barrier: %v", err)
	}
	bprogs[1].Steps = bprogs[1].Steps[:1]
	bprogs[0].Steps = bprogs[0].Steps[1:]
	wantErr(t, schedtest.Check(bp, bprogs), "barrier on 2 ranks, count 0: rank 1 can finish before rank 0 has started")
}

func wantErr(t *testing.T, err error, words string) {
	t.Helper()
	if err == nil {
		t.Errorf("Check accepted a wrong schedule (want %q)", words)
	} else if !strings.Contains(err.Error(), words) {
		t.Errorf("error %q does not say %q", err, words)
	}
}
