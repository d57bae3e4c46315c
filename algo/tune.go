package algo

import (
	"math"

	"github.com/braid-ccl/braid/sched"
)

// Helpers shared by the algorithms' Cost and Tune methods (see Coster,
// Tuner and the cost model in the package documentation).

// bytesOf returns count elements of es bytes as a float64.
func bytesOf(count, es int) float64 { return float64(count) * float64(es) }

// idle reports whether p moves no data: one rank, or no elements. Such a
// call costs nothing in the model (its programs send nothing, or only
// empty messages that gen leaves out).
func idle(p sched.Params) bool { return p.NRanks == 1 || p.Count == 0 }

// ceilLog2 returns ⌈log2 n⌉ for n ≥ 1: the rounds of a binomial tree or of
// recursive doubling on n ranks.
func ceilLog2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	return l
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int) int { return (a + b - 1) / b }

// minimize returns the s in [lo, hi] (lo ≤ hi) with the least f(s), the
// smallest such s on ties. lb must be convex on [lo, hi] and a lower bound
// of f there (f may be +Inf where s is not a candidate). It evaluates f
// only where lb is below the best f found, going out from lb's minimum, so
// it is exact and visits few points when lb is tight.
func minimize(lo, hi int, f, lb func(s int) float64) int {
	a, b := lo, hi
	for a < b { // the integer argmin of the convex lb
		mid := a + (b-a)/2
		if lb(mid+1) < lb(mid) {
			a = mid + 1
		} else {
			b = mid
		}
	}
	// Figures within a relative 1e-12 of each other are ties: rounding
	// must not choose among segmentations the model cannot tell apart.
	const eps = 1e-12
	best, arg := f(a), a
	// Beyond lb's minimum lb only grows, so the first point where it
	// reaches best ends each direction.
	for s := a + 1; s <= hi && lb(s) < best*(1-eps); s++ {
		if v := f(s); v < best*(1-eps) {
			best, arg = v, s
		}
	}
	for s := a - 1; s >= lo && lb(s) <= best*(1+eps); s-- {
		if v := f(s); v <= best*(1+eps) {
			best, arg = min(best, v), s
		}
	}
	if math.IsInf(best, 1) { // no candidate: take lo, always valid
		return lo
	}
	return arg
}
