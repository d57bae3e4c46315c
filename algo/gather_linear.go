package algo

import "github.com/braid-ccl/braid/sched"

func init() {
	Register(linearGather{base{"linear", sched.Gather}})
	Register(linearScatter{base{"linear", sched.Scatter}})
}

// linearGather has every rank send its block to the root, which receives
// them all at once into their places in Out.
//
// Cost: (n−1)(α + M/(nβ)) at the root, for M bytes of output.
type linearGather struct{ base }

func (linearGather) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	c, in := p.Count, whole(sched.In, p.Count)
	if r != p.Root {
		g.send(p.Root, 0, in)
		return g.program()
	}
	for j := range p.NRanks {
		if j != r {
			g.recv(j, 0, span(sched.Out, j*c, c))
		}
	}
	g.copy(in, span(sched.Out, r*c, c))
	return g.program()
}

// linearScatter has the root send block j of its In to every rank j.
//
// Cost: (n−1)(α + M/(nβ)) at the root, for M bytes of input.
type linearScatter struct{ base }

func (linearScatter) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	c, out := p.Count, whole(sched.Out, p.Count)
	if r != p.Root {
		g.recv(p.Root, 0, out)
		return g.program()
	}
	for j := range p.NRanks {
		if j != r {
			g.send(j, 0, span(sched.In, j*c, c))
		}
	}
	g.copy(span(sched.In, r*c, c), out)
	return g.program()
}
