package braid

import (
	"context"
	"fmt"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/gpu"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// devMIAD is a device plan's MIAD search for its program's segment
// (miadScope.start decides whether there is one, as for host calls): the
// calls run trialCalls at a time with one segment, the last of them
// timed; the ranks agree on the slowest rank's time through the host
// communicator, and every rank makes the same move, so that all run every
// call with the same program.
type devMIAD struct {
	m     *plan.MIAD
	a     algo.Algorithm
	es    int
	bytes float64 // what a call moves, for throughput (plan.Size)
	calls int     // calls run in the current trial
}

// adapt starts MIAD on pl, a program of algorithm a generated for gp, if
// the segment is the planner's to adapt: not fixed by DeviceOptions.Segment,
// by what forced the choice (dd) with a segment, or by a tuning table's
// entry with one; not with DeviceOptions.StreamOrdered, whose calls
// cannot be timed; not with Options.DisableMIAD. It returns a note for
// the plan's log line, "" if MIAD does not run.
func (d *DeviceComm) adapt(pl *devPlan, a algo.Algorithm, gp sched.Params, dec plan.Decision, dd *devDecider, es int) string {
	fixed := d.c.w.opts.DisableMIAD || d.opts.StreamOrdered || d.opts.Segment > 0
	switch dec.Source {
	case plan.FromForce:
		if dd.force.Algo != "" {
			fixed = fixed || dd.force.Segment > 0
		} else {
			fixed = fixed || dd.bare.Segment > 0
		}
	case plan.FromTable:
		e := d.opts.Table.Lookup(gp.Coll, gp.NRanks, 1, plan.Size(gp, es))
		fixed = fixed || e == nil || e.Choice.Segment > 0
	}
	m := deviceMIAD.start(a, gp.Segment, gp.Count, es, fixed)
	if m == nil {
		return ""
	}
	pl.miad = &devMIAD{m: m, a: a, es: es, bytes: float64(plan.Size(gp, es))}
	pl.setSegment(m.Segment(), d.c.Rank())
	return "; MIAD adapts the segment from " + plan.FormatSize(int64(m.Segment())*int64(es))
}

// setSegment makes pl's program the one of its algorithm with segment
// seg (elements).
func (pl *devPlan) setSegment(seg, rank int) {
	pl.params.Segment = seg
	prog := pl.miad.a.Program(pl.params, rank)
	pl.prog = &prog
}

// run runs k, a call of pl whose segment MIAD is adapting (synchronous:
// DeviceOptions.StreamOrdered has no MIAD), and takes the trial's
// measurement where the call ends one.
func (m *devMIAD) run(ctx context.Context, d *DeviceComm, pl *devPlan, k *gpu.Call) error {
	m.calls++
	if m.calls < trialCalls {
		return d.g.Run(ctx, k)
	}
	m.calls = 0
	t0 := time.Now()
	if err := d.g.Run(ctx, k); err != nil {
		pl.miad = nil // the ranks may now disagree on the trial: stop
		return err
	}
	t := []float64{time.Since(t0).Seconds()}
	if err := d.c.Allreduce(ctx, t, t, Max); err != nil {
		pl.miad = nil
		return fmt.Errorf("agreeing on MIAD's trial: %w", err)
	}
	d.observe(pl, t[0])
	return nil
}

// observe reports the slowest rank's time of a trial of pl to MIAD and
// moves pl to the segment it tries next, or to the one it settled on.
func (d *DeviceComm) observe(pl *devPlan, seconds float64) {
	m := pl.miad
	m.m.Observe(m.bytes / max(seconds, 1e-9))
	if seg := m.m.Segment(); seg != pl.params.Segment {
		pl.setSegment(seg, d.c.Rank())
	}
	if m.m.Done() {
		pl.miad = nil
		if c := d.c; c.rank == 0 {
			c.w.debugf("info", "device %v n=%d count=%d: MIAD settled on %s after %d trials",
				pl.params.Coll, pl.params.NRanks, pl.params.Count, choiceString(pl.algo, pl.params, m.es), m.m.Trials())
		}
	}
}
