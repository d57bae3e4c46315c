package algo

import (
	"math"
	"slices"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sched/schedtest"
)

// hierPipeLayouts are the groupings "hierpipe" is checked on: hier_test.go's
// layouts (one group, two contiguous and interleaved, three uneven, a group
// per rank, NUMA nodes) and groups of 3, 2 and 4 ranks in that order,
// contiguous and interleaved (cut short below 9 ranks).
var hierPipeLayouts = append(slices.Clone(layouts),
	testLayout{"3+2+4", func(n int) *sched.Layout {
		hosts := []string{"a", "a", "a", "b", "b", "c", "c", "c", "c"}
		return hostsLayout(n, func(r int) string { return hosts[r] }, nil)
	}},
	testLayout{"3+2+4-mixed", func(n int) *sched.Layout {
		hosts := []string{"c", "a", "b", "c", "a", "c", "b", "a", "c"}
		return hostsLayout(n, func(r int) string { return hosts[r] }, nil)
	}},
)

// TestHierpipeLayouts checks "hierpipe" on 1–9 ranks, every grouping of
// hierPipeLayouts, counts below the number of ranks and of pieces and
// counts that do not divide evenly, with the segment Tune chooses and with
// pieces of 1, 3 and 100 elements: the schedule validates and the reference
// interpreter gives the sum, in place and not, with the same bits on every
// rank and in both placements.
func TestHierpipeLayouts(t *testing.T) {
	a := mustLookup(t, sched.Allreduce, "hierpipe")
	counts := []int{0, 1, 5, 7, 1000, 65537}
	ranks := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if testing.Short() || raceEnabled {
		counts = counts[:5]
	}
	segs := []int{0, 1, 3, 100}
	if raceEnabled {
		ranks, counts, segs = []int{1, 2, 3, 5, 9}, []int{0, 1, 7, 1000}, []int{0, 3}
	}
	for _, lay := range hierPipeLayouts {
		t.Run(lay.name, func(t *testing.T) {
			t.Parallel()
			for _, n := range ranks {
				for _, count := range counts {
					for _, seg := range segs {
						if count > 1000 && seg != 0 && seg != 100 {
							continue
						}
						p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count, Segment: seg, Layout: lay.make(n)}
						if err := a.Supports(p); err != nil {
							t.Fatalf("n=%d: %v", n, err)
						}
						if err := checkSched(t, p, Programs(a, p)); err != nil {
							t.Fatalf("n=%d count=%d seg=%d: %v", n, count, seg, err)
						}
					}
				}
			}
		})
	}
}

// TestHierpipeStage2 checks which form of stage 2 the model picks and
// runs the schedules of both: the direct exchange for small pieces (the
// ring pays 2(H−1) latencies per piece, and a leader's rounds block its
// next piece's stage 1), the ring for large pieces on three leaders or
// more, alone (a group per rank) or after stage 1 (3+2+4), where it moves
// 2(H−1)/H of a piece per leader instead of H−1. It then runs a few
// layouts with a scratch budget below one piece.
func TestHierpipeStage2(t *testing.T) {
	a := mustLookup(t, sched.Allreduce, "hierpipe")
	own, mixed := layouts[5], hierPipeLayouts[len(layouts)]
	for _, tc := range []struct {
		lay               testLayout
		n, count, seg     int
		pieces            int
		ring, interpreted bool
	}{
		{own, 2, 1000, 100, 10, false, true},
		{own, 9, 65537, 100, 656, false, false},
		{own, 9, 65537, 0, 1, true, true},
		{mixed, 9, 65537, 0, 4, false, true},
		{mixed, 7, 1 << 20, 0, 5, true, true},
		{layouts[4], 9, 1 << 20, 0, 16, false, false},
	} {
		p := sched.Params{Coll: sched.Allreduce, NRanks: tc.n, Count: tc.count, Segment: tc.seg, Layout: tc.lay.make(tc.n)}
		sh := newHierPipeShape(p)
		seg, pieces := hierPipeCut(p.Count, hierPipeSegment(p), len(sh.groups))
		if got := hierPipeRing(p, sh, seg); got != tc.ring || pieces != tc.pieces {
			t.Errorf("%s n=%d count %d segment %d: %d pieces, ring %v; want %d, %v", tc.lay.name, tc.n, tc.count, tc.seg, pieces, got, tc.pieces, tc.ring)
		}
		if tc.interpreted && (tc.count < 1<<20 || !testing.Short()) {
			if err := schedtest.Check(p, Programs(a, p)); err != nil {
				t.Errorf("%s n=%d count %d: %v", tc.lay.name, tc.n, tc.count, err)
			}
		}
	}
	defer func(v int) { directSlots = v }(directSlots)
	for _, slots := range []int{1 << 20, 2} {
		directSlots = slots
		for _, lay := range []testLayout{layouts[4], layouts[5], mixed} {
			for _, n := range []int{4, 7, 9} {
				for _, seg := range []int{2, 50, 0} {
					p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: 333, Segment: seg, Layout: lay.make(n)}
					if err := checkSched(t, p, Programs(a, p)); err != nil {
						t.Fatalf("slots=%d layout %s n=%d seg=%d: %v", slots, lay.name, n, seg, err)
					}
				}
			}
		}
	}
}

// pieceOf returns the piece (of seg elements) of the In or Out memory step
// s touches, or −1 if it touches only scratch.
func pieceOf(s sched.Step, seg int) int {
	for _, c := range []sched.Chunk{s.Src, s.Dst} {
		if c.Len > 0 && c.Buf != sched.Tmp {
			return c.Off / seg
		}
	}
	return -1
}

// TestHierpipePieces checks the pipeline's structure on 3+2+4 ranks and a
// group per rank: every step's In or Out memory lies within one piece, no
// step waits for a step on another piece's memory (so the executor
// overlaps the pieces' stages), each leader adds its members' data in rank
// order right after copying its own, and only leaders send between groups.
func TestHierpipePieces(t *testing.T) {
	a := mustLookup(t, sched.Allreduce, "hierpipe")
	for _, lay := range []testLayout{hierPipeLayouts[len(layouts)], hierPipeLayouts[len(layouts)+1], layouts[5], layouts[1]} {
		const n, count, seg = 9, 1000, 64
		p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count, Segment: seg, Layout: lay.make(n)}
		groups := p.Layout.Groups(n)
		for r, prog := range Programs(a, p) {
			leader := groups[p.Layout.HostOf(r)][0]
			from := map[int]int{} // Tmp offset -> peer of the last receive there
			added := map[int][]int{}
			for i, s := range prog.Steps {
				j := pieceOf(s, seg)
				for _, c := range []sched.Chunk{s.Src, s.Dst} {
					if c.Len > 0 && c.Buf != sched.Tmp && (c.Off/seg != j || (c.End()-1)/seg != j) {
						t.Fatalf("%s rank %d step %d (%v) spans pieces", lay.name, r, i, s)
					}
				}
				for _, d := range s.Deps {
					if k := pieceOf(prog.Steps[d], seg); j >= 0 && k >= 0 && k != j {
						t.Errorf("%s rank %d step %d (%v) of piece %d waits for step %d of piece %d", lay.name, r, i, s, j, d, k)
					}
				}
				if s.Kind == sched.KindSend && p.Layout.HostOf(s.Peer) != p.Layout.HostOf(r) && r != leader {
					t.Errorf("%s rank %d, not a leader, sends across groups: %v", lay.name, r, s)
				}
				switch {
				case s.Kind == sched.KindRecv && s.Dst.Buf == sched.Tmp:
					from[s.Dst.Off] = s.Peer
				case s.Kind == sched.KindCopy && s.Dst.Buf == sched.Out:
					added[s.Dst.Off] = append(added[s.Dst.Off], r)
				case s.Kind == sched.KindReduce && s.Dst.Buf == sched.Out && s.Src.Buf == sched.Tmp:
					if p.Layout.HostOf(from[s.Src.Off]) == p.Layout.HostOf(r) {
						added[s.Dst.Off] = append(added[s.Dst.Off], from[s.Src.Off])
					}
				}
			}
			for off, ranks := range added {
				if want := groups[p.Layout.HostOf(r)]; r == leader && !slices.Equal(ranks, want) {
					t.Errorf("%s leader %d: out[%d] gets its group's data from ranks %v, want %v", lay.name, r, off, ranks, want)
				}
			}
			if r != leader && len(added) > 0 {
				t.Errorf("%s rank %d, not a leader, adds data", lay.name, r)
			}
		}
	}
}

// TestHierpipeOverlap checks with the simulator that the pieces' stages
// overlap on two groups of four ranks across a network, where stage 2
// (the vector over the network, M/β_n) takes about as long as stages 1 and
// 3 together: one piece takes their sum, eight pieces little more than
// the network's share (within 25%), and Cost predicts both within 10%.
func TestHierpipeOverlap(t *testing.T) {
	a := mustLookup(t, sched.Allreduce, "hierpipe")
	m := cost.Default()
	p := sched.Params{Coll: sched.Allreduce, NRanks: 8, Count: 1 << 20,
		Layout: sched.NewLayout([]string{"a", "a", "a", "a", "b", "b", "b", "b"}, nil)}
	var times [2]float64
	for i, pieces := range []int{1, 8} {
		p.Segment = p.Count / pieces
		c, simulated, gap := costGap(t, a, p, m)
		times[i] = simulated
		if math.Abs(gap) > 0.1 {
			t.Errorf("%d pieces: cost %.1f µs, simulated %.1f µs", pieces, c*1e6, simulated*1e6)
		}
	}
	if net := float64(p.Count*4) / m.Links[cost.Inter].Beta; times[1] > 1.25*net || times[0] < 1.8*net {
		t.Errorf("1 piece takes %.1f µs, 8 pieces %.1f µs, the network alone %.1f µs: the stages do not overlap",
			times[0]*1e6, times[1]*1e6, net*1e6)
	}
}

// TestHierpipeCostSim compares Cost with the simulator running the
// schedule on the network the model describes (one port per rank, one
// network link per host) on the groupings of the tests above, for small
// and large counts, tuned and fixed pieces, and a model whose reductions
// are slower than its links. The closed form counts the bottlenecks and
// the stages' overlap but not every interplay of fair sharing: it must
// agree within 25%. The worst gap is logged.
func TestHierpipeCostSim(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates large schedules")
	}
	a := mustLookup(t, sched.Allreduce, "hierpipe")
	// The simulator's ranks overlap transfers and additions (no
	// cost.Model.SelfCopy): compare without it.
	def := cost.Default()
	def.SelfCopy = false
	slow := def
	slow.Gamma = 2e-9
	worst := 0.0
	for _, m := range []cost.Model{def, slow} {
		for _, lay := range []testLayout{layouts[0], layouts[2], layouts[4], layouts[5], layouts[7], hierPipeLayouts[len(layouts)]} {
			for _, n := range []int{2, 5, 9} {
				for _, count := range []int{1, 1000, 1 << 16, 1<<20 + 3} {
					for _, seg := range []int{0, 1 << 14} {
						p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count, Segment: seg, Layout: lay.make(n)}
						c, simulated, gap := costGap(t, a, p, m)
						worst = max(worst, math.Abs(gap))
						if math.Abs(gap) > 0.25 {
							t.Errorf("layout %s n=%d count=%d seg=%d γ=%g: cost %.2f µs, simulated %.2f µs (%+.1f%%)",
								lay.name, n, count, seg, m.Gamma, c*1e6, simulated*1e6, gap*100)
						}
					}
				}
			}
		}
	}
	t.Logf("largest gap between cost and simulation: %.2f%%", worst*100)
}

// TestHierpipeCost checks the closed form on one class of link (every
// class the same α, β), for two groups of four ranks and for one group:
// with pieces of b bytes, c = α + 3b/β, W = 4b/β (a leader's port carries
// 3b from its members and b from the other leader, and the same out),
//
//	two groups: F = c + 3bγ + (α + b/β) + bγ + c, P = max(c, 4bγ, 4b/β)
//	one group:  F = c + 3bγ + c,                  P = max(c, 3bγ, 3b/β)
//
// (q = max(c, 3bγ) exceeds α + b/β here), T = F + (k−1)·P for k equal
// pieces, and F alone for one piece.
func TestHierpipeCost(t *testing.T) {
	a := mustLookup(t, sched.Allreduce, "hierpipe").(Coster)
	const es = 4
	for _, l := range []cost.Link{{Alpha: 1e-6, Beta: 8e9}, {Alpha: 25e-6, Beta: 1.25e9}, {Alpha: 0, Beta: 1e9}} {
		for _, gamma := range []float64{1e-10, 2e-9} {
			var m cost.Model
			for _, c := range cost.Classes() {
				m.Links[c] = l
			}
			m.Gamma = gamma
			for _, k := range []int{1, 8} {
				const count = 1 << 20
				b := float64(count / k * es)
				c := l.Alpha + 3*b/l.Beta
				two := c + 3*b*gamma + max(l.Alpha+b/l.Beta, max(c, 3*b*gamma)) + b*gamma + c
				one := c + 3*b*gamma + c
				if k == 1 {
					two = c + 3*b*gamma + l.Alpha + b/l.Beta + b*gamma + c
				} else {
					two += float64(k-1) * max(c, 4*b*gamma, 4*b/l.Beta)
					one += float64(k-1) * max(c, 3*b*gamma, 3*b/l.Beta)
				}
				for _, tc := range []struct {
					hosts []string
					want  float64
				}{{[]string{"a", "a", "a", "a", "b", "b", "b", "b"}, two}, {[]string{"a", "a", "a", "a"}, one}} {
					p := sched.Params{Coll: sched.Allreduce, NRanks: len(tc.hosts), Count: count, Segment: count / k,
						Layout: sched.NewLayout(tc.hosts, nil)}
					if got := a.Cost(p, es, m); math.Abs(got-tc.want) > 1e-12*tc.want {
						t.Errorf("%d ranks, %d pieces, α=%g β=%g γ=%g: cost %g, want %g", len(tc.hosts), k, l.Alpha, l.Beta, gamma, got, tc.want)
					}
				}
			}
		}
	}
	if got := a.Cost(sched.Params{Coll: sched.Allreduce, NRanks: 8, Count: 0}, es, cost.Default()); got != 0 {
		t.Errorf("count 0 costs %g", got)
	}
	if got := a.Cost(sched.Params{Coll: sched.Allreduce, NRanks: 1, Count: 100}, es, cost.Default()); got != 0 {
		t.Errorf("one rank costs %g", got)
	}
}

// mistModel is the Mist node of Temuçin's MASc thesis (Queen's University
// 2021) in the model's terms, with each socket a group: GPUs of a socket
// joined by NVLink at about 130 GB/s, the sockets by the X-bus at about 56
// GB/s (the "network" between groups), about 10 µs per CUDA IPC message,
// and a GPU reduction kernel at about 300 GB/s.
func mistModel() cost.Model {
	var m cost.Model
	m.Links[cost.Intra] = cost.Link{Alpha: 10e-6, Beta: 130e9}
	m.Links[cost.Cross] = cost.Link{Alpha: 10e-6, Beta: 130e9}
	m.Links[cost.Inter] = cost.Link{Alpha: 12e-6, Beta: 56e9}
	m.Gamma = 1 / 300e9
	return m
}

// TestHierpipeTune checks that Tune takes the number of pieces that
// minimises Cost (against a search of every count of pieces), keeps a
// segment already set, and on the thesis's machine (two sockets of two GPUs)
// chooses more pieces for larger messages, one or two for the smallest of
// Table 5.1 and at least eight for 1 GiB (the table: 2 to 16). The
// choices are logged beside the table's.
func TestHierpipeTune(t *testing.T) {
	a := mustLookup(t, sched.Allreduce, "hierpipe")
	tu, co := a.(Tuner), a.(Coster)
	if p := tu.Tune(sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 1000, Segment: 7}, 4, cost.Default()); p.Segment != 7 {
		t.Errorf("Tune changed a set segment to %d", p.Segment)
	}
	for _, m := range []cost.Model{cost.Default(), mistModel()} {
		for _, lay := range []testLayout{layouts[1], layouts[2], layouts[4], hierPipeLayouts[len(layouts)]} {
			for _, count := range []int{1, 1000, 1 << 16, 1<<22 + 1} {
				const n, es = 9, 4
				p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count, Layout: lay.make(n)}
				tp := tu.Tune(p, es, m)
				got := co.Cost(tp, es, m)
				best := math.Inf(1)
				for k := 1; k <= min(count, hierPipeMaxPieces); k++ {
					q := p
					q.Segment = ceilDiv(count, k)
					best = min(best, co.Cost(q, es, m))
				}
				if got > best*(1+1e-12) {
					t.Errorf("%s count %d: tuned segment %d costs %g, the best %g", lay.name, count, tp.Segment, got, best)
				}
			}
		}
	}
	m := mistModel()
	l := sched.NewLayout([]string{"s0", "s0", "s1", "s1"}, nil)
	prev := 0
	table := []int{2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 8, 8, 16, 16, 16, 16} // Table 5.1, 32 KiB to 1 GiB
	for i, want := range table {
		bytes := 32 << 10 << i
		p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: bytes / 4, Layout: l}
		seg := tu.Tune(p, 4, m).Segment
		pieces := ceilDiv(p.Count, seg)
		t.Logf("%10d B: %4d pieces (Table 5.1: %d)", bytes, pieces, want)
		if pieces < prev {
			t.Errorf("%d B: %d pieces, fewer than %d for half the size", bytes, pieces, prev)
		}
		prev = pieces
		switch {
		case i == 0 && pieces > 2:
			t.Errorf("32 KiB: %d pieces, want 1 or 2", pieces)
		case i == len(table)-1 && pieces < 8:
			t.Errorf("1 GiB: %d pieces, want at least 8", pieces)
		}
	}
}

// TestHierpipeSupports checks the tag bound's error and the piece limit.
func TestHierpipeSupports(t *testing.T) {
	a := mustLookup(t, sched.Allreduce, "hierpipe")
	if err := a.Supports(sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: 1, Layout: &sched.Layout{Host: []int{0, 2, 1}}}); err == nil {
		t.Error("a layout with hosts out of order was accepted")
	}
	if err := a.Supports(sched.Params{Coll: sched.Bcast, NRanks: 3, Count: 1}); err == nil {
		t.Error("a broadcast was accepted")
	}
	for _, hosts := range []int{1, 2, 1 << 20} {
		seg, pieces := hierPipeCut(1<<30, 1, hosts)
		if pieces > hierPipeMaxPieces || pieces*hierPipeStride(hosts) > hierPipeTagLimit || seg*pieces < 1<<30 {
			t.Errorf("%d groups: %d pieces of %d elements", hosts, pieces, seg)
		}
	}
	p := sched.Params{Coll: sched.Allreduce, NRanks: 5, Count: 1 << 20, Segment: 1}
	if err := a.Supports(p); err != nil {
		t.Fatal(err)
	}
	prog := a.Program(p, 1)
	sends := 0
	for _, s := range prog.Steps {
		if s.Kind == sched.KindSend {
			sends++
		}
	}
	if sends != hierPipeMaxPieces {
		t.Errorf("segment 1 on 2^20 elements: a member sends %d pieces, want %d", sends, hierPipeMaxPieces)
	}
}
