package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() {
	Register(linearGather{base{"linear", sched.Gather}})
	Register(linearScatter{base{"linear", sched.Scatter}})
}

// linearGather has every rank send its block to the root, which receives
// them all at once into their places in Out.
//
// Cost: α + (n−1)·M/(nβ) for M bytes of output: the root's receives are
// from distinct ranks into distinct places and wait for nothing, so their
// latencies overlap, but their bytes arrive one after another.
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
// Cost: α + (n−1)·M/(nβ) for M bytes of input, as for linearGather.
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

func (linearGather) Cost(p sched.Params, es int, m cost.Model) float64 {
	return linearRootCost(p, es, m)
}

func (linearScatter) Cost(p sched.Params, es int, m cost.Model) float64 {
	return linearRootCost(p, es, m)
}

// linearRootCost is α + (n−1)·M/(nβ), M/n = Count·es.
func linearRootCost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	l := m.Flat(p)
	return l.Alpha + float64(p.NRanks-1)*(bytesOf(p.Count, es)/l.Beta+m.Overhead)
}
