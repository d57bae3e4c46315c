package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(segRingAllgather{segBase{base{"segring", sched.Allgather}}}) }

// segRingAllgather is the ring allgather ("ring") with every block cut into
// segments of at most Params.Segment elements (DefaultSegment when 0), each
// its own message, issued so that the ring is a pipeline (see segring.go):
// segment j of a block goes on to r+1 as soon as it has arrived from r−1,
// while the other segments are in flight.
//
// Cost, for M bytes of output on n ranks, with each block (M/n bytes) cut
// into q segments of S bytes:
//
//	T = (n−1)·q·(α + S/β)
//
// Every rank starts with its own block, so every link carries its
// (n−1)·q segments back to back from the start and never waits (nor does
// the window of posted receives hold it up: a receive is posted once the
// one w before it is in, and the link brings them in order). Cutting
// blocks only adds α per segment, so Tune takes one segment per block (the
// cost of "ring"); segments can pay only through what the model leaves
// out, such as caches.
type segRingAllgather struct{ segBase }

func (segRingAllgather) Program(p sched.Params, r int) sched.Program {
	return segRingAllgatherProgram(p, r, segWindow)
}

func (segRingAllgather) Cost(p sched.Params, es int, m cost.Model) float64 {
	return segCost(p, es, m, p.Count, segRingAllgatherTime)
}

// Tune sets Params.Segment, if 0, to the segment that minimises Cost.
func (segRingAllgather) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	return segTune(p, es, m, p.Count, segRingAllgatherTime)
}

func segRingAllgatherTime(l cost.Link, _ float64, n, q, _ int, s float64, _ bool) float64 {
	return float64(n-1) * float64(q) * l.Time(s)
}

func segRingAllgatherProgram(p sched.Params, r, window int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	in := whole(sched.In, c)
	if n == 1 {
		g.copy(in, span(sched.Out, r*c, c))
		return g.program()
	}
	sp := planSegments(c, n, p.Segment, window)
	seg := func(buf sched.Buf, i, j int) sched.Chunk { return sp.segment(buf, mod(i, n)*c, c, j) }
	send := func(s, j, tag int) {
		if s == 0 {
			g.send(mod(r+1, n), tag, sp.segment(sched.In, 0, c, j))
			g.copy(sp.segment(sched.In, 0, c, j), seg(sched.Out, r, j))
			return
		}
		g.send(mod(r+1, n), tag, seg(sched.Out, r-s, j))
	}
	recv := func(s, j, tag int) {
		g.recv(mod(r-1, n), tag, seg(sched.Out, r-s-1, j))
	}
	sp.pipeline(n-1, send, recv)
	return g.program()
}
