package braid

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// fusedNames are the candidates that fused kernels make, by collective:
// the one-shot and two-shot allreduce take the names of the algorithms
// they fuse (algo.GPUOneShot, and "direct": a reduce-scatter and an
// allgather), and run as those programs where the kernels are off.
var fusedNames = map[sched.Collective][]struct {
	name string
	kind fused.Kind
}{
	sched.Allreduce:     {{algo.GPUOneShot.Name(), fused.OneShot}, {"direct", fused.TwoShot}},
	sched.Bcast:         {{deviceFused, fused.Bcast}},
	sched.Allgather:     {{deviceFused, fused.Allgather}},
	sched.ReduceScatter: {{deviceFused, fused.ReduceScatter}},
}

// deviceFused is the name of the fused broadcast, allgather and
// reduce-scatter among a call's candidates (choice.Fused).
const deviceFused = choice.Fused

// plan returns (and caches) the decision for a call of p on dt and op:
// the planner's, between the fused kernels that can run it and the
// schedules, each costed with the device model (plan.DeviceModel), unless
// DeviceOptions.Algo or BRAID_ALGO forces one, or the device tuning table
// names one (devDecider.decide). The fused kernels the planner chooses on
// its own are capped by DeviceOptions' OneShotMax, DirectMax and FusedMax
// (their defaults are where measurements showed them to lose); a forced
// one runs wherever it fits, and one the table names wherever it fits
// below the caps the caller set. d.mu is held.
func (d *DeviceComm) plan(p sched.Params, dt DType, op Op) (*devPlan, error) {
	if !p.Coll.Reduces() {
		op = Sum // unused: one plan whatever op the caller passed
	}
	key := devKey{p.Coll, p.Count, p.Root, dt, op}
	if pl, ok := d.plans[key]; ok {
		return pl, nil
	}
	c := d.c
	es := dt.Size()
	bad := func(kind ErrorKind, format string, args ...any) (*devPlan, error) {
		return nil, &Error{Kind: kind, Rank: c.rank, Call: p.Coll.String(), Peer: -1, Err: fmt.Errorf(format, args...)}
	}
	if g := d.opts.Groups; g != nil {
		if len(g) != p.NRanks {
			return bad(InvalidArgument, "DeviceOptions.Groups has %d entries for %d ranks", len(g), p.NRanks)
		}
		names := make([]string, len(g))
		for r, x := range g {
			names[r] = strconv.Itoa(x)
		}
		p.Layout = sched.NewLayout(names, nil)
	}
	// What forces a choice: DeviceOptions.Algo, else BRAID_ALGO's entry
	// for the collective, else its bare name where the call has it.
	dd := devDecider{bare: c.force.any, capped: map[string]bool{}, set: map[string]bool{}, table: d.opts.Table}
	if name := d.opts.Algo[p.Coll.String()]; name != "" {
		ch, err := plan.ParseChoice(name)
		if err != nil {
			return bad(InvalidArgument, "DeviceOptions.Algo: %v", err)
		}
		dd.force, dd.forcedBy = ch, "DeviceOptions.Algo"
	} else if ch, ok := c.force.perCol[p.Coll]; ok {
		dd.force, dd.forcedBy = ch, "BRAID_ALGO="+p.Coll.String()+"="+ch.String()
	}
	force, capped := dd.force, dd.capped
	bytes := p.Count * es
	// Where the communicator has a topology, the trees of the
	// tree-packing algorithm, and the narrowest route between two ranks,
	// which bounds the fused kernels and the flat schedules.
	p.Trees = d.trees(p)
	pairBps := d.pairBps()
	progs := d.model.ProgramsOn(pairBps)
	var cand []plan.Candidate
	fusedOf := map[string]*fused.Kernel{}
	for _, f := range fusedNames[p.Coll] {
		a, ok := d.shape.Shape(f.kind, p, dt, op)
		if !ok {
			continue
		}
		pf := &plan.Fused{Kind: a.Kind.String(), Blocks: a.Grid(), Threads: a.Threads, Rounds: a.Rounds(),
			HostBytes: a.HostBytes, Area: a.Area, Ramp: a.Ramp}
		if pf.Threads == 0 {
			pf.Threads = fused.Threads
		}
		if a.HostBytes > 0 {
			pf.HostShare = d.shape.HostShareOf(&a)
		}
		cand = append(cand, plan.Candidate{Name: f.name, Params: p, Cost: d.model.CostOn(pf, p, es, pairBps), Fused: pf})
		fusedOf[f.name] = &a
		switch f.kind {
		case fused.OneShot:
			capped[f.name] = d.opts.OneShotMax < 0 || bytes > d.oneShotMax()
			dd.set[f.name] = capped[f.name] && d.opts.OneShotMax != 0
		case fused.TwoShot:
			capped[f.name] = bytes > d.directMax()
			dd.set[f.name] = capped[f.name] && d.opts.DirectMax != 0
		default:
			capped[f.name] = bytes > d.fusedMax(p.Coll)
			dd.set[f.name] = capped[f.name] && d.opts.FusedMax != 0
		}
	}
	schedules := algo.ForCollective(p.Coll)
	if p.Coll == sched.Allreduce {
		schedules = append(schedules, algo.GPUOneShot)
	}
	for _, a := range schedules {
		if _, ok := fusedOf[a.Name()]; ok {
			continue // the fused kernel stands for it
		}
		if a == algo.Treepack(p.Coll) {
			if x, ok := d.treeCandidate(p, es, force); ok {
				cand = append(cand, x)
			}
			continue
		}
		sp := d.segmented(p, a.Name(), es)
		if force.Algo == a.Name() {
			sp = force.Apply(sp, es)
		}
		if a.Supports(sp) != nil {
			continue
		}
		cost := math.NaN()
		if k, ok := a.(algo.Coster); ok {
			cost = k.Cost(sp, es, progs)
		}
		cand = append(cand, plan.Candidate{Name: a.Name(), Params: sp, Cost: cost})
	}
	dec, err := dd.decide(plan.Request{Params: p, ElemSize: es}, cand)
	if err != nil {
		return bad(InvalidArgument, "%v%s", err, d.treesNote(force, p))
	}
	if dec.Algo == "" {
		return bad(Unsupported, "no algorithm runs %v of %d elements on %d GPUs", p.Coll, p.Count, p.NRanks)
	}
	pl := &devPlan{algo: dec.Algo}
	what := dec.Algo
	if dec.Fused != nil {
		pl.fused = fusedOf[dec.Algo]
		what += " [fused " + dec.Fused.String() + "]"
	} else {
		a, err := d.lookup(p.Coll, dec.Algo)
		if err != nil {
			return bad(InvalidArgument, "%v", err)
		}
		gp := p
		gp.Segment, gp.Radix = dec.Params.Segment, dec.Params.Radix
		if err := a.Supports(gp); err != nil {
			return bad(InvalidArgument, "%s: %v", dec.Algo, err)
		}
		prog := a.Program(gp, c.Rank())
		pl.prog, pl.params = &prog, gp
		what = choiceString(dec.Algo, gp, es) + " [program]"
		dec.Reason += d.adapt(pl, a, gp, dec, &dd, es)
	}
	if c.rank == 0 {
		var off []string
		for _, x := range cand {
			if capped[x.Name] {
				off = append(off, fmt.Sprintf("%s [fused %s] %s", x.Name, x.Fused, formatCost(x.Cost)))
			}
		}
		note := ""
		if len(off) > 0 {
			note = "; capped by DeviceOptions (OneShotMax, DirectMax, FusedMax): " + strings.Join(off, ", ")
		}
		c.w.debugf("info", "device %v n=%d count=%d (%d B) root=%d: %s (%s%s)", p.Coll, p.NRanks, p.Count, bytes, p.Root, what, dec.Reason, note)
	}
	d.plans[key] = pl
	return pl, nil
}

// devDecider is what chooses among a device call's candidates, besides
// the candidates: what forces one, the caps, the tuning table.
type devDecider struct {
	force    plan.Choice // DeviceOptions.Algo's or BRAID_ALGO's entry for the collective
	forcedBy string      // which of them, for the log
	bare     plan.Choice // BRAID_ALGO's bare entry
	// capped are the candidates over a cap (DeviceOptions' OneShotMax,
	// DirectMax, FusedMax, or their defaults), which the planner does not
	// choose on its own; set are those over a cap the caller set, which
	// the table does not choose either.
	capped, set map[string]bool
	table       *plan.Table
}

// decide chooses among cand for req: the forced candidate, where one is
// forced (an error where the call has none of that name); else the
// candidate BRAID_ALGO's bare entry names, if not capped; else the
// tuning table's entry for the call (on one host), where it names a
// candidate that no cap the caller set excludes; else the cheapest
// candidate under the model, capped ones left out (plan.Default). A
// decision with no Algo means that no candidate can run the call.
func (dd *devDecider) decide(req plan.Request, cand []plan.Candidate) (plan.Decision, error) {
	p, es := req.Params, req.ElemSize
	if dd.force.Algo != "" {
		i := slices.IndexFunc(cand, func(x plan.Candidate) bool { return x.Name == dd.force.Algo })
		if i < 0 {
			var names []string
			for _, x := range cand {
				names = append(names, x.Name)
			}
			return plan.Decision{}, fmt.Errorf("%s forces %s, which cannot run %v of %d elements on %d GPUs (candidates: %s)",
				dd.forcedBy, dd.force, p.Coll, p.Count, p.NRanks, strings.Join(names, ", "))
		}
		x := cand[i]
		return plan.Decision{Algo: x.Name, Params: x.Params, Fused: x.Fused, Reason: "forced by " + dd.forcedBy, Source: plan.FromForce}, nil
	}
	auto := slices.DeleteFunc(slices.Clone(cand), func(x plan.Candidate) bool { return dd.capped[x.Name] })
	if bare := dd.bare; bare.Algo != "" {
		if i := slices.IndexFunc(auto, func(x plan.Candidate) bool { return x.Name == bare.Algo }); i >= 0 {
			x := auto[i]
			return plan.Decision{Algo: x.Name, Params: bare.Apply(x.Params, es), Fused: x.Fused, Reason: "forced by BRAID_ALGO=" + bare.String(), Source: plan.FromForce}, nil
		}
	}
	tabled := slices.DeleteFunc(slices.Clone(cand), func(x plan.Candidate) bool { return dd.set[x.Name] })
	if dec, ok := dd.table.Choose(req, 1, tabled); ok {
		return dec, nil
	}
	return plan.Default{}.Plan(req, auto), nil
}

// formatCost writes a model's seconds for the log.
func formatCost(s float64) string {
	if math.IsNaN(s) {
		return "no cost model"
	}
	return time.Duration(s * 1e9).String()
}

// lookup returns the schedule algorithm named name for coll.
func (d *DeviceComm) lookup(coll sched.Collective, name string) (algo.Algorithm, error) {
	if coll == sched.Allreduce && name == algo.GPUOneShot.Name() {
		return algo.GPUOneShot, nil
	}
	return algo.Lookup(coll, name)
}

// segmented returns p with the segment a program of algorithm name runs
// with on device buffers: DeviceOptions.Segment, else DeviceSegment for
// the broadcast's chain and the pipelined ring's smallest (a quarter of a
// block above), else the whole vector.
func (d *DeviceComm) segmented(p sched.Params, name string, es int) sched.Params {
	p.Segment = max(p.Count, 1)
	switch {
	case d.opts.Segment > 0:
		p.Segment = max(d.opts.Segment/es, 1)
	case p.Coll == sched.Bcast:
		p.Segment = max(DeviceSegment/es, 1)
	case name == "segring":
		block := (p.Count + p.NRanks - 1) / p.NRanks
		p.Segment = max(DeviceSegment/es, block/4, 1)
	}
	return p
}

// Algorithm returns the name of what a call of coll on count elements of
// es bytes runs (a sum, for reductions): a schedule's algorithm, or the
// fused kernel's candidate name ("gpu_oneshot", "direct", "fused").
func (d *DeviceComm) Algorithm(coll sched.Collective, count, es int) (string, error) {
	dt, ok := map[int]DType{1: Uint8, 2: Float16, 4: Float32, 8: Float64}[es]
	if !ok {
		return "", fmt.Errorf("no element type of %d bytes", es)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	pl, err := d.plan(sched.Params{Coll: coll, NRanks: d.c.Size(), Count: count}, dt, Sum)
	if err != nil {
		return "", err
	}
	return pl.algo, nil
}
