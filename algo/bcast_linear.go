package algo

import "github.com/braid-ccl/braid/sched"

func init() { Register(linearBcast{base{"linear", sched.Bcast}}) }

// linearBcast has the root send its vector to every other rank.
//
// Cost: (n−1)(α + M/β) at the root.
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
