package braid

import (
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/plan"
)

// miadScope is where MIAD (plan.MIAD: Blink, MLSys 2020, §4.2.1) adapts
// the segment of a pipelined program, for one executor: calls of at least
// minBytes, segments of at least minSegment bytes. Host calls and device
// calls decide whether MIAD runs in one place (start), each with its own
// scope.
type miadScope struct{ minBytes, minSegment int }

var (
	// hostMIAD is the scope of host calls: calls of 1 MiB and more,
	// segments of 4 KiB and more.
	hostMIAD = miadScope{miadMinBytes, miadMinSegment}
	// deviceMIAD is the scope of device calls run as programs: calls of
	// 1 MiB and more, segments of 256 KiB and more. Every message of a
	// program costs notices and interprocess events, 25 µs in the device
	// model (plan.DefaultDeviceModel), in which time an NVLink 2 moves
	// 625 KB and an H200 7.75 MB: smaller segments only add messages.
	deviceMIAD = miadScope{1 << 20, 256 << 10}
)

// start returns the MIAD search for the segment of algorithm a's program
// on count elements of es bytes, whose segment the planner set to seg,
// or nil where MIAD leaves the segment as it is: a's segment is not a
// tuning parameter (algo.Tuner), fixed says that it was fixed (by
// BRAID_ALGO, a tuning table or an option) or that MIAD is off, seg is 0,
// or the call moves less than the scope's bytes. The search starts at a
// quarter of seg and stays within [minSegment, count].
func (s miadScope) start(a algo.Algorithm, seg, count, es int, fixed bool) *plan.MIAD {
	if _, ok := a.(algo.Tuner); !ok || fixed || seg <= 0 || int64(count)*int64(es) < int64(s.minBytes) {
		return nil
	}
	lo := max(1, s.minSegment/es)
	return plan.NewMIAD(max(lo, seg/4), lo, max(lo, count))
}
