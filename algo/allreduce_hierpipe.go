package algo

import (
	"fmt"
	"math"
	"slices"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(hierPipeAllreduce{base{"hierpipe", sched.Allreduce}}) }

// hierPipeAllreduce is the three-stage hierarchical pipelined allreduce of
// Temuçin's MASc thesis (Queen's University 2021, §5.3.3, Algorithm 5.1),
// generalised from its four GPUs on two sockets to any grouping of the
// ranks: the groups are the hosts of Params.Layout (a socket or an NVLink
// clique where the caller numbers those as hosts), and each group's leader
// is its lowest rank.
//
// The vector is cut into pieces of Params.Segment elements (the thesis's
// chunks; its Table 5.1 uses 2 to 16 of them) and every piece goes through
// three stages of its own:
//
//  1. every other member of a group sends the piece to the group's
//     leader, which adds them to its own in rank order;
//  2. the leaders allreduce the piece: with two leaders they exchange
//     their sums and add (the thesis's step 2); with more, either each
//     leader sends its sum to every other one and each adds them all in
//     leader order (direct), or they run a ring reduce-scatter and
//     allgather of the piece (ring), whichever the model predicts faster;
//  3. each leader sends the piece's total to its group's members.
//
// The dependencies of a step are only the steps that touched its memory,
// so the stages of different pieces overlap: stage 1 of piece j+1 runs
// while piece j is in stage 2 and piece j−1 in stage 3. A leader's program
// posts the receives of the next pieces early (two pieces' worth of
// scratch for each stage, fewer when a piece is above the directSlots
// budget) and, with the direct exchange, adds the leaders' sums of piece
// j after it has added its members' data of piece j+1, so that it waits
// for the slower stage 2 only when it has nothing else to do. One group
// makes stage 2 empty (a pipelined reduce to the leader and broadcast);
// groups of one rank make that rank its own leader with stages 1 and 3
// empty. Every total is computed in the same order on every leader:
// ((P_0 ⊕ P_1) ⊕ P_2) … for the leaders' sums P_i in the direct exchange
// (a leader i ≥ 2 adds its own P_i as acc ⊕ P_i by computing P_i ⊕ acc,
// equal because every op is commutative bitwise, as recursive doubling
// also assumes), one rank per block in the ring; members receive the
// leader's bits, so every rank gets the same bits.
//
// Cost, for a piece of b bytes, groups of L_h ranks (L = max L_h) and H
// leaders, with E(F, b) the time of the messages F of one piece sent at
// once (exchangeTime: per link class, α plus the busiest of each rank's
// port, each pair's link and each host's network link), W(b) the busiest
// bottleneck for all three stages' messages of one piece without α:
//
//	c1 = E(members → leader, b)   r1 = (L−1)·b·γ
//	c3 = E(leader → members, b)
//	direct: c2 = E(leader ↔ leader, b), r2 = (H−1)·b·γ
//	        F(b) = c1 + r1 + max(c2, q) + r2 + c3, q = max(c1, r1) if k > 1 else 0
//	        P(b) = max(c1, c2, c3, r1 + r2, W(b))
//	ring:   t2 = 2(H−1)·E(leader → next leader, b/H) + (H−1)·b/H·γ
//	        F(b) = c1 + r1 + t2 + c3
//	        P(b) = max(c1, c3, r1 + t2, W(b))
//
// F is the time of a piece alone through the three stages (q: with the
// direct exchange the leader adds piece 0's sums after piece 1's stage 1)
// and P the period at which the pipeline's bottleneck takes pieces: a
// link or port, or the leader's processor, which adds both stages'
// data (and, in the ring, blocks on its rounds). On one host (H = 1, no
// stage 2), where the ranks copy their own messages (cost.Model.Serial),
// the leader's receives and additions take turns on its thread:
// P(b) = max(c1 + r1, c3, W(b)). For k pieces of C bytes,
// the last one of C_s:
//
//	T = F(C_s)                                           k = 1
//	T = max((k−1)·P(C) + F(C_s), (k−2)·P(C) + F(C) + P(C_s))   k ≥ 2
//
// More pieces overlap more of the stages but pay each α once per piece;
// Tune takes the number of pieces that minimises T (up to
// hierPipeMaxPieces), and Params.Segment 0 means the pieces Tune would
// choose under cost.Default for 4-byte elements.
type hierPipeAllreduce struct{ base }

// hierPipeMaxPieces bounds the pieces of "hierpipe" (and so its program's
// length and tags): a larger Segment count is met by longer pieces.
const hierPipeMaxPieces = 1 << 10

// hierPipeTagLimit bounds the tags of "hierpipe", as hierTags's check.
const hierPipeTagLimit = math.MaxInt32 / 2

// hierPipeStride is the tags one piece uses on h leaders: stage 1, stage 3
// and stage 2's messages (one in the direct exchange, the ring's rounds).
func hierPipeStride(hosts int) int { return 2 + max(1, ringAllreduceTags(hosts)) }

func (a hierPipeAllreduce) Supports(p sched.Params) error {
	if err := a.base.Supports(p); err != nil {
		return err
	}
	h := p.Layout.NHosts()
	if s := hierPipeStride(h); s > hierPipeTagLimit {
		return fmt.Errorf("algo: allreduce %q: %d groups need %d tags per piece, more than tags can number", a.name, h, s)
	}
	return nil
}

// hierPipeCut returns the segment, in elements, and the number of pieces
// of count elements cut into pieces of at most seg (seg ≥ 1) elements on
// h groups: at most hierPipeMaxPieces pieces, and no more than the tags
// allow.
func hierPipeCut(count, seg, hosts int) (size, pieces int) {
	if count == 0 {
		return max(1, seg), 0
	}
	seg = max(1, min(seg, count))
	pieces = ceilDiv(count, seg)
	if limit := max(1, min(hierPipeMaxPieces, hierPipeTagLimit/hierPipeStride(hosts))); pieces > limit {
		seg = ceilDiv(count, limit)
		pieces = ceilDiv(count, seg)
	}
	return seg, pieces
}

// hierPipeSegment returns the segment Program uses for p: p.Segment, or
// the one Tune chooses under cost.Default for 4-byte elements.
func hierPipeSegment(p sched.Params) int {
	if p.Segment > 0 {
		return p.Segment
	}
	return hierPipeAllreduce{}.Tune(p, 4, cost.Default()).Segment
}

// hierPipeRing reports whether stage 2 of pieces of seg elements runs the
// ring (else the direct exchange): on three leaders or more, when the
// model predicts it faster under cost.Default for 4-byte elements. Program
// has neither the element size nor the planner's model, so it decides
// with these, and Cost follows the same choice.
func hierPipeRing(p sched.Params, sh *hierPipeShape, seg int) bool {
	if len(sh.groups) < 3 {
		return false
	}
	d := sh.defaults(p)
	return d.time(p.Count, seg, 4, true) < d.time(p.Count, seg, 4, false)
}

func (hierPipeAllreduce) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	c := p.Count
	if p.NRanks == 1 {
		g.copy(whole(sched.In, c), whole(sched.Out, c))
		return g.program()
	}
	sh := newHierPipeShape(p)
	groups := sh.groups
	hosts := len(groups)
	seg, k := hierPipeCut(c, hierPipeSegment(p), hosts)
	ring := hierPipeRing(p, sh, seg)
	stride := hierPipeStride(hosts)
	piece := func(buf sched.Buf, j int) sched.Chunk { return subChunk(whole(buf, c), j*seg, (j+1)*seg) }
	tag1 := func(j int) int { return j * stride }
	tag3 := func(j int) int { return j*stride + 1 }
	tag2 := func(j int) int { return j*stride + 2 }

	grp := groups[p.Layout.HostOf(r)]
	leader := grp[0]
	if r != leader {
		// A member sends every piece at once and takes the totals back.
		for j := range k {
			g.send(leader, tag1(j), piece(sched.In, j))
		}
		for j := range k {
			g.recv(leader, tag3(j), piece(sched.Out, j))
		}
		return g.program()
	}

	members := grp[1:]
	leaders := sh.leaders
	li := slices.Index(leaders, r)
	// Scratch: w1 pieces of stage-1 slots, one per member, then w2 pieces
	// of stage-2 slots, one per other leader (direct exchange only).
	window := func(peers int) int {
		if peers == 0 {
			return 0
		}
		return max(1, min(k, 2, directSlots/(seg*peers)))
	}
	w1 := window(len(members))
	w2 := 0
	if !ring {
		w2 = window(hosts - 1)
	}
	base2 := w1 * len(members) * seg
	slot1 := func(j, i int) sched.Chunk {
		return span(sched.Tmp, ((j%w1)*len(members)+i)*seg, piece(sched.In, j).Len)
	}
	slot2 := func(j, q int) sched.Chunk { // q: the leader's index, q ≠ li
		if q > li {
			q--
		}
		return span(sched.Tmp, base2+((j%w2)*(hosts-1)+q)*seg, piece(sched.In, j).Len)
	}
	post1 := func(j int) {
		if j < k && w1 > 0 {
			for i, m := range members {
				g.recv(m, tag1(j), slot1(j, i))
			}
		}
	}
	post2 := func(j int) {
		if j < k && w2 > 0 {
			for q, l := range leaders {
				if q != li {
					g.recv(l, tag2(j), slot2(j, q))
				}
			}
		}
	}
	stage1 := func(j int) {
		out := piece(sched.Out, j)
		g.copy(piece(sched.In, j), out)
		for i := range members {
			g.reduce(slot1(j, i), out)
		}
		post1(j + w1)
	}
	send2 := func(j int) {
		for s := 1; s < hosts; s++ {
			g.send(leaders[(li+s)%hosts], tag2(j), piece(sched.Out, j))
		}
	}
	// reduce2 adds the leaders' sums of piece j in leader order.
	reduce2 := func(j int) {
		out := piece(sched.Out, j)
		if li <= 1 {
			g.reduce(slot2(j, 1-li), out)
			for q := 2; q < hosts; q++ {
				g.reduce(slot2(j, q), out)
			}
		} else {
			acc := slot2(j, 0)
			for q := 1; q < li; q++ {
				g.reduce(slot2(j, q), acc)
			}
			g.reduce(acc, out)
			for q := li + 1; q < hosts; q++ {
				g.reduce(slot2(j, q), out)
			}
		}
		post2(j + w2)
	}
	send3 := func(j int) {
		for _, m := range members {
			g.send(m, tag3(j), piece(sched.Out, j))
		}
	}

	for j := range w1 {
		post1(j)
	}
	for j := range w2 {
		post2(j)
	}
	switch {
	case hosts == 1:
		for j := range k {
			stage1(j)
			send3(j)
		}
	case ring:
		for j := range k {
			stage1(j)
			ringAllreduceGroups(g, r, []groupJob{{group: leaders, acc: piece(sched.Out, j), tag: tag2(j)}})
			send3(j)
		}
	default:
		for j := range k {
			stage1(j)
			send2(j)
			if j > 0 {
				reduce2(j - 1)
				send3(j - 1)
			}
		}
		if k > 0 {
			reduce2(k - 1)
			send3(k - 1)
		}
	}
	return g.program()
}

func (hierPipeAllreduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	sh := newHierPipeShape(p)
	seg := hierPipeSegment(p)
	seg, _ = hierPipeCut(p.Count, seg, len(sh.groups))
	return sh.lines(p, m).time(p.Count, seg, es, hierPipeRing(p, sh, seg))
}

// Tune sets Params.Segment, if 0, to the segment of the number of pieces
// (1 to hierPipeMaxPieces, at most one per element) that minimises Cost.
func (hierPipeAllreduce) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	if p.Segment != 0 {
		return p
	}
	if idle(p) {
		p.Segment = max(1, p.Count)
		return p
	}
	sh := newHierPipeShape(p)
	hosts := len(sh.groups)
	l := sh.lines(p, m)
	best, bestT := p.Count, math.Inf(1)
	_, limit := hierPipeCut(p.Count, 1, hosts)
	for q := 1; q <= limit; q++ {
		seg, pieces := hierPipeCut(p.Count, ceilDiv(p.Count, q), hosts)
		if pieces != q { // the same cut as a smaller q
			continue
		}
		t := l.time(p.Count, seg, es, hierPipeRing(p, sh, seg))
		if t < bestT*(1-1e-12) {
			best, bestT = seg, t
		}
	}
	p.Segment = best
	return p
}

// hierPipeShape is the grouping of a "hierpipe" call: the groups (hosts of
// the layout, in rank order) and their leaders, the lowest rank of each.
type hierPipeShape struct {
	groups  [][]int
	leaders []int
	model   *hierPipeLines // lines under cost.Default, made on first use
}

func newHierPipeShape(p sched.Params) *hierPipeShape {
	sh := &hierPipeShape{groups: p.Layout.Groups(p.NRanks)}
	for _, g := range sh.groups {
		sh.leaders = append(sh.leaders, g[0])
	}
	return sh
}

func (sh *hierPipeShape) defaults(p sched.Params) *hierPipeLines {
	if sh.model == nil {
		sh.model = sh.lines(p, cost.Default())
	}
	return sh.model
}

// line is α + w·b: the time of messages of b bytes on a class of link.
type line struct{ alpha, w float64 }

// lines is the maximum of several lines at b bytes (0 for none).
type lines []line

func (ls lines) at(b float64) float64 {
	t := 0.0
	for _, l := range ls {
		t = max(t, l.alpha+l.w*b)
	}
	return t
}

// slope is the largest w: the busiest bottleneck per byte, without α.
func (ls lines) slope() float64 {
	w := 0.0
	for _, l := range ls {
		w = max(w, l.w)
	}
	return w
}

// exchangeLines returns exchangeTime(p, m, flows, b) as lines in b: for
// every latency α of a link class used, α plus the busiest bottleneck
// (port, pair link, network link) for the bytes of the messages whose
// α' ≥ α. flows' bytes are per byte of b.
func exchangeLines(p sched.Params, m cost.Model, flows []flow) lines {
	return exchangeRound(p, m, flows, 1)
}

// hierPipeLines holds the per-piece terms of the cost (see
// hierPipeAllreduce) as functions of the piece's bytes b.
type hierPipeLines struct {
	hosts     int
	gamma     float64
	red1      float64 // (L−1)·γ per byte: the busiest leader's stage-1 additions
	c1, c3    lines
	c2        lines // direct exchange among the leaders
	round     lines // one ring round, per byte of the piece (b/H per message)
	allDirect float64
	allRing   float64 // W per byte, with each stage 2
	// serial: a leader's receives and its additions take turns on its
	// thread (cost.Model.Serial within every host).
	serial bool
}

func (sh *hierPipeShape) lines(p sched.Params, m cost.Model) *hierPipeLines {
	hosts := len(sh.groups)
	hl := &hierPipeLines{hosts: hosts, gamma: m.Gamma, serial: m.SelfCopy && onOneHost(p.Layout, sh.groups)}
	var f1, f3, f2, fr, fr2 []flow
	for _, g := range sh.groups {
		hl.red1 = max(hl.red1, float64(len(g)-1)*m.Gamma)
		for _, q := range g[1:] {
			f1 = append(f1, flow{q, g[0], 1})
			f3 = append(f3, flow{g[0], q, 1})
		}
	}
	if hosts > 1 {
		h := float64(hosts)
		for i, a := range sh.leaders {
			for j, b := range sh.leaders {
				if i != j {
					f2 = append(f2, flow{a, b, 1})
				}
			}
			next := sh.leaders[(i+1)%hosts]
			fr = append(fr, flow{a, next, 1 / h})
			fr2 = append(fr2, flow{a, next, 2 * (h - 1) / h})
		}
	}
	hl.c1, hl.c3 = exchangeLines(p, m, f1), exchangeLines(p, m, f3)
	hl.c2, hl.round = exchangeLines(p, m, f2), exchangeLines(p, m, fr)
	both := append(slices.Clone(f1), f3...)
	hl.allDirect = exchangeLines(p, m, append(slices.Clone(both), f2...)).slope()
	hl.allRing = exchangeLines(p, m, append(both, fr2...)).slope()
	return hl
}

// stage returns F(b) and P(b) for pieces of b bytes, k pieces in all.
func (hl *hierPipeLines) stage(b float64, k int, ring bool) (f, period float64) {
	c1, c3, r1 := hl.c1.at(b), hl.c3.at(b), hl.red1*b
	if hl.hosts == 1 {
		if hl.serial {
			return c1 + r1 + c3, max(c1+r1, c3, hl.allDirect*b)
		}
		return c1 + r1 + c3, max(c1, c3, r1, hl.allDirect*b)
	}
	h := float64(hl.hosts)
	if ring {
		t2 := 2*(h-1)*hl.round.at(b) + (h-1)*b/h*hl.gamma
		return c1 + r1 + t2 + c3, max(c1, c3, r1+t2, hl.allRing*b)
	}
	c2, r2 := hl.c2.at(b), (h-1)*b*hl.gamma
	q := 0.0
	if k > 1 {
		q = max(c1, r1)
	}
	return c1 + r1 + max(c2, q) + r2 + c3, max(c1, c2, c3, r1+r2, hl.allDirect*b)
}

// time returns T for count elements of es bytes in pieces of seg elements.
func (hl *hierPipeLines) time(count, seg, es int, ring bool) float64 {
	if count == 0 {
		return 0
	}
	k := ceilDiv(count, seg)
	full, last := bytesOf(seg, es), bytesOf(count-(k-1)*seg, es)
	fs, ps := hl.stage(last, k, ring)
	if k == 1 {
		return fs
	}
	f, pc := hl.stage(full, k, ring)
	return max(float64(k-1)*pc+fs, float64(k-2)*pc+f+ps)
}
