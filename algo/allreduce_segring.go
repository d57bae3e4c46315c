package algo

import "github.com/braid-ccl/braid/sched"

func init() { Register(segRingAllreduce{segBase{base{"segring", sched.Allreduce}}}) }

// segRingAllreduce is the ring allreduce ("ring") with every block cut into
// segments of at most Params.Segment elements (DefaultSegment when 0), each
// its own message, issued so that the ring is a pipeline (see segring.go):
// segment j of a step goes on as soon as segment j of the step before has
// been received and reduced, while the other segments are in flight. As in
// "ring", each sum is computed once, by the rank that ends up holding it, in
// ring order, so every rank gets the same bits (and the same bits as "ring").
//
// Cost, for M bytes, n ranks and segments of S bytes:
// 2(n−1)(α·⌈M/(nS)⌉ + M/(nβ)) + (n−1)M/n·γ, plus a pipeline fill of about
// 2(n−1)(α + S/β) that the reduction overlaps; against "ring" it pays
// ⌈M/(nS)⌉ times the latency for reductions that overlap the transfers and
// staging that stays in cache.
type segRingAllreduce struct{ segBase }

func (segRingAllreduce) Program(p sched.Params, r int) sched.Program {
	return segRingAllreduceProgram(p, r, segWindow)
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
