package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// Coster is an algorithm with a closed-form cost in the α-β-γ model of
// package cost. The planner compares these figures to choose, and the
// simulator checks them.
type Coster interface {
	// Cost returns the predicted seconds of p, with es-byte elements,
	// under m: the time until the slowest rank finishes. Parameters p
	// leaves at 0 (Segment, Radix) count as the values Program would use.
	Cost(p sched.Params, es int, m cost.Model) float64
}

// Tuner is an algorithm with parameters (Params.Segment, Params.Radix).
type Tuner interface {
	// Tune returns p with the parameters that minimise Cost under m
	// filled in. Parameters p sets already (non-zero) are kept.
	Tune(p sched.Params, es int, m cost.Model) sched.Params
}
