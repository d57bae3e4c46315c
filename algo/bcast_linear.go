package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(linearBcast{base{"linear", sched.Bcast}}) }

// linearBcast has the root send its vector to every other rank.
//
// Cost: α + (n−1)·M/β: the n−1 sends go to distinct ranks and wait for
// nothing, so their latencies overlap, but their bytes leave the root one
// after another. (Xin, Xie and Li, Computer Systems & Applications 2020,
// eq. 1 charges (n−1)(α + M/β), as if each send waited for the one before.)
// It is "knomial" with k = n.
type linearBcast struct{ base }

func (linearBcast) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	in, out := whole(sched.In, p.Count), whole(sched.Out, p.Count)
	if r != p.Root {
		g.recv(p.Root, 0, out)
		return g.program()
	}
	for j := range p.NRanks {
		if j != p.Root {
			g.send(j, 0, in)
		}
	}
	g.copy(in, out)
	return g.program()
}

func (linearBcast) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	l := m.Flat(p)
	return l.Alpha + float64(p.NRanks-1)*(bytesOf(p.Count, es)/l.Beta+m.Overhead)
}
