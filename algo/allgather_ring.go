package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(ringAllgather{base{"ring", sched.Allgather}}) }

// ringAllgather passes blocks around the ring: in step s rank r sends block
// r−s to r+1 and receives block r−s−1 from r−1.
//
// Cost: (n−1)(α + M/(nβ)) for M bytes of output.
type ringAllgather struct{ base }

func (ringAllgather) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	blk := func(i int) sched.Chunk { return span(sched.Out, mod(i, n)*c, c) }
	in := whole(sched.In, c)
	for s := range n - 1 {
		src := blk(r - s)
		if s == 0 {
			src = in
		}
		g.send(mod(r+1, n), s, src)
		if s == 0 {
			g.copy(in, blk(r))
		}
		g.recv(mod(r-1, n), s, blk(r-s-1))
	}
	if n == 1 {
		g.copy(in, blk(r))
	}
	return g.program()
}

func (ringAllgather) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	return float64(p.NRanks-1) * m.Flat(p).Time(bytesOf(p.Count, es))
}
