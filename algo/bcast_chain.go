package algo

import (
	"math"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(chainBcast{base{"chain", sched.Bcast}}) }

// chainBcast is the pipelined chain broadcast of Xin, Xie and Li (Computer
// Systems & Applications 2020) §4.2: the ranks form a chain from the root
// (root, root+1, ...), the vector is cut into segments, and every rank
// forwards segment j to its successor as soon as it has it, so that every
// link of the chain carries data at once. Params.Segment sets the segment C
// in elements; 0 means ChainSegment.
//
// Cost, for an M-byte vector on n ≥ 2 ranks in s = ⌈M/C⌉ segments of C
// bytes (Xin, Xie and Li, Computer Systems & Applications 2020, eq. 5, with
// the segment count made whole):
//
//	T = (s + n − 2)(α + C/β)
//
// the root sends s segments one after another, and the last one reaches the
// end of the chain n − 2 links later. Where C divides M this is the paper's
// (M/C + n − 2)(α + C/β), minimised by C* = sqrt(M·α·β / (n − 2)); Tune
// finds the whole number of elements that minimises T itself, which lies
// next to C*. With n = 2 there is nothing to overlap and one segment is
// best.
type chainBcast struct{ base }

// ChainSegment is the chain broadcast's segment, in elements, when
// Params.Segment is 0: 256 KiB of float32, large enough to amortise α on
// shared memory and small enough to keep n−2 segments of fill cheap.
const ChainSegment = 64 << 10

// maxChainSegments bounds the segment count (and so the tags).
const maxChainSegments = 1 << 16

// chainSegments returns the segment length the chain uses for count
// elements when asked for segment (0: ChainSegment), and the number of
// segments: segments grow where there would be more than maxChainSegments.
func chainSegments(count, segment int) (seg, nseg int) {
	seg = segment
	if seg <= 0 {
		seg = ChainSegment
	}
	seg = max(seg, ceilDiv(count, maxChainSegments))
	return seg, ceilDiv(count, seg)
}

func (chainBcast) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n := p.NRanks
	seg, nseg := chainSegments(p.Count, p.Segment)
	part := func(buf sched.Buf, j int) sched.Chunk {
		off := j * seg
		return span(buf, off, min(seg, p.Count-off))
	}
	next, prev := mod(r+1, n), mod(r-1, n)
	if r == p.Root {
		if n > 1 {
			for j := range nseg {
				g.send(next, j, part(sched.In, j))
			}
		}
		g.copy(whole(sched.In, p.Count), whole(sched.Out, p.Count))
		return g.program()
	}
	last := mod(p.Root-1, n) == r
	// Keep two receives posted so that the predecessor never waits for a
	// buffer, and forward each segment once it is in.
	if nseg > 0 {
		g.recv(prev, 0, part(sched.Out, 0))
	}
	for j := range nseg {
		if j+1 < nseg {
			g.recv(prev, j+1, part(sched.Out, j+1))
		}
		if !last {
			g.send(next, j, part(sched.Out, j))
		}
	}
	return g.program()
}

func (chainBcast) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	return chainCost(m.Flat(p), p.NRanks, p.Count, p.Segment, es)
}

// chainCost is the chain's T for count elements of es bytes on n ≥ 2 ranks
// over link l, with segments as chainSegments makes them.
func chainCost(l cost.Link, n, count, segment, es int) float64 {
	seg, nseg := chainSegments(count, segment)
	return float64(nseg+n-2) * l.Time(bytesOf(min(seg, count), es))
}

// Tune sets Params.Segment, if 0, to the segment that minimises Cost: of
// the segments that cut the vector into s pieces, the shortest,
// ⌈Count/s⌉, is the best, so it searches s (see minimize) with the
// paper's continuous T = (s + n − 2)(α + M/(sβ)) as the lower bound.
func (chainBcast) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	if p.Segment != 0 {
		return p
	}
	if idle(p) {
		p.Segment = max(1, p.Count)
		return p
	}
	l, n, c := m.Flat(p), p.NRanks, p.Count
	mb := bytesOf(c, es)
	f := func(s int) float64 {
		seg := ceilDiv(c, s)
		if ceilDiv(c, seg) != s { // the same segment as a smaller s
			return math.Inf(1)
		}
		return chainCost(l, n, c, seg, es)
	}
	lb := func(s int) float64 { return float64(s+n-2) * l.Time(mb/float64(s)) }
	s := minimize(1, min(c, maxChainSegments), f, lb)
	p.Segment = ceilDiv(c, s)
	return p
}
