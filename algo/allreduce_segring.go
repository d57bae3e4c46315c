package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(segRingAllreduce{segBase{base{"segring", sched.Allreduce}}}) }

// segRingAllreduce is the ring allreduce ("ring") with every block cut into
// segments of at most Params.Segment elements (DefaultSegment when 0), each
// its own message, issued so that the ring is a pipeline (see segring.go):
// segment j of a step goes on as soon as segment j of the step before has
// been received and reduced, while the other segments are in flight. As in
// "ring", each sum is computed once, by the rank that ends up holding it, in
// ring order, so every rank gets the same bits (and the same bits as "ring").
//
// Cost, for M bytes on n ranks, with the largest block (⌈Count/n⌉
// elements, M/n bytes when n divides Count) cut into q segments of S
// bytes, c = α + S/β the time of one segment over a link, N = (n−1)·q the
// segments each link carries in each half, and w ≤ q the segments whose
// receives a rank posts ahead (the window that bounds the staging memory;
// see above):
//
//	T = max(2N·c, c + N·S·γ + ((n−2)·q + 1)·c, P(N + w) + (N − w)·c)
//	P(k) = ⌊(k−1)/w⌋·(c + S·γ) + ((k−1) mod w + 1)·c
//
// Each term is the time when one resource limits, and exact then: the link,
// which carries 2N segments one after another; the rank's processor, which
// adds the N segments of the reduce-scatter one after another from the
// arrival of the first, after which the link still has the last
// (n−2)·q + 1 segments of the allgather to carry; and the window: a
// segment goes on only once it has been received and added, and a receive
// is posted only once the one w before it is in, so that P(k) is the time
// of k segments paced by that, which the first w segments of the allgather
// still are. When S·γ ≤ c and (w−1)·c ≥ S·γ the additions hide behind the
// transfers and T = 2N·c. With q = 1 this is "ring"'s cost. More segments
// hide more of the additions but pay α each; Tune takes the q that
// minimises T. The model has no caches, so it does not see the other gain
// of small segments, staging that stays in cache.
//
// Over shared memory (cost.Model.Serial) nothing hides: the rank's own
// thread copies every segment it sends into the receiver's ring and every
// one it receives out of it (or out of the sender's memory), then adds it,
// so T is at least 2N·c + N·S·γ, the ring's cost plus an α per extra
// segment. On the 16-core node, 2 ranks, the segmented ring took 15.7 µs
// for 64 KiB and 52 for 256 KiB, which the overlapped T put at 12.2 and
// 36.8 (session 16); at 4 to 16 ranks its allreduces of 4 KiB–16 MiB took
// 1.2–6.2 times T (median 1.8).
type segRingAllreduce struct{ segBase }

func (segRingAllreduce) Program(p sched.Params, r int) sched.Program {
	return segRingAllreduceProgram(p, r, segWindow)
}

func (segRingAllreduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	return segCost(p, es, m, ceilDiv(p.Count, p.NRanks), segRingAllreduceTime)
}

// Tune sets Params.Segment, if 0, to the segment that minimises Cost.
func (segRingAllreduce) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	return segTune(p, es, m, ceilDiv(p.Count, p.NRanks), segRingAllreduceTime)
}

func segRingAllreduceTime(l cost.Link, gamma float64, n, q, w int, s float64, serial bool) float64 {
	c, k, r := l.Time(s), (n-1)*q, s*gamma
	t := max(2*float64(k)*c,
		c+float64(k)*r+float64((n-2)*q+1)*c,
		paced(k+w, w, c, r)+float64(k-w)*c)
	if serial {
		t = max(t, 2*float64(k)*c+float64(k)*r)
	}
	return t
}

func segRingAllreduceProgram(p sched.Params, r, window int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	if n == 1 {
		g.copy(whole(sched.In, c), whole(sched.Out, c))
		return g.program()
	}
	sp := planSegments((c+n-1)/n, n, p.Segment, window)
	seg := func(buf sched.Buf, i, j int) sched.Chunk {
		i = mod(i, n)
		off := blockOff(c, n, i)
		return sp.segment(buf, off, blockOff(c, n, i+1)-off, j)
	}
	next, prev := mod(r+1, n), mod(r-1, n)
	// Steps 0 to n−2 are the reduce-scatter, after which rank r holds the
	// sum of block r+1; steps n−1 to 2n−3 the allgather of the sums.
	send := func(s, j, tag int) {
		switch {
		case s == 0:
			g.send(next, tag, seg(sched.In, r, j))
		case s < n-1:
			g.send(next, tag, seg(sched.Out, r-s, j))
		default:
			g.send(next, tag, seg(sched.Out, r+1-(s-(n-1)), j))
		}
	}
	recv := func(s, j, tag int) {
		if s < n-1 {
			g.copy(seg(sched.In, r-s-1, j), seg(sched.Out, r-s-1, j))
			g.recvReduce(prev, tag, seg(sched.Out, r-s-1, j))
			return
		}
		g.recv(prev, tag, seg(sched.Out, r-(s-(n-1)), j))
	}
	sp.pipeline(2*(n-1), send, recv)
	return g.program()
}
