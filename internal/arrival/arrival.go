// Package arrival describes process arrival patterns: when each rank
// enters a collective call. It computes the imbalance metrics of
// "Efficient Process Arrival Pattern Aware Collective Communication for
// Deep Learning" (Alizadeh et al., EuroMPI/USA 2022, §2.2, after Faraj,
// Patarasuk and Yuan, IJPP 2008), their node-wide form (§4.3.2) and their
// average over calls (§4.3.1), and draws the random patterns of its
// micro-benchmarks (§6.1) and node-correlated ones like those it measured
// in Horovod (§4.3, DrawNodes). It has no notion of clocks: times are seconds on
// any common time base.
//
// It is shared by the simulator's command (braid sim --imbalance) and is
// meant for the profiler's per-call arrival records.
package arrival

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Imbalance describes one arrival pattern (a_0, ..., a_{n-1}).
type Imbalance struct {
	// N is the number of ranks.
	N int
	// First and Last are the earliest and latest arrivals.
	First, Last float64
	// Mean is the average arrival time ā (Equation 2.2 (a)).
	Mean float64
	// Worst is the worst-case (maximum) imbalance time Ω = max a_i −
	// min a_i (Equation 2.1).
	Worst float64
	// Average is the average-case imbalance time Δ̄, the mean of
	// Δ_i = |a_i − ā| (Equations 2.2 (b) and 2.3).
	Average float64
}

// Measure returns the imbalance of the arrival times a, one per rank. It
// fails for no times or a time that is not finite.
func Measure(a []float64) (Imbalance, error) {
	if len(a) == 0 {
		return Imbalance{}, fmt.Errorf("arrival: no arrival times")
	}
	m := Imbalance{N: len(a), First: math.Inf(1), Last: math.Inf(-1)}
	var sum float64
	for r, t := range a {
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return Imbalance{}, fmt.Errorf("arrival: arrival time %g of rank %d is not finite", t, r)
		}
		m.First, m.Last = min(m.First, t), max(m.Last, t)
		sum += t
	}
	m.Mean = sum / float64(len(a))
	m.Worst = m.Last - m.First
	for _, t := range a {
		m.Average += math.Abs(t - m.Mean)
	}
	m.Average /= float64(len(a))
	return m, nil
}

// Factors are the imbalance times normalised by α, the time to
// communicate the call's message (§2.2): the worst-case (maximum)
// imbalance factor Ω/α and the average-case imbalance factor Δ̄/α. (The
// paper's text writes the worst-case factor as Δ/α; its definition, the
// worst-case imbalance time normalised by α, is Ω/α.)
type Factors struct {
	Worst, Average float64
}

// Factors returns m's imbalance factors for a message time alpha > 0
// seconds.
func (m Imbalance) Factors(alpha float64) (Factors, error) {
	if !(alpha > 0) || math.IsInf(alpha, 0) {
		return Factors{}, fmt.Errorf("arrival: message time α = %g s: want a finite time > 0", alpha)
	}
	return Factors{Worst: m.Worst / alpha, Average: m.Average / alpha}, nil
}

// NodeWide returns the imbalance of the arrivals a within each node,
// host[r] naming rank r's node, averaged over the nodes as the paper's
// node-wide study (§4.3.2) reports it: Worst and Average are the means of
// the nodes' Worst and Average (First, Last and Mean are those of all the
// ranks; N is the number of ranks). A rank alone on its node counts as a
// node with no imbalance.
func NodeWide(a []float64, host []int) (Imbalance, error) {
	if len(host) != len(a) {
		return Imbalance{}, fmt.Errorf("arrival: %d hosts for %d arrival times", len(host), len(a))
	}
	all, err := Measure(a)
	if err != nil {
		return Imbalance{}, err
	}
	byHost := map[int][]float64{}
	var order []int
	for r, h := range host {
		if _, ok := byHost[h]; !ok {
			order = append(order, h)
		}
		byHost[h] = append(byHost[h], a[r])
	}
	var worst, avg float64
	for _, h := range order {
		m, _ := Measure(byHost[h]) // the times were checked above
		worst += m.Worst
		avg += m.Average
	}
	all.Worst = worst / float64(len(order))
	all.Average = avg / float64(len(order))
	return all, nil
}

// MeanFactors returns the average of the factors of several calls, as the
// paper's Tables 1 and 2 average them over the invocations; zero for none.
func MeanFactors(fs []Factors) Factors {
	var m Factors
	if len(fs) == 0 {
		return m
	}
	for _, f := range fs {
		m.Worst += f.Worst
		m.Average += f.Average
	}
	m.Worst /= float64(len(fs))
	m.Average /= float64(len(fs))
	return m
}

// Draw returns n arrival offsets drawn as the paper's micro-benchmarks
// (§6.1) induce them: each rank computes for a random time before the
// call, uniform in [0, mif × alpha], mif the maximum imbalance factor and
// alpha the balanced time of the call. So the pattern's worst-case
// imbalance factor is at most mif (its expectation is mif × (n−1)/(n+1)).
func Draw(rng *rand.Rand, n int, mif, alpha float64) ([]float64, error) {
	switch {
	case n < 1:
		return nil, fmt.Errorf("arrival: %d ranks: need at least 1", n)
	case !(mif >= 0) || math.IsInf(mif, 0):
		return nil, fmt.Errorf("arrival: maximum imbalance factor %g: want a finite number ≥ 0", mif)
	case !(alpha >= 0) || math.IsInf(alpha, 0):
		return nil, fmt.Errorf("arrival: message time α = %g s: want a finite time ≥ 0", alpha)
	}
	a := make([]float64, n)
	for r := range a {
		a[r] = rng.Float64() * mif * alpha
	}
	return a, nil
}

// DrawNodes returns arrival offsets correlated by node, host[r] naming rank
// r's node: each node draws one offset uniform in [0, mif × alpha], which
// its ranks share, and each rank adds its own, uniform in [0, nodeMIF ×
// alpha]. The node offsets are drawn first, in order of the hosts' first
// appearance in host, then the ranks' in rank order.
//
// It models what the PAP-aware collectives paper (§4.3, Tables 1 and 2)
// measured in Horovod: the ranks of one node arrive much closer together
// than the ranks of the cluster. With k ranks on each of H nodes, the
// node-wide worst-case factor tends to nodeMIF × (k−1)/(k+1) and the
// cluster-wide one to mif + nodeMIF as H grows (less for few nodes). With
// mif 0 it is Draw with nodeMIF within each node; with nodeMIF 0 the
// ranks of a node arrive together.
func DrawNodes(rng *rand.Rand, host []int, mif, nodeMIF, alpha float64) ([]float64, error) {
	switch {
	case len(host) < 1:
		return nil, fmt.Errorf("arrival: %d ranks: need at least 1", len(host))
	case !(mif >= 0) || math.IsInf(mif, 0):
		return nil, fmt.Errorf("arrival: maximum imbalance factor %g: want a finite number ≥ 0", mif)
	case !(nodeMIF >= 0) || math.IsInf(nodeMIF, 0):
		return nil, fmt.Errorf("arrival: node-wide maximum imbalance factor %g: want a finite number ≥ 0", nodeMIF)
	case !(alpha >= 0) || math.IsInf(alpha, 0):
		return nil, fmt.Errorf("arrival: message time α = %g s: want a finite time ≥ 0", alpha)
	}
	node := map[int]float64{}
	for _, h := range host {
		if _, ok := node[h]; !ok {
			node[h] = rng.Float64() * mif * alpha
		}
	}
	a := make([]float64, len(host))
	for r, h := range host {
		a[r] = node[h] + rng.Float64()*nodeMIF*alpha
	}
	return a, nil
}
