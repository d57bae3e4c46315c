package algo

import "github.com/braid-ccl/braid/sched"

func init() { Register(segRingReduceScatter{segBase{base{"segring", sched.ReduceScatter}}}) }

// segRingReduceScatter is the ring reduce-scatter ("ring") with every block
// cut into segments of at most Params.Segment elements (DefaultSegment when
// 0), each its own message, issued so that the ring is a pipeline (see
// segring.go). Partial sums wait, segment by segment, in two alternating Tmp
// blocks as in "ring"; the last ones are added into Out by Reduce steps.
//
// Cost, for M bytes of output per rank and segments of S bytes:
// (n−1)(α·⌈M/S⌉ + M/β + Mγ), with the reductions overlapping the transfers
// after a pipeline fill of about (n−1)(α + S/β).
type segRingReduceScatter struct{ segBase }

func (segRingReduceScatter) Program(p sched.Params, r int) sched.Program {
	return segRingReduceScatterProgram(p, r, segWindow)
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
