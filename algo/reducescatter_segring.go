package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(segRingReduceScatter{segBase{base{"segring", sched.ReduceScatter}}}) }

// segRingReduceScatter is the ring reduce-scatter ("ring") with every block
// cut into segments of at most Params.Segment elements (DefaultSegment when
// 0), each its own message, issued so that the ring is a pipeline (see
// segring.go). Partial sums wait, segment by segment, in two alternating Tmp
// blocks as in "ring"; the last ones are added into Out by Reduce steps.
//
// Cost, for M bytes of output per rank (the block) on n ranks, cut into q
// segments of S bytes, c = α + S/β the time of one segment over a link,
// N = (n−1)·q the segments each link carries, and w ≤ q the segments whose
// receives a rank posts ahead:
//
//	T = max(N·c + S·γ, c + N·S·γ, P(N) + S·γ)
//	P(k) = ⌊(k−1)/w⌋·(c + S·γ) + ((k−1) mod w + 1)·c
//
// Each term is the time when one resource limits, and exact then (see
// "segring" allreduce): the link, carrying N segments before the last is
// added; the rank's processor, adding N segments one after another; and
// the window, under which P(k) is the time of k segments when each is
// received only once the one w before it is in and added. When S·γ ≤ c
// and (w−1)·c ≥ S·γ the additions hide behind the transfers and
// T = N·c + S·γ. With q = 1 this is "ring"'s cost; Tune takes the q that
// minimises T. Over shared memory (cost.Model.Serial) the rank's own
// thread copies the segments and adds them, one after the other, so T is
// at least N·(c + S·γ) (see "segring" allreduce): on the 16-core node, 2
// ranks, it took 9.3 µs for 64 KiB and 36 for 256 KiB, which the
// overlapped T put at 7.7 and 24.2 (session 16). Memory traffic (Mover) is the ring's, 3(n−1)·M, with the
// segments of at most cost.Model.Eager bytes copied once more by their
// senders.
type segRingReduceScatter struct{ segBase }

func (segRingReduceScatter) Program(p sched.Params, r int) sched.Program {
	return segRingReduceScatterProgram(p, r, segWindow)
}

func (segRingReduceScatter) Cost(p sched.Params, es int, m cost.Model) float64 {
	return segCost(p, es, m, p.Count, segRingReduceScatterTime)
}

// Tune sets Params.Segment, if 0, to the segment that minimises Cost.
func (segRingReduceScatter) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	return segTune(p, es, m, p.Count, segRingReduceScatterTime)
}

// Moved implements Mover.
func (segRingReduceScatter) Moved(p sched.Params, es int, m cost.Model) float64 {
	n, mb := p.NRanks, bytesOf(p.Count, es)
	if n == 1 || p.Count == 0 {
		return mb
	}
	sp := planSegments(p.Count, n, p.Segment, segWindow)
	return float64(n-1) * (3*mb + eagerBytes(p.Count, sp.seg, es, m.Eager))
}

func segRingReduceScatterTime(l cost.Link, gamma float64, n, q, w int, s float64, serial bool) float64 {
	c, k, r := l.Time(s), (n-1)*q, s*gamma
	t := max(float64(k)*c+r, c+float64(k)*r, paced(k, w, c, r)+r)
	if serial {
		t = max(t, float64(k)*(c+r))
	}
	return t
}

func segRingReduceScatterProgram(p sched.Params, r, window int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	out := whole(sched.Out, c)
	if n == 1 {
		g.copy(span(sched.In, r*c, c), out)
		return g.program()
	}
	sp := planSegments(c, n, p.Segment, window)
	seg := func(buf sched.Buf, off, j int) sched.Chunk { return sp.segment(buf, off, c, j) }
	blk := func(i int) int { return mod(i, n) * c }
	slot := func(s int) int { return s % 2 * c }
	// The pipeline has n steps: in steps 0 to n−2 rank r receives and adds
	// as in "ring", except that the last partial sums are received into Tmp
	// like the others; "step n−1" adds them to rank r's own block in Out,
	// in the order a RecvReduce would. Since each of those Reduces waits for
	// its receive, the receives of the last ring step are posted a window at
	// a time like the others, not all at once.
	send := func(s, j, tag int) {
		switch s {
		case 0:
			g.send(mod(r+1, n), tag, seg(sched.In, blk(r-1), j))
		case n - 1:
			g.reduce(seg(sched.Tmp, slot(s-1), j), seg(sched.Out, 0, j))
		default:
			g.send(mod(r+1, n), tag, seg(sched.Tmp, slot(s-1), j))
		}
	}
	recv := func(s, j, tag int) {
		switch {
		case s < n-2:
			dst := seg(sched.Tmp, slot(s), j)
			g.copy(seg(sched.In, blk(r-s-2), j), dst)
			g.recvReduce(mod(r-1, n), tag, dst)
		case s == n-2:
			g.copy(seg(sched.In, blk(r), j), seg(sched.Out, 0, j))
			g.recv(mod(r-1, n), tag, seg(sched.Tmp, slot(s), j))
		}
	}
	sp.pipeline(n, send, recv)
	return g.program()
}
