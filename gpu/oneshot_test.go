package gpu

import "testing"

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
