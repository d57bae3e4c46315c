package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(directAllgatherAlgo{base{"direct", sched.Allgather}}) }

// directAllgatherAlgo is the one-step allgather: every rank sends its block
// to every other rank (starting with the next one, so that no rank is hit
// by all senders at once) and receives theirs straight into place. One
// round of latency instead of the ring's n−1; over shared memory, large
// blocks go by single copy.
//
// Cost, for M bytes of output on n ranks of one host joined by (α, β):
//
//	T = α + (n−1)·M/(nβ)
//
// (the messages a rank exchanges with distinct peers go at once, through
// its port). On several hosts the transfer term is the largest of a rank's
// bytes through its port, a pair's over its link and a host's over its
// network link, which all its ranks share (exchangeTime).
type directAllgatherAlgo struct{ base }

func (directAllgatherAlgo) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	parts := make([]part, n)
	for j := range parts {
		parts[j] = part{owner: j, src: whole(sched.In, c), dst: span(sched.Out, j*c, c)}
	}
	directAllgather(g, allRanks(n)[0], r, parts, 0)
	return g.program()
}

func (directAllgatherAlgo) Cost(p sched.Params, es int, m cost.Model) float64 {
	if p.NRanks == 1 || p.Count == 0 {
		return 0
	}
	return exchangeTime(p, m, allToAll(p.NRanks, float64(p.Count*es)), 1)
}
