package algo

import (
	"testing"

	"github.com/braid-ccl/braid/sched"
)

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
	if a, ok := LookupDynamic(sched.Bcast, name).(papBcastAlgo); ok {
		return a.a.groups(p, est, msg)
	}
	return LookupPattern(sched.Bcast, name).(arrivalBcast).groups(p, est, msg)
}

// PAPBcastLine is the tag of papbcast's words from the root that tell a
// member its place in its group's chain, for package algo_test.
const PAPBcastLine = pbLine

// PAPBcastPlace decodes such a word: the member's predecessor and
// successor (-1: none).
func PAPBcastPlace(w uint64) (pred, succ int) { return fromLineWord(w) }

// PAPBcastGroups is traceGroups, papbcast's groups for an order of
// arrival.
func PAPBcastGroups(p sched.Params, order []int) [][]int { return traceGroups(p, order) }

// PAPBcastProgram returns rank r's program of papbcast when the root
// serves groups, in order.
func PAPBcastProgram(p sched.Params, groups [][]int, r int) sched.Program {
	return LookupDynamic(sched.Bcast, "papbcast").(papBcastAlgo).a.program(p, groups, r)
}

// CheckSched is checkSched (schedtest.Check, interpreting a sample under
// the race detector), for package algo_test.
func CheckSched(t testing.TB, p sched.Params, progs []sched.Program) error {
	return checkSched(t, p, progs)
}
