package gpu

import (
	"errors"
	"testing"
)

// TestSeqLimit checks when a fused call resets the sequence: when one of
// its rounds would pass SeqLimit, whose flags 2·seq stay below 2^31.
func TestSeqLimit(t *testing.T) {
	if 2*uint64(SeqLimit) >= 1<<31 {
		t.Fatalf("SeqLimit %d: flags 2·seq reach 2^31", SeqLimit)
	}
	f := &fusedState{seq: SeqLimit - 2, seqLimit: SeqLimit}
	for _, c := range []struct {
		rounds uint32
		want   bool
	}{{1, false}, {3, false}, {4, true}, {1 << 20, true}} {
		if got := f.passes(c.rounds); got != c.want {
			t.Errorf("seq %d, %d rounds: reset %v, want %v", f.seq, c.rounds, got, c.want)
		}
	}
	f.seq = 1
	if f.passes(SeqLimit) || !f.passes(SeqLimit+1) {
		t.Errorf("from 1: SeqLimit rounds reset %v, SeqLimit+1 %v", f.passes(SeqLimit), f.passes(SeqLimit+1))
	}
}

// TestSeqAdvance checks the host's count of the sequence numbers that the
// kernels take from their counters: it advances by each launch's rounds,
// and a launch that would pass the limit first resets (and starts from 1),
// or, where the reset fails, counts nothing and returns its error.
func TestSeqAdvance(t *testing.T) {
	f := &fusedState{seq: 1, seqLimit: 100}
	resets := 0
	reset := func() error { resets++; return nil }
	for _, c := range []struct {
		rounds     uint32
		seq, reset int
	}{
		{1, 2, 0}, {10, 12, 0}, {88, 100, 0}, // 12..99: the last number is 99
		{1, 101, 0},   // number 100 = seqLimit: allowed
		{1, 2, 1},     // 101 would pass: reset, then 1
		{99, 101, 1},  // 2..100: no reset
		{100, 101, 2}, // from 101: reset, then 1..100
	} {
		if err := f.advance(c.rounds, reset); err != nil {
			t.Fatal(err)
		}
		if int(f.seq) != c.seq || resets != c.reset || f.resets != c.reset {
			t.Fatalf("after %d rounds: seq %d, resets %d (%d counted), want seq %d and %d resets", c.rounds, f.seq, resets, f.resets, c.seq, c.reset)
		}
	}
	bad := errors.New("no peer")
	if err := f.advance(1, func() error { return bad }); !errors.Is(err, bad) || f.seq != 101 {
		t.Errorf("a failed reset: %v, seq %d; want its error and seq 101", err, f.seq)
	}
}
