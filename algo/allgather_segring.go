package algo

import "github.com/braid-ccl/braid/sched"

func init() { Register(segRingAllgather{segBase{base{"segring", sched.Allgather}}}) }

// segRingAllgather is the ring allgather ("ring") with every block cut into
// segments of at most Params.Segment elements (DefaultSegment when 0), each
// its own message, issued so that the ring is a pipeline (see segring.go):
// segment j of a block goes on to r+1 as soon as it has arrived from r−1,
// while the other segments are in flight.
//
// Cost, for M bytes of output and segments of S bytes:
// (n−1)(α·⌈M/(nS)⌉ + M/(nβ)) + a pipeline fill of about (n−1)(α + S/β), which
// for large M gets close to (n−1)M/(nβ) however many ranks forward a block.
type segRingAllgather struct{ segBase }

func (segRingAllgather) Program(p sched.Params, r int) sched.Program {
	return segRingAllgatherProgram(p, r, segWindow)
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
