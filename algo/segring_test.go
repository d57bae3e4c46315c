package algo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sched/schedtest"
)

// segRings are the segmented rings, with their generators that take the
// receive window (in elements) as an argument.
var segRings = []struct {
	coll sched.Collective
	prog func(p sched.Params, r, window int) sched.Program
}{
	{sched.Allreduce, segRingAllreduceProgram},
	{sched.ReduceScatter, segRingReduceScatterProgram},
	{sched.Allgather, segRingAllgatherProgram},
}

func segPrograms(prog func(sched.Params, int, int) sched.Program, p sched.Params, window int) []sched.Program {
	progs := make([]sched.Program, p.NRanks)
	for r := range progs {
		progs[r] = prog(p, r, window)
	}
	return progs
}

// TestSegRing validates and runs the segmented rings on 1–9 ranks, with
// counts that split evenly and not, into blocks smaller and larger than a
// segment, with the default receive window and, on up to 3 ranks, the
// narrowest ones. The interpreter takes a while per message, so the largest
// schedules are left out: those with more than maxMessages messages in all
// (tiny segments of large counts on many ranks, for which TestSegRingCap and
// TestSegRingPipeline stand in), and 65537 elements on more than 3 ranks.
func TestSegRing(t *testing.T) {
	const maxMessages = 800
	for _, sr := range segRings {
		t.Run(sr.coll.String(), func(t *testing.T) {
			t.Parallel()
			a, err := Lookup(sr.coll, "segring")
			if err != nil {
				t.Fatal(err)
			}
			for n := 1; n <= 9; n++ {
				for _, count := range []int{0, 1, 7, 1000, 65537} {
					if count == 65537 && n > 3 {
						continue
					}
					for _, segment := range []int{0, 1, 7, 1000} {
						p := sched.Params{Coll: sr.coll, NRanks: n, Count: count, Segment: segment}
						if messages(p) > maxMessages {
							continue
						}
						if err := a.Supports(p); err != nil {
							t.Fatalf("%+v: %v", p, err)
						}
						if err := checkSched(t, p, Programs(a, p)); err != nil {
							t.Errorf("n=%d count=%d segment=%d: %v", n, count, segment, err)
						}
						if count > 1000 || segment == 0 || n > 3 {
							continue
						}
						for _, w := range []int{1, 3} {
							if err := checkSched(t, p, segPrograms(sr.prog, p, w)); err != nil {
								t.Errorf("n=%d count=%d segment=%d window=%d: %v", n, count, segment, w, err)
							}
						}
					}
				}
			}
		})
	}
}

// messages returns about how many messages the segmented ring sends for p,
// in all.
func messages(p sched.Params) int {
	n, block, steps := p.NRanks, p.Count, p.NRanks-1
	if p.Coll == sched.Allreduce {
		block, steps = (p.Count+n-1)/n, 2*(n-1)
	}
	return n * steps * planSegments(block, n, p.Segment, segWindow).nseg
}

// TestSegRingCap checks a case where Count/Segment exceeds maxSegments, so
// that the segments grow.
func TestSegRingCap(t *testing.T) {
	t.Parallel()
	p := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 2 * maxSegments * 3, Segment: 1}
	a, _ := Lookup(p.Coll, "segring")
	progs := Programs(a, p)
	if got, want := countSends(progs[0]), 2*(maxSegments/2); got != want {
		t.Errorf("%d sends, want %d", got, want)
	}
	if err := sched.Validate(p, progs); err != nil {
		t.Error(err)
	}
}

func countSends(prog sched.Program) int {
	n := 0
	for _, s := range prog.Steps {
		if s.Kind == sched.KindSend {
			n++
		}
	}
	return n
}

// TestSegRingPlan checks how blocks are cut: evenly, into at most maxSegments
// per NRanks segments, with tags that fit in an int32 on any number of
// ranks.
func TestSegRingPlan(t *testing.T) {
	for _, tc := range []struct {
		blockMax, n, segment, window int
		want                         segPlan
	}{
		{0, 4, 0, segWindow, segPlan{1, 1, 1}},
		{1, 4, 0, segWindow, segPlan{1, 1, 1}},
		{DefaultSegment, 2, 0, segWindow, segPlan{DefaultSegment, 1, 1}},
		{DefaultSegment + 1, 2, 0, segWindow, segPlan{DefaultSegment/2 + 1, 2, 2}},
		{8 << 20, 2, 0, segWindow, segPlan{DefaultSegment, 128, 4}},
		{1000, 3, 7, segWindow, segPlan{7, 143, 143}},
		{1000, 3, 7, 1, segPlan{7, 143, 1}},
		{1000, 3, 7, 20, segPlan{7, 143, 3}},
		{1000, 3, 1000, segWindow, segPlan{1000, 1, 1}},
		{1000, 3, 1 << 30, segWindow, segPlan{1000, 1, 1}},
		{1 << 30, 8, 1, segWindow, segPlan{1 << 20, maxSegments / 8, 1}},
		{1<<30 + 1, 8, 1, segWindow, segPlan{1<<20 + 1, maxSegments / 8, 1}},
		{1 << 40, 1 << 24, 1, segWindow, segPlan{1 << 40, 1, 1}},
	} {
		got := planSegments(tc.blockMax, tc.n, tc.segment, tc.window)
		if got != tc.want {
			t.Errorf("planSegments(%d, %d, %d, %d) = %+v, want %+v", tc.blockMax, tc.n, tc.segment, tc.window, got, tc.want)
		}
		if steps := 2 * (tc.n - 1) * got.nseg; steps > math.MaxInt32 {
			t.Errorf("planSegments(%d, %d, ...): %d messages per peer do not fit int32 tags", tc.blockMax, tc.n, steps)
		}
		if got.seg*got.nseg < tc.blockMax || (got.nseg > 1 && got.seg*(got.nseg-1) >= tc.blockMax) {
			t.Errorf("planSegments(%d, ...) = %+v does not cut the block into nseg segments", tc.blockMax, got)
		}
	}
}

// TestSegRingMessages checks the number and size of the messages: every
// ring step sends each block in ⌈len/Segment⌉ messages of at most Segment
// elements (blocks split as evenly as the plain ring splits them).
func TestSegRingMessages(t *testing.T) {
	for _, tc := range []struct {
		coll                  sched.Collective
		n, count, segment     int
		sends, maxLen, minLen int // per rank
	}{
		// 4 blocks of 1000: 10 segments, 2·3 steps.
		{sched.Allreduce, 4, 4000, 100, 60, 100, 100},
		// Blocks of 334, 333, 333 in segments of at most 100: 4 each,
		// evened out to 84, 84, 84 and 82 or 81.
		{sched.Allreduce, 3, 1000, 100, 16, 84, 81},
		// Default segment: 2^20 over 4 ranks is 4 segments per block.
		{sched.Allreduce, 4, 1 << 20, 0, 24, DefaultSegment, DefaultSegment},
		// Smaller than one segment: the plain ring's messages.
		{sched.Allreduce, 5, 1000, 0, 8, 200, 200},
		{sched.ReduceScatter, 5, 1000, 300, 16, 250, 250},
		{sched.Allgather, 5, 1001, 500, 12, 334, 333},
		{sched.Allgather, 2, 0, 0, 0, 0, 0},
	} {
		a, _ := Lookup(tc.coll, "segring")
		p := sched.Params{Coll: tc.coll, NRanks: tc.n, Count: tc.count, Segment: tc.segment}
		for r, prog := range Programs(a, p) {
			sends, recvs := 0, 0
			maxLen, minLen := 0, math.MaxInt
			for _, s := range prog.Steps {
				switch s.Kind {
				case sched.KindSend:
					sends++
					maxLen, minLen = max(maxLen, s.Len()), min(minLen, s.Len())
				case sched.KindRecv, sched.KindRecvReduce:
					recvs++
				}
			}
			if sends == 0 {
				minLen = 0
			}
			if sends != tc.sends || recvs != tc.sends || maxLen != tc.maxLen || minLen != tc.minLen {
				t.Errorf("%v n=%d count=%d segment=%d rank %d: %d sends, %d receives of %d to %d elements; want %d of %d to %d",
					tc.coll, tc.n, tc.count, tc.segment, r, sends, recvs, minLen, maxLen, tc.sends, tc.minLen, tc.maxLen)
			}
		}
	}
}

// TestSegRingPipeline checks the structure that lets the executor overlap:
// a send of segment j in a step after the first depends on nothing but the
// receive of segment j in the step before; no dependency is more than the
// memory needs; and no more than the window's receives that need staging
// (RecvReduce) or land in Tmp are posted beyond those that the steps issued
// so far wait for.
func TestSegRingPipeline(t *testing.T) {
	for _, sr := range segRings {
		for _, n := range []int{2, 4} {
			for _, w := range []int{1, 3, segWindow} {
				p := sched.Params{Coll: sr.coll, NRanks: n, Count: 33, Segment: 7}
				if sr.coll == sched.Allreduce {
					p.Count = 33 * n
				}
				sp := planSegments(33, n, 7, w)
				for r := range n {
					prog := sr.prog(p, r, w)
					recvAt := map[int32]int32{}
					for i, s := range prog.Steps {
						if s.Kind == sched.KindRecv || s.Kind == sched.KindRecvReduce {
							recvAt[s.Tag] = int32(i)
						}
					}
					waited := -1 // the highest tag of a receive that a step so far waits for
					for i, s := range prog.Steps {
						what := fmt.Sprintf("%v n=%d window %d rank %d step %d (%v)", sr.coll, n, w, r, i, s)
						for _, d := range s.Deps {
							if k := prog.Steps[d].Kind; k == sched.KindRecv || k == sched.KindRecvReduce {
								waited = max(waited, int(prog.Steps[d].Tag))
							}
						}
						switch s.Kind {
						case sched.KindSend:
							if int(s.Tag) >= sp.nseg {
								want := []int32{recvAt[s.Tag-int32(sp.nseg)]}
								if !slices.Equal(s.Deps, want) {
									t.Errorf("%s: depends on %v, want %v", what, s.Deps, want)
								}
							}
						case sched.KindRecv, sched.KindRecvReduce:
							if s.Kind == sched.KindRecv && s.Dst.Buf != sched.Tmp {
								break
							}
							if ahead := int(s.Tag) - waited; ahead > sp.window {
								t.Errorf("%s: posted %d receives ahead, window %d", what, ahead, sp.window)
							}
						}
						deps := s.Deps
						for j := range deps {
							prog.Steps[i].Deps = slices.Delete(slices.Clone(deps), j, j+1)
							if sched.ValidateProgram(p, prog) == nil {
								t.Errorf("%s: dependency on step %d is not needed", what, deps[j])
							}
						}
						prog.Steps[i].Deps = deps
					}
				}
			}
		}
	}
}

// TestSegRingSameBits checks that the segmented allreduce and reduce-scatter
// add in the same order as the plain rings: the same bits, on inputs where
// the order shows.
func TestSegRingSameBits(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Allreduce, sched.ReduceScatter} {
		for _, n := range []int{3, 6} {
			p := sched.Params{Coll: coll, NRanks: n, Count: 999, Segment: 50}
			rng := rand.New(rand.NewPCG(uint64(n), 2))
			in := make([][]float64, n)
			for r := range in {
				in[r] = make([]float64, p.InLen(r))
				for i := range in[r] {
					in[r][i] = rng.NormFloat64() * math.Ldexp(1, rng.IntN(41)-20)
				}
			}
			var outs [2][][]float64
			for k, name := range []string{"ring", "segring"} {
				a, _ := Lookup(coll, name)
				out, err := schedtest.Run(p, Programs(a, p), in, false)
				if err != nil {
					t.Fatal(err)
				}
				outs[k] = out
			}
			for r := range n {
				for i := range outs[0][r] {
					if math.Float64bits(outs[0][r][i]) != math.Float64bits(outs[1][r][i]) {
						t.Errorf("%v n=%d rank %d element %d: segring %v, ring %v", coll, n, r, i, outs[1][r][i], outs[0][r][i])
						break
					}
				}
			}
		}
	}
}

func TestSegRingSupports(t *testing.T) {
	for _, sr := range segRings {
		a, _ := Lookup(sr.coll, "segring")
		if err := a.Supports(sched.Params{Coll: sr.coll, NRanks: 2, Count: 10, Segment: -1}); err == nil {
			t.Errorf("%v segring supports a negative segment", sr.coll)
		}
		if err := a.Supports(sched.Params{Coll: sr.coll, NRanks: 2, Count: 10, Segment: 3}); err != nil {
			t.Errorf("%v segring: %v", sr.coll, err)
		}
	}
}
