package algo

import "github.com/braid-ccl/braid/sched"

// SegWindow is segWindow, for the cost tests of package algo_test.
const SegWindow = segWindow

// PRRSteps is prrSteps (the pre-reduced ring's pre-steps for a pattern),
// for package algo_test.
func PRRSteps(p sched.Params, est []float64, msg MsgTime) int {
	return prrSteps(p, byArrival(est), est, msg)
}

// ArrivalGroups returns the groups the arrival-aware broadcast named name
// serves for a pattern, for package algo_test.
func ArrivalGroups(name string, p sched.Params, est []float64, msg MsgTime) [][]int {
	return LookupPattern(sched.Bcast, name).(arrivalBcast).groups(p, est, msg)
}
