package braid

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
)

// call is one collective call, checked and ready to run.
type call struct {
	name string
	p    sched.Params
	in   []byte
	out  []byte
	d    DType
	op   Op

	// dyn, if not nil, is the dynamic algorithm the call runs instead of
	// a program (set by runIssued).
	dyn sched.Dynamic

	// What ran, for the profiler: set by runIssued.
	algo string
	seq  uint32
	sig  uint32 // chained signature (check.go), set when issued

	// chunk is the shared area's last chunk of a call through it, set
	// when it ends well (for its confirmation, confirm.go).
	chunk uint64

	// begun: a call through the area that was registered as it was
	// issued (issue), and what world.begin found.
	begun struct {
		done, bad bool
		peer      int
		other     uint32
	}

	arrive int64   // when the call entered Braid, on the job's clock (arrival.go)
	pat    pattern // what this rank knew of its arrival pattern, set as it ends
}

type planKey struct {
	coll  sched.Collective
	count int
	root  int
	es    int
}

type lastPlan struct {
	key planKey
	pl  *planned
}

// lastSig caches the signature (callSig) of the last call through the
// shared area: a loop of one small call then skips hashing its arguments.
// A plan is one per (collective, count, root, element size) and runs one
// algorithm, so (pl, dtype, op) determine the signature.
type lastSig struct {
	pl  *planned
	d   DType
	op  Op
	sig uint32
}

// nodeSig returns callSig(k, pl.algo, 0, 0, 0) for a call through the
// shared area, from the cache when the last such call had the same plan,
// dtype and op.
func (c *Comm) nodeSig(k *call, pl *planned) uint32 {
	if ls := c.lastSig.Load(); ls != nil && ls.pl == pl && ls.d == k.d && ls.op == k.op {
		return ls.sig
	}
	sig := c.callSig(k, pl.algo, 0, 0, 0)
	c.lastSig.Store(&lastSig{pl: pl, d: k.d, op: k.op, sig: sig})
	return sig
}

type planned struct {
	algo   string
	reason string
	prog   atomic.Pointer[sched.Program]

	// adapting is set while MIAD searches the segment; then every call
	// goes through issue's slow path under mu.
	adapting atomic.Bool
	mu       sync.Mutex
	miad     *plan.MIAD
	a        algo.Algorithm
	p        sched.Params  // the params the program was generated with
	bytes    float64       // bytes a call moves, for throughput
	calls    int           // calls issued in the current trial
	pending  chan struct{} // closed when the last trial's agreement is done

	// treesSig is the signature of the trees the program packs (check.go),
	// 0 if it packs none.
	treesSig uint32

	// dyn is the plan's algorithm if it is dynamic (no program).
	dyn sched.Dynamic

	// watch, if not nil, moves the plan between algo and the
	// arrival-aware reductions by the call site's arrival statistics
	// (arrivalplan.go).
	watch *arrivalWatch
}

// trialCalls is the calls per MIAD trial: the first warms the new
// schedule up, the second is timed.
const trialCalls = 2

// signature summarises a call's arguments. callSig adds the algorithm
// and the check mode, and the communicator chains the result with the
// earlier calls' into the signature every message of the call carries
// (check.go); a receiver that expected another one reports Mismatch.
func signature(p sched.Params, d DType, op Op) uint32 {
	if !p.Coll.Reduces() {
		op = 0
	}
	// A 64-bit mix (splitmix64's finaliser) of the packed fields.
	x := uint64(p.Coll) | uint64(d)<<8 | uint64(op)<<16 | uint64(uint32(p.Root))<<24
	x ^= uint64(p.Count) * 0x9e3779b97f4a7c15
	x ^= uint64(p.Segment)*0xd6e8feb86659fd93 ^ uint64(p.Radix)<<56
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return uint32(x) ^ uint32(x>>32)
}

// plan returns the plan for p, planning and generating it on first use.
func (c *Comm) plan(p sched.Params, es int) (*planned, error) {
	k := planKey{p.Coll, p.Count, p.Root, es}
	// Training loops repeat one call: try the last plan before the map.
	if last := c.last.Load(); last != nil && last.key == k {
		return last.pl, nil
	}
	c.mu.Lock()
	pl := c.plans[k]
	c.mu.Unlock()
	if pl != nil {
		c.last.Store(&lastPlan{k, pl})
		return pl, nil
	}
	pl, err := c.newPlan(p, es)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.plans) > 1024 {
		clear(c.plans)
	}
	c.plans[k] = pl
	c.mu.Unlock()
	return pl, nil
}

// newPlan chooses the algorithm and parameters for p and generates the
// program.
func (c *Comm) newPlan(p sched.Params, es int) (*planned, error) {
	model := c.w.model
	p.Trees = c.trees(p)
	var cand []plan.Candidate
	var why []string
	for _, a := range algo.ForCollective(p.Coll) {
		if err := a.Supports(p); err != nil {
			why = append(why, a.Name()+": "+err.Error())
			continue
		}
		cand = append(cand, candidate(a, p, es, model))
	}
	if nc, ok := c.nodeCandidate(p, es); ok {
		cand = append(cand, plan.Candidate{Name: nodeAlgo, Params: p, Cost: nc.cost})
		if choice.SharedPAPRuns(p.Coll) {
			// The arrival-aware reductions have no cost in the balanced
			// model (NaN): the model never picks them. BRAID_ALGO, a
			// tuning table, a Planner that names them, or the arrival
			// statistics (arrivalplan.go) do.
			cand = append(cand, plan.Candidate{Name: papAlgo, Params: p, Cost: math.NaN()})
		}
	}
	ac, hasAgg := c.aggCandidate(p, es)
	if hasAgg {
		cand = append(cand, ac)
	}
	aggNote := ""
	if len(cand) == 0 {
		return nil, &Error{Kind: Unsupported, Rank: c.rank, Call: p.Coll.String(), Peer: -1,
			Err: fmt.Errorf("no algorithm supports %d ranks, count %d: %v", p.NRanks, p.Count, why)}
	}
	// Dynamic algorithms (algo.DynamicAlgorithm), which decide as
	// messages arrive, have no cost in the balanced model either.
	for _, a := range algo.Dynamics(p.Coll) {
		if a.Supports(p) == nil {
			cand = append(cand, plan.Candidate{Name: a.Name(), Params: p, Cost: math.NaN()})
		}
	}
	var d plan.Decision
	forced, forcedSeg := false, false
	hasNode := slices.ContainsFunc(cand, func(x plan.Candidate) bool { return x.Name == nodeAlgo })
	ch, ok := c.force.perCol[p.Coll]
	ok = ok && !choice.DeviceOnly(p.Coll, ch.Algo) // a fused kernel forced for device buffers
	if ok && choice.IsShared(p.Coll, ch.Algo) {
		if !hasNode {
			return nil, &Error{Kind: Unsupported, Rank: c.rank, Call: p.Coll.String(), Peer: -1,
				Err: fmt.Errorf("BRAID_ALGO forces %s: the shared area runs allreduce, reduce, bcast, allgather, reducescatter and barrier (%s: allreduce and reduce) of a communicator whose ranks are all on one host, created by Init or NewLocal (this one: %d ranks on %d hosts)", ch, papAlgo, c.Size(), c.nhosts)}
		}
		d, forced = plan.Decision{Algo: ch.Algo, Params: p, Reason: "forced by BRAID_ALGO=" + ch.String()}, true
	} else if c.aggForced(p.Coll) {
		if hasAgg {
			d, forced = plan.Decision{Algo: aggAlgo, Params: p, Reason: "forced by BRAID_ALGO=" + aggAlgo}, true
		} else {
			if note := c.aggUnavailable(); note != "" {
				aggNote = "; " + note
			}
		}
	} else if da := algo.LookupDynamic(p.Coll, ch.Algo); ok && da != nil {
		if err := da.Supports(p); err != nil {
			return nil, &Error{Kind: Unsupported, Rank: c.rank, Call: p.Coll.String(), Peer: -1, Err: fmt.Errorf("BRAID_ALGO forces %s: %v", ch, err)}
		}
		d, forced = plan.Decision{Algo: ch.Algo, Params: p, Reason: "forced by BRAID_ALGO=" + ch.String()}, true
	} else if ok {
		forcedSeg = ch.Segment > 0
		a, err := algo.Lookup(p.Coll, ch.Algo)
		if err != nil {
			return nil, &Error{Kind: InvalidArgument, Rank: c.rank, Call: p.Coll.String(), Peer: -1, Err: fmt.Errorf("BRAID_ALGO: %v", err)}
		}
		fp := ch.Apply(p, es)
		if err := a.Supports(fp); err != nil {
			return nil, &Error{Kind: Unsupported, Rank: c.rank, Call: p.Coll.String(), Peer: -1, Err: fmt.Errorf("BRAID_ALGO forces %s: %v%s", ch, err, c.treesNote(a, fp))}
		}
		d, forced = plan.Decision{Algo: ch.Algo, Params: tuned(a, fp, es, model), Reason: "forced by BRAID_ALGO=" + ch.String()}, true
	} else if ch := c.force.any; choice.IsShared(p.Coll, ch.Algo) && hasNode {
		d, forced = plan.Decision{Algo: ch.Algo, Params: p, Reason: "forced by BRAID_ALGO=" + ch.String()}, true
	} else if ch.Algo != "" && algo.LookupDynamic(p.Coll, ch.Algo) != nil && slices.ContainsFunc(cand, func(x plan.Candidate) bool { return x.Name == ch.Algo }) {
		d, forced = plan.Decision{Algo: ch.Algo, Params: p, Reason: "forced by BRAID_ALGO=" + ch.String()}, true
	} else if ch.Algo != "" && slices.ContainsFunc(cand, func(x plan.Candidate) bool { return x.Name == ch.Algo }) {
		forcedSeg = ch.Segment > 0
		a, _ := algo.Lookup(p.Coll, ch.Algo)
		fp := ch.Apply(p, es)
		if a.Supports(fp) == nil {
			d, forced = plan.Decision{Algo: ch.Algo, Params: tuned(a, fp, es, model), Reason: "forced by BRAID_ALGO=" + ch.String()}, true
		}
	}
	req := plan.Request{Params: p, ElemSize: es}
	if !forced {
		d = c.w.opts.Planner.Plan(req, cand)
		if !slices.ContainsFunc(cand, func(x plan.Candidate) bool { return x.Name == d.Algo }) {
			d = plan.Default{}.Plan(req, cand)
		}
		d.Reason += aggNote
	} else {
		d.Source = plan.FromForce
	}
	if d.Algo == aggAlgo {
		pl := &planned{algo: aggAlgo, reason: d.Reason, p: p, bytes: float64(plan.Size(p, es))}
		if c.rank == 0 {
			c.w.debugf("info", "%v comm %08x n=%d count=%d (%d B): %s (%s)", p.Coll, c.id, p.NRanks, p.Count, int64(p.Count)*int64(es), aggAlgo, pl.reason)
		}
		return pl, nil
	}
	var names []string
	for _, x := range cand {
		names = append(names, x.Name)
	}
	watch := !forced && !d.Fixed && d.Algo != papAlgo && c.watchable(p, es, names)
	if choice.IsShared(p.Coll, d.Algo) {
		pl := &planned{algo: d.Algo, reason: d.Reason, p: p, bytes: float64(plan.Size(p, es))}
		if d.Algo == nodeAlgo {
			if shape := nodeShape(c.node, p, es); shape != "" {
				pl.reason += "; the area runs it as " + shape
			}
		}
		if watch {
			pl.watch = &arrivalWatch{reason: pl.reason}
		}
		if c.rank == 0 {
			c.w.debugf("info", "%v comm %08x n=%d count=%d (%d B) root=%d: %s (%s)",
				p.Coll, c.id, p.NRanks, p.Count, int64(p.Count)*int64(es), p.Root, d.Algo, pl.reason)
		}
		return pl, nil
	}
	if da := algo.LookupDynamic(p.Coll, d.Algo); da != nil {
		dp := p
		if tu, ok := da.(algo.Tuner); ok {
			dp = tu.Tune(p, es, model) // a pipelined one's segment (papbcast)
		}
		pl := &planned{algo: d.Algo, reason: d.Reason, p: dp, bytes: float64(plan.Size(p, es)), dyn: da}
		if watch {
			pl.watch = &arrivalWatch{reason: pl.reason}
		}
		if c.rank == 0 {
			c.w.debugf("info", "%v comm %08x n=%d count=%d (%d B) root=%d: %s (%s)",
				p.Coll, c.id, p.NRanks, p.Count, int64(p.Count)*int64(es), p.Root, d.Algo, pl.reason)
		}
		return pl, nil
	}
	a, err := algo.Lookup(p.Coll, d.Algo)
	if err != nil {
		return nil, &Error{Kind: Internal, Rank: c.rank, Call: p.Coll.String(), Peer: -1, Err: err}
	}
	// The planner returns the request's params with tuning parameters;
	// anything else it changed is not its to change.
	gp := p
	gp.Segment, gp.Radix = d.Params.Segment, d.Params.Radix
	if err := a.Supports(gp); err != nil {
		return nil, &Error{Kind: Internal, Rank: c.rank, Call: p.Coll.String(), Peer: -1, Err: fmt.Errorf("planner chose %s with %+v: %v", d.Algo, gp, err)}
	}
	pl := &planned{algo: d.Algo, reason: d.Reason, a: a, p: gp, bytes: float64(plan.Size(p, es))}
	if a == algo.Treepack(p.Coll) {
		pl.treesSig = treesSig(gp.Trees)
	}
	// MIAD adapts the segment of a pipelined algorithm whose segment the
	// model chose (not one that BRAID_ALGO or a tuning table fixed), when
	// the call is long enough for segments to matter.
	fixedSeg := forced && forcedSeg
	if d.Source == plan.FromTable {
		e := c.w.table().Lookup(p.Coll, p.NRanks, p.Layout.NHosts(), plan.Size(p, es))
		fixedSeg = e == nil || e.Choice.Segment > 0
	}
	if m := hostMIAD.start(a, gp.Segment, p.Count, es, c.w.opts.DisableMIAD || fixedSeg); m != nil {
		pl.miad = m
		pl.p.Segment = pl.miad.Segment()
		pl.adapting.Store(true)
		pl.reason += fmt.Sprintf("; MIAD adapts the segment from %s", plan.FormatSize(int64(pl.p.Segment)*int64(es)))
	}
	if watch && pl.miad == nil {
		pl.watch = &arrivalWatch{reason: pl.reason}
	}
	prog := a.Program(pl.p, c.rank)
	pl.prog.Store(&prog)
	if c.rank == 0 {
		c.w.debugf("info", "%v comm %08x n=%d count=%d (%d B) root=%d: %s (%s)",
			p.Coll, c.id, p.NRanks, p.Count, int64(p.Count)*int64(es), p.Root, choiceString(d.Algo, pl.p, es), pl.reason)
	}
	return pl, nil
}

// MIAD's scope: calls of at least miadMinBytes, segments of at least
// miadMinSegment bytes.
const (
	miadMinBytes   = 1 << 20
	miadMinSegment = 4 << 10
)

// candidate returns a as a planner candidate for p: its parameters tuned
// and its cost under model.
func candidate(a algo.Algorithm, p sched.Params, es int, model cost.Model) plan.Candidate {
	p = tuned(a, p, es, model)
	return plan.Candidate{Name: a.Name(), Params: p, Cost: algo.CostOf(a, p, es, model)}
}

// tuned returns p with a's parameters chosen under model, where p leaves
// them 0.
func tuned(a algo.Algorithm, p sched.Params, es int, model cost.Model) sched.Params {
	if t, ok := a.(algo.Tuner); ok {
		q := t.Tune(p, es, model)
		if a.Supports(q) == nil {
			return q
		}
	}
	return p
}

func choiceString(name string, p sched.Params, es int) string {
	ch := plan.Choice{Algo: name, Radix: p.Radix}
	if p.Segment > 0 {
		ch.Segment = int64(p.Segment) * int64(es)
	}
	return ch.String()
}

// issue takes the call's place in the communicator's order: its sequence
// number and the program it runs. While MIAD adapts the plan, the call
// that ends a trial also takes the next number for the trial's agreement,
// and the next call waits for that agreement, so that every rank runs
// every call with the same segment.
//
// A call through the shared area that runs at once on this goroutine
// (begin set: a blocking call) is registered in the check's table
// (world.begin) under the same lock that orders its sequence number and
// ticket: one lock for both (runNode then skips its own registration).
func (c *Comm) issue(k *call, begin bool) (run, error) {
	pl, err := c.plan(k.p, k.d.Size())
	if err != nil {
		return run{}, err
	}
	if pl.watch != nil {
		return c.issueWatched(k, pl), nil
	}
	if pl.algo == aggAlgo {
		return c.issueAgg(k, pl), nil
	}
	if choice.IsShared(k.p.Coll, pl.algo) {
		// The shared area runs calls in the order of their tickets, which
		// must be the order of their sequence numbers.
		sig := c.nodeSig(k, pl)
		t := &c.w.sigs
		t.mu.Lock()
		seq, chained := c.chk.next(sig)
		r := run{pl: pl, seq: seq, sig: chained, ticket: c.node.Ticket()}
		var drain []drainEntry
		if begin {
			k.sig, k.algo = chained, pl.algo
			b := &k.begun
			b.done = true
			b.peer, b.other, b.bad, drain = t.begin(c.id, seq, k, pl.algo)
		}
		t.mu.Unlock()
		c.w.drainProbes(drain)
		return r, nil
	}
	if !pl.adapting.Load() {
		seq, sig := c.chk.next(c.callSig(k, pl.algo, pl.p.Segment, pl.p.Radix, pl.treesSig))
		return run{pl: pl, prog: pl.prog.Load(), seq: seq, sig: sig, seg: pl.p.Segment, radix: pl.p.Radix}, nil
	}
	pl.mu.Lock()
	for pl.pending != nil {
		ch := pl.pending
		pl.mu.Unlock()
		<-ch
		pl.mu.Lock()
	}
	defer pl.mu.Unlock()
	r := run{pl: pl, prog: pl.prog.Load(), seg: pl.p.Segment, radix: pl.p.Radix}
	sig := c.callSig(k, pl.algo, r.seg, r.radix, pl.treesSig)
	if pl.miad == nil || pl.miad.Done() {
		r.seq, r.sig = c.chk.next(sig)
		return r, nil
	}
	pl.calls++
	if pl.calls < trialCalls {
		r.seq, r.sig = c.chk.next(sig)
		return r, nil
	}
	pl.calls = 0
	pl.pending = make(chan struct{})
	r.trial = true
	r.seq, r.sig, r.agreeSig = c.chk.next2(sig, c.agreeSig())
	return r, nil
}

// run is an issued call.
type run struct {
	pl     *planned
	prog   *sched.Program
	seq    uint32
	trial  bool   // the call ends a MIAD trial; seq+1 is the trial's agreement
	ticket uint64 // the call's turn in the shared area (nodeAlgo)

	sig, agreeSig uint32 // chained signatures of seq and seq+1 (check.go)

	// The program's tuning parameters: they enter the call's signature,
	// so that ranks that planned differently report Mismatch.
	seg, radix int

	// A call of a watched plan (arrival.go): the algorithm it runs (the
	// plan's or the arrival-aware one), and whether it ends a window
	// (trial; seq+1 is then the window's agreement).
	watch *arrivalWatch
	algo  string
	timed bool // the call is one of the window's timed samples

	// agg: the call runs through aggregation daemons (aggregate.go), as
	// seq, seq+1 and seq+2 with these chained signatures for the last two.
	agg     bool
	aggSigs [2]uint32
}

// runCall executes a checked call.
func (c *Comm) runCall(ctx context.Context, k *call) error {
	k.arrive = c.w.clock.now()
	if err := c.usable(k.name); err != nil {
		return err
	}
	if k.p.Coll == sched.Allreduce && c.aggPending() {
		if err := c.aggSetup(ctx); err != nil {
			return err
		}
	}
	r, err := c.issue(k, true)
	if err != nil {
		e := err.(*Error)
		c.w.fail(e)
		return e
	}
	return c.runIssued(ctx, k, r)
}

// runIssued executes an issued call, and the MIAD agreement it carries.
func (c *Comm) runIssued(ctx context.Context, k *call, r run) error {
	k.p.Segment, k.p.Radix, k.sig = r.seg, r.radix, r.sig
	k.algo, k.seq = r.pl.algo, r.seq
	if r.pl.dyn != nil {
		k.dyn = r.pl.dyn
	}
	if r.watch != nil {
		k.algo = r.algo
		return c.runWatched(ctx, k, r)
	}
	if r.ticket != 0 {
		// The call's end takes its confirmations in the lock that ends
		// it (runNode), which are run here (confirm).
		s := settling{chk: &c.chk}
		if err := c.runNode(ctx, k, r, &s); err != nil {
			return err
		}
		return c.runDue(ctx, k.name, &s)
	}
	if r.agg {
		return c.runAgg(ctx, k, r)
	}
	if !r.trial {
		if err := c.runSeq(ctx, k, r.prog, r.pl.algo, r.seq); err != nil {
			return err
		}
		return c.confirm(ctx, k, r.seq)
	}
	return c.runTrial(ctx, k, r)
}

// runTrial executes an issued call that ends a MIAD trial, and the trial's
// agreement. (Apart from runIssued, whose every return would otherwise run
// the runtime's deferreturn: these defers are not open-coded.)
func (c *Comm) runTrial(ctx context.Context, k *call, r run) error {
	pl := r.pl
	defer func() {
		pl.mu.Lock()
		close(pl.pending)
		pl.pending = nil
		pl.mu.Unlock()
	}()
	t0 := time.Now()
	if err := c.runSeq(ctx, k, r.prog, pl.algo, r.seq); err != nil {
		pl.adapting.Store(false)
		return err
	}
	if err := c.confirm(ctx, k, r.seq); err != nil {
		pl.adapting.Store(false)
		return err
	}
	// Every rank must make the same move: agree on the slowest rank's
	// time, with a fixed 8-byte allreduce.
	t := []float64{time.Since(t0).Seconds()}
	agree := call{name: "allreduce (MIAD agreement)", p: sched.Params{Coll: sched.Allreduce, NRanks: c.Size(), Count: 1},
		in: bytesOf(t), out: bytesOf(t), d: Float64, op: Max, sig: r.agreeSig, arrive: c.w.clock.now()}
	if err := c.runSeq(ctx, &agree, c.agreeProg(), "recdouble", r.seq+1); err != nil {
		pl.adapting.Store(false)
		return err
	}
	if err := c.settle(ctx, k.name, r.seq+1); err != nil {
		pl.adapting.Store(false)
		return err
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	es := k.d.Size()
	old := pl.p.Segment
	pl.miad.Observe(pl.bytes / max(t[0], 1e-9))
	pl.p.Segment = pl.miad.Segment()
	if pl.p.Segment != old {
		prog := pl.a.Program(pl.p, c.rank)
		pl.prog.Store(&prog)
	}
	if pl.miad.Done() {
		pl.adapting.Store(false)
		if c.rank == 0 {
			c.w.debugf("info", "%v comm %08x count=%d: MIAD settled on %s after %d trials",
				k.p.Coll, c.id, k.p.Count, choiceString(pl.algo, pl.p, es), pl.miad.Trials())
		}
	}
	return nil
}

// agreeProg returns the program of MIAD's agreement: recursive doubling
// allreduce of one element (no planning: every rank must run the same).
func (c *Comm) agreeProg() *sched.Program {
	c.agreeOnce.Do(func() {
		a, err := algo.Lookup(sched.Allreduce, "recdouble")
		if err != nil {
			panic(err)
		}
		prog := a.Program(sched.Params{Coll: sched.Allreduce, NRanks: c.Size(), Count: 1}, c.rank)
		c.agree = &prog
	})
	return c.agree
}

// runSeq executes a checked call as the communicator's call number seq.
func (c *Comm) runSeq(ctx context.Context, k *call, prog *sched.Program, algoName string, seq uint32) (rerr error) {
	defer func() {
		// No panic crosses the API: a bug becomes an Internal error that
		// ends the job on every rank.
		if r := recover(); r != nil {
			e := &Error{Kind: Internal, Rank: c.rank, Call: k.name, Peer: -1, Err: fmt.Errorf("panic in call %d: %v", seq, r)}
			c.w.fail(e)
			rerr = e
		}
	}()
	if err := c.beginCall(ctx, k, algoName, seq); err != nil {
		return err
	}
	defer func() { c.endCall(k, seq, rerr != nil, nil, nil) }()
	env := exec.Env{
		Conn:       c.connFn,
		Tag:        transport.Tag{Comm: c.id, Seq: seq, Sig: k.sig},
		Fail:       c.errFn,
		Spin:       c.w.spin,
		Stall:      c.chk.stallFn,
		StallAfter: c.w.stallAfter(),
	}
	if _, ok := ctx.Deadline(); !ok {
		// The executor starts this clock in its slow path, which is
		// cheaper than a context with a timer per call.
		env.Timeout = c.w.opts.Timeout
	}
	if c.w.opts.Debug == "trace" {
		c.w.debugf("trace", "%s seq %d count %d via %s", k.name, seq, k.p.Count, algoName)
	}
	bufs := exec.Buffers{In: k.in, Out: k.out, DType: k.d, Op: k.op, NRanks: k.p.NRanks}
	var err error
	if k.dyn != nil && algoName == k.algo {
		err = exec.RunDynamic(ctx, k.dyn, k.p, c.rank, &env, bufs)
	} else {
		err = exec.Run(ctx, prog, &env, bufs)
	}
	if err != nil {
		return c.failWith(k.name, err)
	}
	return nil
}

// prepare checks the arguments of a collective and builds the call. It
// reports invalid arguments as InvalidArgument and aborts the communicator
// (peers cannot go on without this rank).
// It fills k (a zero call) in place: a call is a few hundred bytes, which
// a return by value would copy at every level.
func (c *Comm) prepare(k *call, name string, coll sched.Collective, send, recv any, op Op, root int) error {
	if err := c.check(k, name, coll, send, recv, op, root); err != nil {
		// The argument error is this rank's own news, even if the
		// communicator failed already.
		c.w.fail(err)
		return err
	}
	return nil
}

// check fills k, a zero call, from the arguments, or returns why they are
// invalid (k is then left as it was).
func (c *Comm) check(k *call, name string, coll sched.Collective, send, recv any, op Op, root int) *Error {
	n := c.Size()
	bad := func(format string, args ...any) *Error {
		return argError(c.rank, name, format, args...)
	}
	if coll.Rooted() && (root < 0 || root >= n) {
		return bad("root %d out of range [0, %d)", root, n)
	}
	isRoot := root == c.rank
	var in, out []byte
	var d DType
	needIn := coll != sched.Barrier && coll != sched.Bcast && !(coll == sched.Scatter && !isRoot)
	needOut := coll != sched.Barrier && !((coll == sched.Reduce || coll == sched.Gather) && !isRoot)
	var err error
	if needIn {
		if in, d, err = view(send); err != nil {
			return bad("send buffer: %v", err)
		}
	}
	if needOut {
		var od DType
		if out, od, err = view(recv); err != nil {
			return bad("receive buffer: %v", err)
		}
		if needIn && od != d {
			return bad("send buffer is %v but receive buffer is %v", d, od)
		}
		d = od
	}
	// Non-roots of reduce and gather have no receive buffer (any given is
	// ignored); their dtype comes from the send buffer.
	if coll == sched.Barrier {
		d = Uint8
	}
	if coll.Reduces() {
		if !op.Valid() {
			return bad("unknown op %v", op)
		}
		if !dtype.Supports(d, op) {
			return bad("op %v is not defined on %v", op, d)
		}
	} else {
		op = 0
	}
	es := d.Size()
	var count int
	switch coll {
	case sched.Allreduce:
		count = len(in) / es
		if len(out) != len(in) {
			return bad("receive buffer has %d elements, send buffer %d", len(out)/es, count)
		}
	case sched.Reduce:
		count = len(in) / es
		if isRoot && len(out) != len(in) {
			return bad("receive buffer has %d elements, send buffer %d", len(out)/es, count)
		}
	case sched.Bcast:
		count = len(out) / es
		in = out
	case sched.Allgather:
		count = len(in) / es
		if len(out) != n*len(in) {
			return bad("receive buffer has %d elements, want %d × %d", len(out)/es, n, count)
		}
	case sched.Gather:
		count = len(in) / es
		if isRoot && len(out) != n*len(in) {
			return bad("receive buffer has %d elements, want %d × %d", len(out)/es, n, count)
		}
	case sched.ReduceScatter:
		count = len(out) / es
		if len(in) != n*len(out) {
			return bad("send buffer has %d elements, want %d × %d", len(in)/es, n, count)
		}
	case sched.Scatter:
		count = len(out) / es
		if isRoot && len(in) != n*len(out) {
			return bad("send buffer has %d elements, want %d × %d", len(in)/es, n, count)
		}
	case sched.Alltoall:
		if len(in)%(n*es) != 0 {
			return bad("send buffer of %d elements does not divide into %d blocks", len(in)/es, n)
		}
		count = len(in) / es / n
		if len(out) != len(in) {
			return bad("receive buffer has %d elements, send buffer %d", len(out)/es, len(in)/es)
		}
	}
	p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root, Layout: c.layout}
	if !coll.Rooted() {
		p.Root = 0
	}
	if err := checkAlias(p, c.rank, in, out, es); err != nil {
		return bad("%v", err)
	}
	if coll == sched.Bcast {
		// In and Out are the same buffer by definition.
		in = out
	}
	k.name, k.p, k.in, k.out, k.d, k.op = name, p, in, out, d, op
	return nil
}

// checkAlias accepts disjoint buffers or exactly the in-place layout of the
// collective (see sched's package documentation), and rejects any other
// overlap.
func checkAlias(p sched.Params, rank int, in, out []byte, es int) error {
	if len(in) == 0 || len(out) == 0 {
		return nil
	}
	a0 := uintptr(unsafe.Pointer(unsafe.SliceData(in)))
	a1 := a0 + uintptr(len(in))
	b0 := uintptr(unsafe.Pointer(unsafe.SliceData(out)))
	b1 := b0 + uintptr(len(out))
	if a1 <= b0 || b1 <= a0 {
		return nil
	}
	blk := uintptr(p.Count * es)
	switch p.Coll {
	case sched.Allreduce, sched.Reduce, sched.Bcast, sched.Alltoall:
		if a0 == b0 && len(in) == len(out) {
			return nil
		}
	case sched.Allgather, sched.Gather:
		if a0 == b0+uintptr(rank)*blk && uintptr(len(in)) == blk {
			return nil
		}
	case sched.ReduceScatter, sched.Scatter:
		if b0 == a0+uintptr(rank)*blk && uintptr(len(out)) == blk {
			return nil
		}
	}
	return fmt.Errorf("send and receive buffers overlap but are not the in-place layout of %v (see the package documentation)", p.Coll)
}

// Explain returns the algorithm this communicator runs for a call of coll
// ("allreduce", "bcast", ...) with count elements of d (count as the call's
// Params count it: per rank for allgather and gather, per block for
// reducescatter, scatter and alltoall), and the planner's reason.
func (c *Comm) Explain(coll string, count int, d DType, root int) (algo, reason string, err error) {
	col, err := sched.ParseCollective(coll)
	if err != nil {
		return "", "", argError(c.rank, "explain", "%v", err)
	}
	if !d.Valid() {
		return "", "", argError(c.rank, "explain", "unknown dtype %v", d)
	}
	p := sched.Params{Coll: col, NRanks: c.Size(), Count: count, Layout: c.layout}
	if col.Rooted() {
		p.Root = root
	}
	pl, err := c.plan(p, d.Size())
	if err != nil {
		return "", "", err
	}
	if w := pl.watch; w != nil && w.pap.Load() {
		w.mu.Lock()
		defer w.mu.Unlock()
		return papAlgo, w.reason, nil
	}
	return choiceString(pl.algo, pl.p, d.Size()), pl.reason, nil
}
