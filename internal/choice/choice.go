// Package choice checks algorithm choices against the algorithms Braid
// has: the entries of BRAID_ALGO (Options.Algo), the lines of a tuning
// table, and braid bench's --algo and --algos. Package plan reads their
// syntax (plan.ParseChoice) but cannot know the algorithms (it does not
// import algo); the root package and cmd/braid check here, once, when the
// choice is read, so that a typo is an error that names it rather than a
// choice silently never made.
//
//	bare, perColl, err := choice.ParseAlgo("allreduce=ring,bcast=chain:seg=256K")
package choice

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// Shared is the name of the collectives that run through the host's shared
// area (package transport/shmcoll) rather than as a schedule: the planner
// offers it, and BRAID_ALGO or a tuning table may name it, for the
// collectives of SharedRuns. It takes no parameters.
const Shared = "shm"

// Agg is the name of the allreduce through aggregation daemons (package
// agg, BRAID_AGG): the planner offers it when the job has daemons, and
// BRAID_ALGO may name it. It takes no parameters.
const Agg = "agg"

// AggRuns reports whether the daemons run coll.
func AggRuns(coll sched.Collective) bool { return coll == sched.Allreduce }

// SharedPAP is the name of the shared area's arrival-aware reductions
// ("Efficient Process Arrival Pattern Aware Collective Communication for
// Deep Learning", Alizadeh et al., EuroMPI/USA 2022, §5.1–5.2): a leader
// that is the first rank to arrive for small chunks, a chain in the order
// of arrival for large ones. The planner chooses it for a reduce above
// 16 KiB whose measured arrival spread is more than 4 times the balanced
// call's time (arrivalplan.go); BRAID_ALGO or
// a tuning table may name it for the collectives of SharedPAPRuns. It
// takes no parameters.
const SharedPAP = "pap"

// SharedPAPRuns reports whether the shared area runs coll arrival-aware.
func SharedPAPRuns(coll sched.Collective) bool {
	return coll == sched.Allreduce || coll == sched.Reduce
}

// IsShared reports whether name is an algorithm of the shared area for
// coll (Shared or SharedPAP).
func IsShared(coll sched.Collective, name string) bool {
	return name == Shared && SharedRuns(coll) || name == SharedPAP && SharedPAPRuns(coll)
}

// Fused is the name of the fused kernel of a broadcast, allgather or
// reduce-scatter on device buffers: the device planner offers it beside
// the schedules, and BRAID_ALGO, DeviceOptions.Algo or a device tuning
// table may name it. The fused one-shot allreduce is "gpu_oneshot". Host
// buffers have neither: a host call that BRAID_ALGO forces to one plans
// as if nothing forced it. Neither takes parameters.
const Fused = "fused"

// DeviceOnly reports whether name is a fused kernel of coll that runs on
// device buffers only (Fused, or gpu_oneshot for allreduce).
func DeviceOnly(coll sched.Collective, name string) bool {
	switch coll {
	case sched.Bcast, sched.Allgather, sched.ReduceScatter:
		return name == Fused
	case sched.Allreduce:
		return name == algo.GPUOneShot.Name()
	}
	return false
}

// SharedRuns reports whether the shared area runs coll.
func SharedRuns(coll sched.Collective) bool {
	switch coll {
	case sched.Allreduce, sched.Reduce, sched.Bcast, sched.Allgather, sched.ReduceScatter, sched.Barrier:
		return true
	}
	return false
}

// Check returns an error unless ch names an algorithm of coll and gives it
// only parameters it takes (seg for pipelined algorithms, k for k-nomial
// trees). The error lists the algorithms of coll, or the parameters the
// algorithm takes.
func Check(coll sched.Collective, ch plan.Choice) error {
	if DeviceOnly(coll, ch.Algo) || IsShared(coll, ch.Algo) || ch.Algo == Agg && AggRuns(coll) {
		if ch.Segment > 0 || ch.Radix > 0 {
			return fmt.Errorf("%v algorithm %q takes no parameters", coll, ch.Algo)
		}
		return nil
	}
	if algo.LookupDynamic(coll, ch.Algo) != nil {
		if ch.Segment > 0 || ch.Radix > 0 {
			return fmt.Errorf("%v algorithm %q takes no parameters", coll, ch.Algo)
		}
		return nil
	}
	if _, err := algo.Lookup(coll, ch.Algo); err != nil {
		return fmt.Errorf("no %v algorithm named %q (have %s)", coll, ch.Algo, strings.Join(NamesOf(coll), ", "))
	}
	return checkParams(coll, ch)
}

// NamesOf returns every name Check accepts for coll, sorted, each once:
// its schedules, its arrival-aware (dynamic) algorithms, the shared
// area's (Shared, SharedPAP), the aggregation daemons' (Agg) and the fused
// kernels on device buffers.
func NamesOf(coll sched.Collective) []string {
	var names []string
	for _, a := range algo.ForCollective(coll) {
		names = append(names, a.Name())
	}
	for _, a := range algo.Dynamics(coll) {
		names = append(names, a.Name())
	}
	for _, n := range []string{Shared, SharedPAP, Agg, Fused, algo.GPUOneShot.Name()} {
		if IsShared(coll, n) || n == Agg && AggRuns(coll) || DeviceOnly(coll, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// CheckAny returns an error unless some collective has an algorithm named
// ch.Algo (a bare entry of BRAID_ALGO, which forces it wherever it
// applies), and every collective that has it takes ch's parameters. The
// error lists every algorithm name.
func CheckAny(ch plan.Choice) error {
	if ch.Algo == Shared || ch.Algo == SharedPAP || ch.Algo == Agg || ch.Algo == Fused || ch.Algo == algo.GPUOneShot.Name() {
		if ch.Segment > 0 || ch.Radix > 0 {
			return fmt.Errorf("algorithm %q takes no parameters", ch.Algo)
		}
		return nil
	}
	var colls []sched.Collective
	for _, a := range algo.All() {
		if a.Name() == ch.Algo {
			colls = append(colls, a.Collective())
		}
	}
	for _, c := range sched.Collectives() {
		if algo.LookupDynamic(c, ch.Algo) != nil {
			if ch.Segment > 0 || ch.Radix > 0 {
				return fmt.Errorf("algorithm %q takes no parameters", ch.Algo)
			}
			return nil
		}
	}
	if len(colls) == 0 {
		return fmt.Errorf("no collective has an algorithm named %q (algorithms: %s; COLLECTIVE=ALGO forces one collective's)",
			ch.Algo, strings.Join(Names(), ", "))
	}
	for _, c := range colls {
		if err := checkParams(c, ch); err != nil {
			return err
		}
	}
	return nil
}

// Names returns the names of every algorithm of every collective, sorted,
// each once: those NamesOf gives for some collective.
func Names() []string {
	var names []string
	for _, c := range sched.Collectives() {
		names = append(names, NamesOf(c)...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// checkParams returns an error if ch gives a parameter that coll's
// algorithm ch.Algo (which exists) does not take.
func checkParams(coll sched.Collective, ch plan.Choice) error {
	t := takes()[key{coll, ch.Algo}]
	var bad []string
	if ch.Segment > 0 && !t.seg {
		bad = append(bad, "seg")
	}
	if ch.Radix > 0 && !t.radix {
		bad = append(bad, "k")
	}
	if len(bad) == 0 {
		return nil
	}
	var has []string
	if t.seg {
		has = append(has, "seg")
	}
	if t.radix {
		has = append(has, "k")
	}
	what := "no parameters"
	if len(has) > 0 {
		what = "only " + strings.Join(has, " and ")
	}
	return fmt.Errorf("%v algorithm %q takes %s, not %s", coll, ch.Algo, what, strings.Join(bad, " or "))
}

type key struct {
	coll sched.Collective
	name string
}

type params struct{ seg, radix bool }

// takes returns, for every algorithm, the parameters it takes. Only
// algorithms that tune parameters (algo.Tuner) take any; which ones is
// what Tune fills in for a large call on 8 ranks, given a chain as its
// tree so that the tree-packing algorithms can tune too.
var takes = sync.OnceValue(func() map[key]params {
	const n = 8
	tr := sched.Tree{Root: 0, Parent: make([]int, n), Weight: 1}
	for r := range tr.Parent {
		tr.Parent[r] = r - 1
	}
	trees := &sched.Trees{Tree: []sched.Tree{tr}}
	out := map[key]params{}
	for _, a := range algo.All() {
		var p params
		if t, ok := a.(algo.Tuner); ok {
			tp := t.Tune(sched.Params{Coll: a.Collective(), NRanks: n, Count: 16 << 20, Trees: trees}, 4, cost.Default())
			p = params{seg: tp.Segment > 0, radix: tp.Radix > 0}
		}
		out[key{a.Collective(), a.Name()}] = p
	}
	return out
})

// ParseAlgo reads a BRAID_ALGO value: comma-separated entries, each
// "ALGO[:PARAMS]" (force it wherever a collective has it) or
// "COLLECTIVE=ALGO[:PARAMS]" (force it for that collective). It returns
// the bare entry (zero if none) and the per-collective ones. Every name
// and parameter is checked: an unknown collective or algorithm, a
// parameter the algorithm does not take, a bare name no collective has, a
// second bare entry or a second entry for one collective is an error
// that quotes the entry.
func ParseAlgo(s string) (bare plan.Choice, perColl map[sched.Collective]plan.Choice, err error) {
	perColl = map[sched.Collective]plan.Choice{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || strings.Contains(k, ":") {
			// "ring" or "chain:seg=256K": no collective named.
			ch, err := plan.ParseChoice(part)
			if err == nil {
				err = CheckAny(ch)
			}
			if err == nil && bare.Algo != "" {
				err = fmt.Errorf("a second algorithm for every collective, after %q (force per collective: allreduce=%s,bcast=...)", bare, ch)
			}
			if err != nil {
				return plan.Choice{}, nil, fmt.Errorf("entry %q: %w", part, err)
			}
			bare = ch
			continue
		}
		c, err := sched.ParseCollective(k)
		if err != nil {
			return plan.Choice{}, nil, fmt.Errorf("entry %q: %w", part, err)
		}
		ch, err := plan.ParseChoice(v)
		if err == nil {
			err = Check(c, ch)
		}
		if prev, dup := perColl[c]; err == nil && dup {
			err = fmt.Errorf("%v is forced twice (%s and %s)", c, prev, ch)
		}
		if err != nil {
			return plan.Choice{}, nil, fmt.Errorf("entry %q: %w", part, err)
		}
		perColl[c] = ch
	}
	return bare, perColl, nil
}

// CheckTable returns an error, "tuning table FILE:LINE: ...", for the
// first entry of t whose choice Check refuses.
func CheckTable(t *plan.Table) error {
	if t == nil {
		return nil
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		if err := Check(e.Coll, e.Choice); err != nil {
			return fmt.Errorf("tuning table %s:%d: %w", t.Source, e.Line, err)
		}
	}
	return nil
}
