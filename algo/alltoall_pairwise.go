package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(pairwiseAlltoall{base{"pairwise", sched.Alltoall}}) }

// pairwiseAlltoall is the pairwise exchange (Thakur et al. 2005, §4.6): in
// round i rank r sends block r+i of In to rank r+i and receives block r−i of
// Out from rank r−i, for i = 1 … n−1.
//
// The rounds run in the order 1, n−1, 2, n−2, … so that the program is right
// when In is Out: round i receives into Tmp, because block r−i of In has not
// been sent yet; round n−i sends it and receives block r+i straight into
// Out, whose In block left in round i; then the Tmp block is copied to its
// place. With n even, round n/2 exchanges with one peer through Tmp. Tmp
// holds two blocks, used alternately by successive pairs of rounds.
//
// Cost: (n−1)(α + M/(nβ)) for M bytes per rank (the ⌊n/2⌋ local block
// copies cost nothing in the model). The rounds run one after another:
// round n−i's receive waits for round i's send (in place, it overwrites
// the block that send reads), and the copy that ends a pair holds the
// executor until the pair's messages are done.
type pairwiseAlltoall struct{ base }

func (pairwiseAlltoall) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	blk := func(buf sched.Buf, i int) sched.Chunk { return span(buf, mod(i, n)*c, c) }
	g.copy(blk(sched.In, r), blk(sched.Out, r))
	pair := 0
	for i := 1; 2*i < n; i++ {
		j := n - i
		t := span(sched.Tmp, pair%2*c, c)
		g.send(mod(r+i, n), i, blk(sched.In, r+i))
		g.recv(mod(r-i, n), i, t)
		g.send(mod(r+j, n), j, blk(sched.In, r+j))
		g.recv(mod(r-j, n), j, blk(sched.Out, r-j))
		g.copy(t, blk(sched.Out, r-i))
		pair++
	}
	if n%2 == 0 && n > 1 {
		i := n / 2
		t := span(sched.Tmp, pair%2*c, c)
		g.send(mod(r+i, n), i, blk(sched.In, r+i))
		g.recv(mod(r-i, n), i, t)
		g.copy(t, blk(sched.Out, r-i))
	}
	return g.program()
}

func (pairwiseAlltoall) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	return float64(p.NRanks-1) * m.Flat(p).Time(bytesOf(p.Count, es))
}
