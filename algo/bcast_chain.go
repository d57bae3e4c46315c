package algo

import "github.com/braid-ccl/braid/sched"

func init() { Register(chainBcast{base{"chain", sched.Bcast}}) }

// chainBcast is the pipelined chain broadcast of seed 003 §3: the ranks
// form a chain from the root (root, root+1, ...), the vector is cut into
// segments, and every rank forwards segment j to its successor as soon as
// it has it, so that every link of the chain carries data at once.
//
// Cost, for segments of C bytes of an M-byte vector on n ranks:
// T = (M/C + n − 2)(α + C/β), minimised by C* = sqrt(M·α·β / (n − 2)).
// Params.Segment sets C in elements; 0 means ChainSegment.
type chainBcast struct{ base }

// ChainSegment is the chain broadcast's segment, in elements, when
// Params.Segment is 0: 256 KiB of float32, large enough to amortise α on
// shared memory and small enough to keep n−2 segments of fill cheap.
const ChainSegment = 64 << 10

// maxChainSegments bounds the segment count (and so the tags).
const maxChainSegments = 1 << 16

func (chainBcast) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n := p.NRanks
	seg := p.Segment
	if seg <= 0 {
		seg = ChainSegment
	}
	if p.Count > seg*maxChainSegments {
		seg = (p.Count + maxChainSegments - 1) / maxChainSegments
	}
	nseg := (p.Count + seg - 1) / seg
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
