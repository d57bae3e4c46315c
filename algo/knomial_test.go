package algo_test

import (
	"reflect"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
)

var knomialRadixes = []int{0, 2, 3, 4, 5, 8, 9, 1000}

// TestKnomial runs the k-nomial broadcast and reduce under the reference
// interpreter on 1–9 ranks, every root and several radixes (0 is the
// default, 1000 more than any n), in place and not; for reduce the
// interpreter also requires the same bits in place and not.
func TestKnomial(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Bcast, sched.Reduce} {
		a, err := algo.Lookup(coll, "knomial")
		if err != nil {
			t.Fatal(err)
		}
		t.Run(coll.String(), func(t *testing.T) {
			t.Parallel()
			for n := 1; n <= 9; n++ {
				for root := range n {
					if raceEnabled && root != 0 && root != n/2 && root != n-1 {
						continue // a sample of the roots: the sweep is slow under the race detector
					}
					for _, k := range knomialRadixes {
						for _, count := range []int{0, 1, 7, 1000} {
							check(t, a, sched.Params{Coll: coll, NRanks: n, Count: count, Root: root, Radix: k})
						}
					}
					for _, k := range []int{0, 2, 3, 5, 1000} {
						check(t, a, sched.Params{Coll: coll, NRanks: n, Count: 65537, Root: root, Radix: k})
					}
				}
			}
		})
	}
}

// TestKnomialTree checks the trees' shape: every rank but the root
// receives (bcast) or sends (reduce) one message, to or from the rank with
// its distance from the root's lowest non-zero base-k digit cleared; and
// radix 2 gives the binomial programs.
func TestKnomialTree(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Bcast, sched.Reduce} {
		a, _ := algo.Lookup(coll, "knomial")
		bin, _ := algo.Lookup(coll, "binomial")
		for n := 1; n <= 30; n++ {
			for _, root := range []int{0, n / 3, n - 1} {
				p := sched.Params{Coll: coll, NRanks: n, Count: 10, Root: root, Radix: 2}
				if !reflect.DeepEqual(algo.Programs(a, p), algo.Programs(bin, p)) {
					t.Errorf("%v n=%d root=%d: radix 2 is not the binomial tree", coll, n, root)
				}
				for _, k := range []int{3, 4, 7} {
					p.Radix = k
					for r, prog := range algo.Programs(a, p) {
						v := (r - root + n) % n
						want := -1
						if v != 0 {
							place := 1
							for v/place%k == 0 {
								place *= k
							}
							want = (v - v/place%k*place + root) % n
						}
						up := sched.KindRecv
						if coll == sched.Reduce {
							up = sched.KindSend
						}
						var peers []int
						for _, s := range prog.Steps {
							if s.Kind == up {
								peers = append(peers, s.Peer)
							}
						}
						if (want < 0 && len(peers) != 0) || (want >= 0 && !reflect.DeepEqual(peers, []int{want})) {
							t.Errorf("%v n=%d root=%d k=%d rank %d: parent messages with %v, want parent %d", coll, n, root, k, r, peers, want)
						}
						if coll == sched.Reduce && prog.TmpLen > (k-1)*p.Count {
							t.Errorf("reduce n=%d k=%d rank %d: %d elements of Tmp, more than k−1 vectors", n, k, r, prog.TmpLen)
						}
					}
				}
			}
		}
	}
}
