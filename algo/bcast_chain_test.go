package algo

import (
	"testing"

	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sched/schedtest"
)

// TestChainBcastSegments checks the pipelined chain with small segments,
// where every rank forwards many pieces, for every root.
func TestChainBcastSegments(t *testing.T) {
	a, err := Lookup(sched.Bcast, "chain")
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 6; n++ {
		for root := 0; root < n; root++ {
			for _, count := range []int{0, 1, 7, 100} {
				for _, seg := range []int{1, 3, 7, 64} {
					p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: count, Root: root, Segment: seg}
					if err := schedtest.Check(p, Programs(a, p)); err != nil {
						t.Fatalf("n=%d root=%d count=%d seg=%d: %v", n, root, count, seg, err)
					}
				}
			}
		}
	}
	// The number of messages on a middle rank is one receive and one send
	// per segment.
	p := sched.Params{Coll: sched.Bcast, NRanks: 4, Count: 100, Root: 0, Segment: 10}
	prog := a.Program(p, 1)
	var sends, recvs int
	for _, s := range prog.Steps {
		switch s.Kind {
		case sched.KindSend:
			sends++
		case sched.KindRecv:
			recvs++
		}
	}
	if sends != 10 || recvs != 10 {
		t.Fatalf("rank 1 of a 4-rank chain with 10 segments: %d sends, %d receives; want 10 and 10", sends, recvs)
	}
}
