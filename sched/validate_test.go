package sched_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/sched"
)

func all(b sched.Buf, n int) sched.Chunk { return sched.Chunk{Buf: b, Len: n} }

// exchange returns a correct two-rank allreduce of count 4: each rank sends
// In, receives the peer's into Tmp and adds it to its copy in Out.
func exchange() (sched.Params, []sched.Program) {
	const n = 4
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

func TestValidateAccepts(t *testing.T) {
	p, progs := exchange()
	if err := sched.Validate(p, progs); err != nil {
		t.Fatal(err)
	}
	// Zero-length messages are fine, as a barrier uses them.
	bp := sched.Params{Coll: sched.Barrier, NRanks: 2}
	bprogs := make([]sched.Program, 2)
	for r := range bprogs {
		b := sched.NewBuilder(r)
		b.Send(1-r, 7, sched.Chunk{Buf: sched.Out})
		b.Recv(1-r, 7, sched.Chunk{Buf: sched.Out})
		bprogs[r] = b.P
	}
	if err := sched.Validate(bp, bprogs); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(p *sched.Params, progs []sched.Program)
		rank  int // of the first error; -1 for the schedule
		step  int
		words string
	}{
		{"unmatched send", func(p *sched.Params, progs []sched.Program) {
			progs[1].Steps[1].Tag = 9
		}, 0, 0, "no matching recv or recvreduce from rank 0 with tag 0 on rank 1"},
		{"unmatched recv", func(p *sched.Params, progs []sched.Program) {
			progs[0].Steps[0].Tag = 9
		}, 0, 0, "no matching recv"},
		{"length mismatch", func(p *sched.Params, progs []sched.Program) {
			progs[0].Steps[0].Src.Len = 3
		}, 0, 0, "sends 3 elements, but rank 1 step 1 (recv r0 tag 0 -> tmp[0:4]) receives 4"},
		{"reads undefined", func(p *sched.Params, progs []sched.Program) {
			progs[1].Steps[0].Src.Buf = sched.Out
		}, 1, 0, "reads out[0:4] before any step writes it"},
		{"out not written", func(p *sched.Params, progs []sched.Program) {
			for _, i := range []int{2, 3} {
				progs[1].Steps[i].Src.Len, progs[1].Steps[i].Dst.Len = 2, 2
			}
		}, 1, -1, "no step writes out[2:4]"},
		{"deadlock", func(p *sched.Params, progs []sched.Program) {
			for r := range progs {
				progs[r].Steps[0].Deps = nil
				progs[r].Steps[0], progs[r].Steps[1] = progs[r].Steps[1], progs[r].Steps[0]
				progs[r].Steps[1].Deps = []int32{0} // send after recv: both wait
			}
		}, -1, -1, "deadlock (2 of 2 ranks stuck): rank 0 step 1 (send in[0:4] -> r1 tag 0 after [0]) waits for its step 0 (recv r1 tag 0 -> tmp[0:4]), which waits for rank 1 step 1"},
		{"chunk out of range", func(p *sched.Params, progs []sched.Program) {
			progs[1].Steps[2].Dst.Off = 1
		}, 1, 2, "destination out[1:5] out of range: out has 4 elements"},
		{"tmp out of range", func(p *sched.Params, progs []sched.Program) {
			progs[0].TmpLen = 2
		}, 0, 1, "destination tmp[0:4] out of range"},
		{"forward dep", func(p *sched.Params, progs []sched.Program) {
			progs[0].Steps[1].Deps = []int32{3}
		}, 0, 1, "depends on step 3, which is not an earlier step"},
		{"self dep", func(p *sched.Params, progs []sched.Program) {
			progs[0].Steps[1].Deps = []int32{1}
		}, 0, 1, "not an earlier step"},
		{"peer is self", func(p *sched.Params, progs []sched.Program) {
			progs[0].Steps[0].Peer = 0
		}, 0, 0, "peer 0 is not another rank"},
		{"peer out of range", func(p *sched.Params, progs []sched.Program) {
			progs[0].Steps[0].Peer = 2
		}, 0, 0, "peer 2 is not another rank of [0, 2)"},
		{"duplicate tag", func(p *sched.Params, progs []sched.Program) {
			progs[0].Steps = append(progs[0].Steps, progs[0].Steps[0])
		}, 0, 4, "tag 0 with rank 1 already used in the same direction by step 0"},
		{"writes in", func(p *sched.Params, progs []sched.Program) {
			progs[1].Steps[1].Dst.Buf = sched.In
		}, 1, 1, "writes the input buffer"},
		{"unknown kind", func(p *sched.Params, progs []sched.Program) {
			progs[1].Steps[2].Kind = 0
		}, 1, 2, "unknown step kind"},
		{"copy lengths", func(p *sched.Params, progs []sched.Program) {
			progs[1].Steps[2].Src.Len = 3
		}, 1, 2, "source has 3 elements, destination 4"},
		{"copy overlaps", func(p *sched.Params, progs []sched.Program) {
			progs[1].Steps[2] = sched.Step{Kind: sched.KindCopy, Src: sched.Chunk{Buf: sched.Tmp, Off: 0, Len: 2}, Dst: sched.Chunk{Buf: sched.Tmp, Off: 1, Len: 2}}
		}, 1, 2, "source and destination partially overlap"},
		{"copy overlaps in place", func(p *sched.Params, progs []sched.Program) {
			progs[1].Steps[2].Src = sched.Chunk{Buf: sched.In, Off: 0, Len: 2}
			progs[1].Steps[2].Dst = sched.Chunk{Buf: sched.Out, Off: 1, Len: 2}
		}, 1, 2, "partially overlap when the call is in place"},
		{"reduce overlaps in place", func(p *sched.Params, progs []sched.Program) {
			progs[1].Steps[3].Src = all(sched.In, 4) // in place, Out += Out
		}, 1, 3, "source and destination overlap when the call is in place"},
		{"missing read-after-write dep", func(p *sched.Params, progs []sched.Program) {
			progs[0].Steps[3].Deps = []int32{0, 2}
		}, 0, 3, "reads tmp[0:4] that step 1 (recv r1 tag 0 -> tmp[0:4]) writes, without depending on it"},
		{"missing write-after-read dep in place", func(p *sched.Params, progs []sched.Program) {
			progs[0].Steps[3].Deps = []int32{1, 2}
		}, 0, 3, "writes out[0:4] that step 0 (send in[0:4] -> r1 tag 0) reads, without depending on it when the call is in place"},
		{"final missing", func(p *sched.Params, progs []sched.Program) {
			progs[1].Final = []sched.Chunk{{Buf: sched.Out, Len: 3}}
		}, 1, -1, "do not cover out[0:4] exactly"},
		{"final twice", func(p *sched.Params, progs []sched.Program) {
			progs[1].Final = []sched.Chunk{{Buf: sched.Out, Len: 3}, {Buf: sched.Out, Off: 2, Len: 2}}
		}, 1, -1, "overlaps another final chunk"},
		{"final in tmp", func(p *sched.Params, progs []sched.Program) {
			progs[1].Final = []sched.Chunk{all(sched.Tmp, 4)}
		}, 1, -1, "is not inside out[0:4]"},
		{"final where nothing reduces", func(p *sched.Params, progs []sched.Program) {
			p.Coll = sched.Alltoall
			p.Count = 2 // In and Out hold 4
		}, 0, -1, "leaves no reduced result"},
		{"wrong rank", func(p *sched.Params, progs []sched.Program) {
			progs[1].Rank = 0
		}, 1, -1, "program at index 1 is for rank 0"},
		{"too few programs", func(p *sched.Params, progs []sched.Program) {
			p.NRanks = 3
		}, -1, -1, "2 programs for 3 ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, progs := exchange()
			tc.edit(&p, progs)
			err := sched.Validate(p, progs)
			if err == nil {
				t.Fatal("Validate accepted a broken schedule")
			}
			if !strings.Contains(err.Error(), tc.words) {
				t.Errorf("error %q does not say %q", err, tc.words)
			}
			var ve *sched.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %q holds no *ValidationError", err)
			}
			if ve.Rank != tc.rank || ve.Step != tc.step {
				t.Errorf("first error names rank %d step %d, want rank %d step %d: %v", ve.Rank, ve.Step, tc.rank, tc.step, err)
			}
		})
	}
}

func TestValidateDeadlockCycle(t *testing.T) {
	// Three ranks each receive from the next before sending to the
	// previous: a cycle of three. A fourth rank waits on the cycle.
	p := sched.Params{Coll: sched.Barrier, NRanks: 4}
	progs := make([]sched.Program, 4)
	z := sched.Chunk{Buf: sched.Out}
	for r := range 3 {
		b := sched.NewBuilder(r)
		v := b.Recv((r+1)%3, 0, z)
		b.Send((r+2)%3, 0, z, v)
		progs[r] = b.P
	}
	b := sched.NewBuilder(3)
	b.Send(0, 1, z)
	progs[3] = b.P
	b = sched.NewBuilder(0)
	b.P = progs[0]
	b.Recv(3, 1, z)
	progs[0] = b.P
	err := sched.Validate(p, progs)
	if err == nil {
		t.Fatal("Validate accepted a deadlock")
	}
	for _, want := range []string{"deadlock (4 of 4 ranks stuck)", "rank 3 step 0 (send out[0:0] -> r0 tag 1) waits for rank 0 step 2", "rank 0 step 1", "rank 1 step 1", "rank 2 step 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestValidateManyErrors(t *testing.T) {
	p, progs := exchange()
	for r := range progs {
		for i := range progs[r].Steps {
			progs[r].Steps[i].Deps = []int32{99}
		}
	}
	err := sched.Validate(p, progs)
	if err == nil || strings.Count(err.Error(), "\n") != 7 {
		t.Errorf("want 8 errors, one per step, got %v", err)
	}
}

func TestCheckParams(t *testing.T) {
	for _, p := range []sched.Params{
		{Coll: sched.InvalidCollective, NRanks: 1},
		{Coll: sched.Allreduce, NRanks: 0},
		{Coll: sched.Allreduce, NRanks: 2, Count: -1},
		{Coll: sched.Barrier, NRanks: 2, Count: 1},
		{Coll: sched.Bcast, NRanks: 2, Root: 2},
		{Coll: sched.Gather, NRanks: 2, Root: -1},
	} {
		if sched.CheckParams(p) == nil {
			t.Errorf("CheckParams(%+v) = nil", p)
		}
		if sched.Validate(p, nil) == nil || sched.ValidateProgram(p, sched.Program{}) == nil {
			t.Errorf("Validate(%+v) = nil", p)
		}
	}
	if err := sched.CheckParams(sched.Params{Coll: sched.Scatter, NRanks: 3, Count: 5, Root: 2}); err != nil {
		t.Error(err)
	}
}

func TestInPlaceAlias(t *testing.T) {
	type alias struct {
		inner sched.Buf
		off   int
		ok    bool
	}
	for _, tc := range []struct {
		c    sched.Collective
		rank int
		want alias
	}{
		{sched.Allreduce, 2, alias{sched.In, 0, true}},
		{sched.Alltoall, 2, alias{sched.In, 0, true}},
		{sched.Reduce, 1, alias{sched.In, 0, true}},
		{sched.Reduce, 2, alias{ok: false}},
		{sched.Bcast, 1, alias{sched.In, 0, true}},
		{sched.Bcast, 0, alias{ok: false}},
		{sched.Allgather, 2, alias{sched.In, 10, true}},
		{sched.Gather, 1, alias{sched.In, 5, true}},
		{sched.Gather, 0, alias{ok: false}},
		{sched.ReduceScatter, 2, alias{sched.Out, 10, true}},
		{sched.Scatter, 1, alias{sched.Out, 5, true}},
		{sched.Scatter, 2, alias{ok: false}},
		{sched.Barrier, 0, alias{ok: false}},
	} {
		p := sched.Params{Coll: tc.c, NRanks: 3, Count: 5, Root: 1}
		inner, off, ok := p.InPlaceAlias(tc.rank)
		got := alias{inner, off, ok}
		if !ok {
			got = alias{}
		}
		if got != tc.want {
			t.Errorf("%v rank %d: InPlaceAlias = %+v, want %+v", tc.c, tc.rank, got, tc.want)
		}
	}
}
