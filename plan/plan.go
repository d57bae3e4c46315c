package plan

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// Request describes a call to plan.
type Request struct {
	Params   sched.Params // the call; Segment and Radix are 0
	ElemSize int          // bytes per element
}

// Bytes returns the bytes of the call's buffer as Params.Count counts
// them: the whole vector for allreduce, reduce and bcast, one rank's block
// for the others.
func (r Request) Bytes() int64 { return int64(r.Params.Count) * int64(r.ElemSize) }

// Size returns the size braid bench reports and tuning tables are keyed
// by: the whole vector (allgather and gather output, reducescatter and
// scatter input, one rank's alltoall buffer).
func (r Request) Size() int64 { return Size(r.Params, r.ElemSize) }

// Size returns p's size in bytes as braid bench reports it (see
// Request.Size).
func Size(p sched.Params, es int) int64 {
	b := int64(p.Count) * int64(es)
	switch p.Coll {
	case sched.Allgather, sched.Gather, sched.ReduceScatter, sched.Scatter, sched.Alltoall:
		b *= int64(p.NRanks)
	}
	return b
}

// Candidate is an algorithm that can run a request, with its parameters
// and cost under the planner's model.
type Candidate struct {
	Name   string
	Params sched.Params // the request's params with the algorithm's parameters tuned under the model
	Cost   float64      // the model's seconds; NaN if the algorithm has no cost model
	// Fused, on device buffers, makes the candidate a fused kernel rather
	// than a schedule (DeviceModel costs it).
	Fused *Fused
}

// Decision is a planner's choice.
type Decision struct {
	Algo   string
	Params sched.Params // what to generate the schedule with
	Reason string       // why, for BRAID_DEBUG=info
	// Source says where the choice came from, for the caller to act on
	// (Reason is for people): a tuning table's entry, for instance, fixes
	// the segment that MIAD would otherwise adapt.
	Source Source
	// Fixed asks the communicator to keep this choice as it is: no
	// adaptation at run time by arrival statistics (a benchmark that
	// times one algorithm sets it).
	Fixed bool
	Fused *Fused // the chosen candidate's fused kernel, if it is one
}

// Source is where a Decision came from.
type Source uint8

// The sources of a decision. The zero value is a Planner's own choice
// that does not say how it chose (a Planner outside this package).
const (
	FromPlanner Source = iota // a Planner that does not set Source
	FromModel                 // the lowest cost under the model (Default)
	FromTable                 // a tuning table's entry (Table.Choose)
	FromRules                 // Rules' size thresholds, or the only or first candidate
	FromForce                 // forced: BRAID_ALGO, DeviceOptions.Algo, or a Planner that times one algorithm
)

// String returns the source's name.
func (s Source) String() string {
	switch s {
	case FromPlanner:
		return "planner"
	case FromModel:
		return "model"
	case FromTable:
		return "table"
	case FromRules:
		return "rules"
	case FromForce:
		return "forced"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// Planner picks one of the candidates (the algorithms that support the
// call) for a request. It must return one of the candidates' names.
type Planner interface {
	Plan(r Request, cand []Candidate) Decision
}

// Default is Braid's planner. In order:
//
//  1. a tuning table entry for the collective, rank count, host count and
//     size, if Table has one whose algorithm is a candidate;
//  2. the candidate with the lowest cost under the model (candidates
//     carry their costs, computed by the caller with the model Model);
//  3. Rules, for candidates without a cost model.
//
// The zero value has no table and plans by the model alone.
type Default struct {
	Table *Table
}

// Plan implements Planner.
func (d Default) Plan(r Request, cand []Candidate) Decision {
	if len(cand) == 0 {
		return Decision{}
	}
	if dec, ok := d.Table.Choose(r, r.Params.Layout.NHosts(), cand); ok {
		return dec
	}
	var costed []Candidate
	for _, c := range cand {
		if !math.IsNaN(c.Cost) && !math.IsInf(c.Cost, 0) && c.Cost >= 0 {
			costed = append(costed, c)
		}
	}
	if len(costed) == 0 {
		return Rules{}.Plan(r, cand)
	}
	slices.SortStableFunc(costed, func(a, b Candidate) int {
		switch {
		case a.Cost < b.Cost:
			return -1
		case a.Cost > b.Cost:
			return 1
		}
		return 0
	})
	best := costed[0]
	var sb strings.Builder
	fmt.Fprintf(&sb, "cost model: ")
	for i, c := range costed {
		if i > 0 {
			sb.WriteString(" < ")
		}
		sb.WriteString(c.Name)
		if s := paramString(c.Params, r.ElemSize); s != "" {
			sb.WriteString(":" + s)
		}
		if c.Fused != nil {
			fmt.Fprintf(&sb, " [%s]", c.Fused)
		}
		fmt.Fprintf(&sb, " %s", formatSeconds(c.Cost))
	}
	return Decision{Algo: best.Name, Params: best.Params, Reason: sb.String(), Source: FromModel, Fused: best.Fused}
}

// paramString formats p's tuning parameters as a Choice writes them.
func paramString(p sched.Params, es int) string {
	var parts []string
	if p.Segment > 0 {
		parts = append(parts, "seg="+FormatSize(int64(p.Segment)*int64(es)))
	}
	if p.Radix > 0 {
		parts = append(parts, fmt.Sprintf("k=%d", p.Radix))
	}
	return strings.Join(parts, ":")
}

// formatSeconds writes a duration in µs with three significant figures.
func formatSeconds(s float64) string { return FormatMicros(s, "µs") }

// FormatMicros writes s seconds in microseconds to three significant
// figures, followed by unit ("µs" in messages, "us" where a tuning table's
// plain text is written).
func FormatMicros(s float64, unit string) string {
	us := s * 1e6
	switch {
	case us < 10:
		return fmt.Sprintf("%.2f%s", us, unit)
	case us < 100:
		return fmt.Sprintf("%.1f%s", us, unit)
	}
	return fmt.Sprintf("%.0f%s", us, unit)
}

// Model returns the model a Default planner's caller should cost
// candidates with: the table's measured figures where it has them, the
// built-in figures otherwise.
func (d Default) Model() cost.Model {
	if d.Table != nil && d.Table.Model != nil {
		return *d.Table.Model
	}
	return cost.Default()
}

// Choose returns the decision of t's entry for r on hosts hosts, if it
// has one and the entry's algorithm is among the candidates: that
// candidate, with the entry's parameters applied, and its fused kernel
// where it is one. A device communicator, on one host, asks with hosts 1;
// Default.Plan asks first with the request's hosts. A nil table has no
// entry.
func (t *Table) Choose(r Request, hosts int, cand []Candidate) (Decision, bool) {
	e := t.Lookup(r.Params.Coll, r.Params.NRanks, hosts, r.Size())
	if e == nil {
		return Decision{}, false
	}
	for _, c := range cand {
		if c.Name == e.Choice.Algo {
			p := e.Choice.Apply(c.Params, r.ElemSize)
			return Decision{Algo: c.Name, Params: p, Reason: fmt.Sprintf("tuning table %s: %s", t.Source, e), Source: FromTable, Fused: c.Fused}, true
		}
	}
	return Decision{}, false
}
