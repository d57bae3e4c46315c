package algo

import (
	"math"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// Cost is the pipeline of the package comment's tree-packing algorithms:
// T = (s + D − 1)·τ. Without valid trees it is +Inf (Supports fails).
func (a treepack) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	if a.Supports(p) != nil {
		return math.Inf(1)
	}
	sh := newTPShape(p)
	return a.pipeline(p, sh, m.Flat(p), m.Gamma, sh.rounds, es, false, 0)
}

// TreepackOnLinks returns the cost of the tree-packing algorithm of p's
// collective on p where, beside the ranks' ports (m's flat link, as Cost
// has them), the trees' own links bound their rates: tree i moves a piece
// over each of its edges at no more than Weight_i·unit bytes a second.
// The weights of a packing are rates its trees sustain together on the
// links they share (GB/s for a packing of a topology: unit 1e9), so a
// round of the pipeline takes at least max_i c_i/(Weight_i·unit) for c_i
// the bytes of tree i's piece, on top of the port and reduction terms of
// Cost:
//
//	τ = α + max(max_v out(v)/β, max_v in(v)/β, max_v red(v)·γ, max_i c_i/(w_i·unit))
//
// It is what a planner that knows the topology costs the trees with, where
// the ranks' ports are faster than the links between them (GPUs on a
// DGX-1: Blink, MLSys 2020, §2.1). With unit 0 it is Cost. A p whose
// Segment is 0 is first given the segment that minimises this cost, as
// Tune does; the returned params carry it.
func TreepackOnLinks(p sched.Params, es int, m cost.Model, unit float64) (sched.Params, float64) {
	a, ok := Treepack(p.Coll).(treepack)
	if !ok || a.Supports(p) != nil {
		return p, math.Inf(1)
	}
	p = a.tune(p, es, m, unit)
	if idle(p) {
		return p, 0
	}
	sh := newTPShape(p)
	return p, a.pipeline(p, sh, m.Flat(p), m.Gamma, sh.rounds, es, false, unit)
}

// pipeline returns (rounds + D − 1)·τ for tree shapes sh cut into rounds
// pieces per tree; with exact false the pieces are the longest ones
// (⌈range/rounds⌉, as Program cuts them), with exact true they are
// range/rounds, which bounds the cost from below for Tune. With unit
// above 0, every tree's piece also takes its bytes over the tree's weight
// times unit (TreepackOnLinks).
func (a treepack) pipeline(p sched.Params, sh *tpShape, l cost.Link, gamma float64, rounds, es int, exact bool, unit float64) float64 {
	n := p.NRanks
	piece := make([]float64, len(sh.trees))
	depth := 0
	for i, tt := range sh.trees {
		ln := sh.ranges[i][1] - sh.ranges[i][0]
		if exact {
			piece[i] = bytesOf(ln, es) / float64(rounds)
		} else {
			piece[i] = bytesOf(ceilDiv(ln, rounds), es)
		}
		depth = max(depth, tt.top)
	}
	links := 0.0
	if unit > 0 {
		for i, tt := range sh.trees {
			links = max(links, piece[i]/(tt.t.Weight*unit))
		}
	}
	if p.Coll == sched.Allreduce {
		depth *= 2
	}
	worst := 0.0
	for v := range n {
		var out, in, red float64
		for i, tt := range sh.trees {
			c, kids := piece[i], float64(len(tt.kids[v]))
			up := 0.0
			if v != tt.t.Root {
				up = c
			}
			switch p.Coll {
			case sched.Bcast:
				out += kids * c
				in += up
			case sched.Reduce:
				out += up
				in += kids * c
				red += kids * c
			default:
				out += up + kids*c
				in += up + kids*c
				red += kids * c
			}
		}
		worst = max(worst, out/l.Beta, in/l.Beta, red*gamma)
	}
	return float64(rounds+depth-1) * (l.Alpha + max(worst, links))
}

// Tune sets Params.Segment, if 0, to the segment that minimises Cost: of
// the segments that cut the longest range into s pieces, the shortest,
// ⌈L/s⌉, is the best, so it searches s (see minimize), bounding the cost
// from below by pieces of exactly range/s.
func (a treepack) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	return a.tune(p, es, m, 0)
}

// tune is Tune for the cost with the trees' links (TreepackOnLinks) when
// unit is above 0.
func (a treepack) tune(p sched.Params, es int, m cost.Model, unit float64) sched.Params {
	if p.Segment != 0 || a.Supports(p) != nil {
		return p
	}
	if idle(p) {
		p.Segment = max(1, p.Count)
		return p
	}
	sh := newTPShape(p)
	maxLen := 0
	for _, r := range sh.ranges {
		maxLen = max(maxLen, r[1]-r[0])
	}
	l := m.Flat(p)
	hi := treepackRounds(maxLen, 1, len(sh.trees))
	f := func(s int) float64 {
		seg := ceilDiv(maxLen, s)
		if ceilDiv(maxLen, seg) != s { // the same segment as a smaller s
			return math.Inf(1)
		}
		return a.pipeline(p, sh, l, m.Gamma, s, es, false, unit)
	}
	lb := func(s int) float64 { return a.pipeline(p, sh, l, m.Gamma, s, es, true, unit) }
	s := minimize(1, hi, f, lb)
	p.Segment = ceilDiv(maxLen, s)
	return p
}
