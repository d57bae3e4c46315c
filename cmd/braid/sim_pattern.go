package main

import (
	"math"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
)

// patternRunner times a pattern algorithm (algo.PatternAlgorithm: a
// schedule built for the times at which the ranks arrive): balanced, for
// every rank arriving at once; under an arrival pattern, for that pattern,
// which is what a dynamic algorithm such as Patarasuk and Yuan's broadcast
// learns at run time, and what the pre-reduced ring would predict with a
// perfect estimate. With stale set ("prr:stale"), each pattern runs the
// schedule built for the previous pattern (the first for a balanced
// call): a prediction from the last call, the best an online estimation
// such as Proficz's could do when calls do not repeat their pattern. The
// algorithm's model of the machine (algo.MsgTime) is the simulated
// network's: each route's latency and narrowest link.
type patternRunner struct {
	a         algo.PatternAlgorithm
	p         sched.Params
	stale     bool
	pipelined bool
}

func newPatternRunner(a algo.PatternAlgorithm, p sched.Params, stale bool) (runner, error) {
	if err := a.Supports(p); err != nil {
		return nil, err
	}
	if tu, ok := a.(algo.Tuner); ok {
		p = tu.Tune(p, 4, cost.Default())
	}
	return &patternRunner{a: a, p: p, stale: stale, pipelined: p.Segment != 0 && p.Count > 0}, nil
}

func (pr *patternRunner) pick(net *sim.Network, cfg sim.Config, segment, count int) (picked, error) {
	msg := msgTime(net, cfg)
	n := pr.p.NRanks
	balanced := make([]float64, n)
	desc := "arrival times"
	if pr.stale {
		desc = "last call's times"
	}
	q := pr.p
	s := &schedule{pipelined: pr.pipelined, make: func(seg int) (sched.Params, []sched.Program, string, error) {
		q = pr.p
		if pr.pipelined {
			q.Segment = seg
		}
		return q, pr.a.PatternPrograms(q, balanced, msg), desc, nil
	}}
	pk, err := s.pick(net, cfg, segment, count)
	if err != nil {
		return picked{}, err
	}
	// pick ran the chosen segment last, so q is its Params.
	chosen := q
	prev := balanced
	pk.again = func(c sim.Config) (*sim.Result, error) {
		est := c.Start
		if len(est) != n {
			est = balanced
		}
		use := est
		if pr.stale {
			use, prev = prev, est
		}
		return simulate(net, c, chosen, pr.a.PatternPrograms(chosen, use, msg))
	}
	return pk, nil
}

// msgTime returns the time of one message of count elements between two
// ranks of net alone on it: its route's latency plus cfg.StepOverhead,
// plus its bytes over the route's narrowest link.
func msgTime(net *sim.Network, cfg sim.Config) algo.MsgTime {
	n := net.NRanks()
	es := cfg.ElemSize
	if es == 0 {
		es = 4
	}
	lat := make([]float64, n*n)
	bw := make([]float64, n*n)
	for a := range n {
		for b := range n {
			if a == b {
				bw[a*n+b] = math.Inf(1)
				continue
			}
			ids, err := net.Route(a, b, 0)
			if err != nil {
				lat[a*n+b] = math.Inf(1) // no route: never worth it
				continue
			}
			l, w := cfg.StepOverhead, math.Inf(1)
			for _, id := range ids {
				lk := net.Link(id)
				l += lk.Latency
				w = min(w, lk.Bandwidth)
			}
			lat[a*n+b], bw[a*n+b] = l, w
		}
	}
	return func(from, to, count int) float64 {
		return lat[from*n+to] + float64(count*es)/bw[from*n+to]
	}
}
