package pack

import (
	"cmp"
	"math"
	"slices"
)

// minimise looks for a packing of fewer than kmax trees whose rate is
// within theta of opt (normalised units), using only the columns js. It
// gives every tree a weight that is a whole multiple of a quantum q and
// solves the integer program "as many quanta as the capacities allow"
// over the columns by branch and bound (Blink §3.2.1, where the quantum is
// one link's bandwidth), relaxing the quantum step by step from coarse to
// fine: q = opt/k (k equal trees) and q = c/k for each capacity c of a
// saturated resource, for k = 1, 2, ... while opt/q < kmax. It stops at
// the first quantum whose integer program reaches (1-theta)·opt; such a
// packing has at most opt/q trees. It returns the quanta by column
// (indexed like p.cols) and the quantum, or nil.
func (p *packer) minimise(js []int, opt, theta float64, kmax, nodeBudget int, price []float64) ([]int, float64) {
	A, cap, rows := p.master()
	for i := range A {
		r := make([]float64, len(js))
		for k, j := range js {
			r[k] = A[i][j]
		}
		A[i] = r
	}
	var quanta []float64
	for k := 1; k < kmax; k++ {
		quanta = append(quanta, opt/float64(k))
	}
	for i, r := range rows {
		if price[r] > 1e-9 {
			for k := 1; opt*float64(k)/cap[i] < float64(kmax); k++ {
				quanta = append(quanta, cap[i]/float64(k))
			}
		}
	}
	slices.SortFunc(quanta, func(a, b float64) int { return cmp.Compare(b, a) })
	quanta = slices.CompactFunc(quanta, func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*a })
	for _, q := range quanta {
		if p.stats.Nodes >= nodeBudget {
			break
		}
		target := int(math.Ceil((1-theta)*opt/q - 1e-9))
		if float64(target)*q > opt*(1+1e-9) {
			continue // more than the optimum
		}
		if float64(target)*q >= opt*(1-1e-9) && !commensurable(rows, cap, price, q) {
			continue
		}
		b := make([]float64, len(cap))
		for i, c := range cap {
			b[i] = math.Floor(c/q + 1e-7)
		}
		bb := branchAndBound{A: A, b: b, budget: min(nodeBudget-p.stats.Nodes, perQuantum), target: target}
		n := bb.solve()
		p.stats.Nodes += bb.nodes
		if n != nil && sum(n) >= target {
			p.stats.Quantum = q * p.scale
			out := make([]int, len(p.cols))
			for k, j := range js {
				out[j] = n[k]
			}
			return out, q
		}
	}
	return nil, 0
}

// commensurable reports whether every resource with a positive optimal
// price has a capacity that is a whole number of quanta q. A packing at the
// optimum saturates every such resource (complementary slackness), and a
// packing of whole quanta loads each resource by a whole number of quanta,
// so when this fails no packing of k = opt/q equal trees exists and the
// search for one can be skipped.
func commensurable(rows []int, cap, price []float64, q float64) bool {
	for i, r := range rows {
		if price[r] > 1e-9 {
			if f := cap[i] / q; math.Abs(f-math.Round(f)) > 1e-6 {
				return false
			}
		}
	}
	return true
}

// perQuantum caps the branch-and-bound nodes spent on one quantum: when
// the capacities are not near multiples of the quantum (PCIe beside
// NVLink), no small number of equal trees reaches the optimum, and a
// search that has not found one quickly rarely does.
const perQuantum = 25

func sum(n []int) int {
	s := 0
	for _, v := range n {
		s += v
	}
	return s
}

// branchAndBound maximises Σ n subject to A n ≤ b over non-negative
// integers n, for a non-negative A and integral b ≥ 0, by depth-first
// branch and bound on the LP relaxation, exploring the rounded-up branch
// first. It gives up after budget nodes and returns the best solution
// found; it stops early at a solution of value target or more that meets
// the relaxation's bound.
type branchAndBound struct {
	A      [][]float64
	b      []float64
	budget int
	target int
	nodes  int
	best   []int
	bestV  int
	bound  int
}

func (s *branchAndBound) solve() []int {
	n := 0
	if len(s.A) > 0 {
		n = len(s.A[0])
	}
	s.bestV = -1
	lo := make([]int, n)
	hi := make([]int, n)
	for j := range hi {
		hi[j] = -1
	}
	s.bound = -1
	s.node(lo, hi)
	return s.best
}

// done reports whether the search can stop: the best solution meets both
// the target and the root relaxation's bound, or the budget is spent.
func (s *branchAndBound) done() bool {
	return s.nodes >= s.budget || s.bestV >= s.target && s.bestV >= s.bound
}

func (s *branchAndBound) node(lo, hi []int) {
	if s.done() {
		return
	}
	s.nodes++
	m, n := len(s.b), len(lo)
	// Residual capacities after the lower bounds.
	res := slices.Clone(s.b)
	fixed := 0
	for j, l := range lo {
		if l == 0 {
			continue
		}
		fixed += l
		for i := range m {
			res[i] -= s.A[i][j] * float64(l)
		}
	}
	for i := range m {
		if res[i] < -1e-9 {
			return
		}
		res[i] = max(res[i], 0)
	}
	// Free columns and their upper-bound rows.
	var free []int
	for j := range n {
		if hi[j] < 0 || hi[j] > lo[j] {
			free = append(free, j)
		}
	}
	A := make([][]float64, 0, m+len(free))
	b := make([]float64, 0, m+len(free))
	for i := range m {
		r := make([]float64, len(free))
		for k, j := range free {
			r[k] = s.A[i][j]
		}
		A = append(A, r)
		b = append(b, res[i])
	}
	for k, j := range free {
		if hi[j] >= 0 {
			r := make([]float64, len(free))
			r[k] = 1
			A = append(A, r)
			b = append(b, float64(hi[j]-lo[j]))
		}
	}
	c := make([]float64, len(free))
	for k := range c {
		c[k] = 1
	}
	z, val, _, err := lpMax(A, b, c)
	if err != nil {
		return
	}
	ub := fixed + int(math.Floor(val+1e-7))
	if s.bound < 0 {
		s.bound = ub
	}
	if ub <= s.bestV {
		return
	}
	x := slices.Clone(lo)
	frac := make([]float64, n)
	branch, bestF := -1, 0.0
	for k, j := range free {
		v := float64(lo[j]) + z[k]
		x[j] = int(math.Floor(v + 1e-7))
		frac[j] = v - float64(x[j])
		if frac[j] > 1e-6 && frac[j] > bestF {
			branch, bestF = j, frac[j]
		}
	}
	// Rounding heuristic: round down, then add whole trees greedily,
	// the most fractional first, while they fit.
	cand := slices.Clone(x)
	left := slices.Clone(s.b)
	for j, v := range cand {
		for i := range m {
			left[i] -= s.A[i][j] * float64(v)
		}
	}
	order := make([]int, n)
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case frac[a] > frac[b]:
			return -1
		case frac[a] < frac[b]:
			return 1
		}
		return 0
	})
	for _, j := range order {
		if hi[j] >= 0 && cand[j] >= hi[j] {
			continue
		}
		fits := true
		for i := range m {
			if s.A[i][j] > left[i]+1e-9 {
				fits = false
				break
			}
		}
		if fits {
			cand[j]++
			for i := range m {
				left[i] -= s.A[i][j]
			}
		}
	}
	if v := sum(cand); v > s.bestV {
		s.best, s.bestV = cand, v
	}
	if branch < 0 || ub <= s.bestV {
		return
	}
	up := slices.Clone(lo)
	up[branch] = x[branch] + 1
	s.node(up, hi)
	down := slices.Clone(hi)
	down[branch] = x[branch]
	s.node(lo, down)
}
