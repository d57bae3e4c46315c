package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// Beyond the links, braid tune measures two figures of the cost model
// that the built-in model takes from the 16-core node (cost.Default):
//
//   - the host's memory rate (cost.Model.Memory), as DefaultMemory was
//     fitted: all the job's ranks run a large reduce-scatter by "direct"
//     at once, the algorithm whose memory traffic is best known (its
//     Moved closed form is checked against its programs, it reads every
//     large block once by single copy, and it was the fastest of the
//     node's runs the default rests on), and the rate is the bytes all
//     ranks move through memory, as cost.Model.Shared counts them, over
//     the time its latencies leave. A plain copy loop over the same
//     bytes in the same pieces, run by every rank at once and by one
//     rank alone, says whether the ranks contend for memory at all: with fewer ranks than cores and copies that scale
//     with the ranks, the figure is only a lower bound on the host's
//     rate, and the table keeps the default;
//   - the rate of one rank's thread (cost.Model.Core), as DefaultCore
//     was fitted: the same reduce-scatter's bytes a rank over its time,
//     in a job whose ranks do not contend (fewer ranks than cores, copies
//     that scale with the ranks);
//   - the per-message overhead (cost.Model.Overhead, LogP's o), from
//     small calls of algorithms whose steps exchange with different
//     numbers of peers: direct allreduce and allgather (every peer in
//     one step) against recursive doubling (one peer a step). Each
//     run's model cost is linear in the step latency α and in o; a
//     least-squares fit of both to the runs' times gives o. With two
//     ranks every step has one peer and o cannot be told apart.

const (
	// memoryBytes is the reduce-scatter's size (the whole vector, as
	// braid bench reports it) that the memory rate is measured with:
	// within the 4–64 MiB that DefaultMemory was fitted on, every block
	// above the transport's eager limit up to 128 ranks.
	memoryBytes = 16 << 20
	// copyBytes is each rank's source and destination of the copy loop,
	// copied copyReps times a round in pieces of copyPiece bytes: as
	// much as each rank's input to the reduce-scatter, in its segments
	// (algo.DirectSegment float32), which is how the shared-memory
	// transport's single copy moves them. (A copy of 1 MiB or more in
	// one piece is another regime: Go's copy then streams to memory
	// past the caches, with non-temporal stores.)
	copyBytes = memoryBytes
	copyPiece = algo.DirectSegment * 4
	copyReps  = 2
	// copyRounds is how many rounds of the copy loop each sweep of
	// braid tune (--reps) times; the fastest counts. A round is about
	// as long as a call of the reduce-scatter, so that both are as
	// likely to run undisturbed on a busy machine.
	copyRounds = 4
	// saturation: copies by k ranks at once that reach less than this
	// share of k times one rank's rate contend for something shared.
	saturation = 0.75
	// overheadElems is the elements per block of the overhead runs: an
	// allreduce of overheadElems·n float32, an allgather of
	// overheadElems per rank; every block non-empty, the bytes'
	// share of the time negligible.
	overheadElems = 16
)

// modelFit is what one tuning job measured of the model beyond its
// links; its rank 0 writes it beside its part of the table, as JSON.
type modelFit struct {
	Ranks    int         `json:"ranks"`
	Cores    int         `json:"cores"`
	Memory   memoryFit   `json:"memory"`
	Overhead overheadFit `json:"overhead"`
}

// memoryFit is a job's measurement of the host's memory rate.
type memoryFit struct {
	Skipped string  `json:"skipped,omitempty"` // why it was not measured
	Bytes   int64   `json:"bytes"`             // the reduce-scatter's size
	Secs    float64 `json:"secs"`              // its time, the slowest rank's mean, fastest of the sweeps
	Moved   float64 `json:"moved"`             // bytes each rank moves through memory (algo.Mover)
	Latency float64 `json:"latency"`           // its cost under the model's latencies alone
	Rate    float64 `json:"rate"`              // bytes per second, all ranks together; 0: not measured
	CopyAll float64 `json:"copy_all"`          // the copy loop, every rank at once, bytes per second together
	CopyOne float64 `json:"copy_one"`          // the copy loop, one rank alone
	// Saturated says whether Rate is the host's: the job has a rank per
	// core or more, or its ranks' copies contend (CopyAll below
	// saturation × ranks × CopyOne).
	Saturated bool `json:"saturated"`
}

// overheadFit is a job's measurement of the per-message overhead.
type overheadFit struct {
	Skipped string        `json:"skipped,omitempty"`
	Runs    []overheadRun `json:"runs,omitempty"`
	Alpha   float64       `json:"alpha"` // the fitted step latency, seconds
	O       float64       `json:"o"`     // the fitted overhead, seconds
	OK      bool          `json:"ok"`
}

// overheadRun is one timed run of the overhead fit and its model cost's
// terms: Secs ≈ C0 + A·α + O·o.
type overheadRun struct {
	Coll  string  `json:"coll"`
	Algo  string  `json:"algo"`
	Bytes int64   `json:"bytes"`
	Secs  float64 `json:"secs"`
	C0    float64 `json:"c0"`
	A     float64 `json:"a"`
	O     float64 `json:"o"`
}

// measureModel measures the memory rate and the overhead on c (see the
// comment above), after the links of m, and returns m with the figures
// it could measure set.
func measureModel(ctx context.Context, c *braid.Comm, forcer *bench.Forcer, budget time.Duration, reps int, transport string, m cost.Model) (cost.Model, modelFit, error) {
	fit := modelFit{Ranks: c.Size(), Cores: braid.ThisMachine().Cores}
	var err error
	if fit.Overhead, err = measureOverhead(ctx, c, forcer, budget, reps, transport, m); err != nil {
		return m, fit, fmt.Errorf("measuring the per-message overhead: %w", err)
	}
	if fit.Overhead.OK {
		m.Overhead = fit.Overhead.O
	}
	if fit.Memory, err = measureMemory(ctx, c, forcer, budget, reps, transport, m, fit.Cores); err != nil {
		return m, fit, fmt.Errorf("measuring the host's memory rate: %w", err)
	}
	if fit.Memory.Rate > 0 {
		m.Memory = fit.Memory.Rate
	}
	return m, fit, nil
}

// oneHostShm returns why the job's figures would not be those of ranks
// sharing a host through its shared memory, or "".
func oneHostShm(c *braid.Comm, transport string) string {
	switch {
	case c.Hosts() > 1:
		return fmt.Sprintf("the job spans %d hosts", c.Hosts())
	case transport == "tcp":
		return "the job's ranks talk over tcp"
	}
	return ""
}

// overheadCases returns the runs of the overhead fit on n ranks: each
// with its params and its model cost's terms under m.
func overheadCases(n int, m cost.Model) ([]overheadRun, []sched.Params, error) {
	var runs []overheadRun
	var ps []sched.Params
	for _, coll := range []sched.Collective{sched.Allreduce, sched.Allgather} {
		p := sched.Params{Coll: coll, NRanks: n, Count: overheadElems}
		bytes := int64(overheadElems * 4 * n)
		if coll == sched.Allreduce {
			p.Count = overheadElems * n
		}
		for _, name := range []string{"direct", "recdouble"} {
			a, err := algo.Lookup(coll, name)
			if err != nil {
				return nil, nil, err
			}
			k, ok := a.(algo.Coster)
			if !ok {
				return nil, nil, fmt.Errorf("%v %s has no cost model", coll, name)
			}
			c0, ca, co := costTerms(k, p, 4, m)
			runs = append(runs, overheadRun{Coll: coll.String(), Algo: name, Bytes: bytes, C0: c0, A: ca, O: co})
			ps = append(ps, p)
		}
	}
	return runs, ps, nil
}

// costTerms returns k's cost of p under m, with es-byte elements, as
// c0 + a·α + o·O for a step latency α on every link and a per-message
// overhead O: c0 its cost with neither, a and o its rate of growth in
// each. The cost is linear in both for the runs of the overhead fit
// (small calls on one host, in one segment).
func costTerms(k algo.Coster, p sched.Params, es int, m cost.Model) (c0, a, o float64) {
	const unit = 1e-6
	zero := m
	for c := range zero.Links {
		zero.Links[c].Alpha = 0
	}
	zero.Overhead = 0
	withA, withO := zero, zero
	for c := range withA.Links {
		withA.Links[c].Alpha = unit
	}
	withO.Overhead = unit
	c0 = k.Cost(p, es, zero)
	return c0, (k.Cost(p, es, withA) - c0) / unit, (k.Cost(p, es, withO) - c0) / unit
}

// fitOverhead returns the step latency α and overhead o that fit the
// runs' times best (least squares on Secs − C0 = A·α + O·o), neither
// below 0 (a negative one is set to 0 and the other fitted alone). ok is
// false when the runs cannot tell α and o apart: their terms are
// proportional (every step has one peer) or there are fewer than two.
func fitOverhead(runs []overheadRun) (alpha, o float64, ok bool) {
	var saa, soo, sao, say, soy float64
	for _, r := range runs {
		y := r.Secs - r.C0
		saa += r.A * r.A
		soo += r.O * r.O
		sao += r.A * r.O
		say += r.A * y
		soy += r.O * y
	}
	det := saa*soo - sao*sao
	if len(runs) < 2 || saa <= 0 || soo <= 0 || det <= 1e-9*saa*soo {
		return 0, 0, false
	}
	alpha = (say*soo - soy*sao) / det
	o = (soy*saa - say*sao) / det
	switch {
	case o < 0:
		o, alpha = 0, max(say/saa, 0)
	case alpha < 0:
		alpha, o = 0, max(soy/soo, 0)
	}
	return alpha, o, true
}

// measureOverhead times the overhead fit's runs (the fastest of reps
// sweeps, each the slowest rank's mean) and fits α and o to them.
func measureOverhead(ctx context.Context, c *braid.Comm, forcer *bench.Forcer, budget time.Duration, reps int, transport string, m cost.Model) (overheadFit, error) {
	var f overheadFit
	if why := oneHostShm(c, transport); why != "" {
		f.Skipped = why
		return f, nil
	}
	runs, _, err := overheadCases(c.Size(), m)
	if err != nil {
		return f, err
	}
	if _, _, ok := fitOverhead(runs); !ok {
		// The terms alone decide (the times are 0 here).
		f.Skipped = fmt.Sprintf("on %d ranks every step of these algorithms has one peer", c.Size())
		return f, nil
	}
	for i := range runs {
		runs[i].Secs = math.Inf(1)
	}
	// Each sweep times both collectives, so that the fastest of each
	// run's sweeps are spread over the same stretch of time.
	for range reps {
		for i := 0; i < len(runs); i += 2 {
			coll, err := sched.ParseCollective(runs[i].Coll)
			if err != nil {
				return f, err
			}
			cfg := bench.Config{Coll: coll, SizeList: []int64{runs[i].Bytes}, DType: braid.Float32, Op: braid.Sum,
				Budget: budget, Algos: []string{runs[i].Algo, runs[i+1].Algo}, Forcer: forcer}
			rows, err := bench.Run(ctx, c, cfg)
			if err != nil {
				return f, err
			}
			for _, row := range rows {
				if row.Err != "" || row.Iters == 0 {
					return f, fmt.Errorf("%v %s of %d B on %d ranks: %s", coll, row.Algo, row.Bytes, c.Size(), row.Err)
				}
				for j := i; j < i+2; j++ {
					if runs[j].Algo == row.Algo {
						runs[j].Secs = min(runs[j].Secs, row.MaxUs*1e-6)
					}
				}
			}
		}
	}
	f.Runs = runs
	f.Alpha, f.O, f.OK = fitOverhead(runs)
	return f, nil
}

// memoryRate returns the bytes per second that k ranks moving moved
// bytes each at once reach in secs, of which lat are latencies (the
// inverse of cost.Model.Bounded's memory term), or 0 if secs leaves no
// time for the bytes.
func memoryRate(k int, moved, secs, lat float64) float64 {
	if k < 1 || moved <= 0 || !(secs > lat) || math.IsInf(secs, 0) {
		return 0
	}
	return float64(k) * moved / (secs - lat)
}

// saturated reports whether k ranks on a host of cores cores contend
// for it: there are as many ranks as cores or more, or their copies at
// once reach less than saturation × k times one rank's alone.
func saturated(k, cores int, all, one float64) bool {
	return k >= cores || all > 0 && one > 0 && all < saturation*float64(k)*one
}

// measureMemory times a direct reduce-scatter of memoryBytes (the
// fastest of reps sweeps) and the copy loop, and derives the host's
// memory rate from the first.
func measureMemory(ctx context.Context, c *braid.Comm, forcer *bench.Forcer, budget time.Duration, reps int, transport string, m cost.Model, cores int) (memoryFit, error) {
	var f memoryFit
	if why := oneHostShm(c, transport); why != "" {
		f.Skipped = why
		return f, nil
	}
	n := c.Size()
	cfg := bench.Config{Coll: sched.ReduceScatter, SizeList: []int64{memoryBytes}, DType: braid.Float32, Op: braid.Sum,
		Budget: budget, Algos: []string{"direct"}, Forcer: forcer}
	f.Secs = math.Inf(1)
	for range reps {
		rows, err := bench.Run(ctx, c, cfg)
		if err != nil {
			return f, err
		}
		if len(rows) != 1 || rows[0].Err != "" || rows[0].Iters == 0 {
			return f, fmt.Errorf("reducescatter direct of %d B on %d ranks: %v", memoryBytes, n, rows)
		}
		f.Bytes, f.Secs = rows[0].Bytes, min(f.Secs, rows[0].MaxUs*1e-6)
	}
	a, err := algo.Lookup(sched.ReduceScatter, "direct")
	if err != nil {
		return f, err
	}
	mv, ok1 := a.(algo.Mover)
	k, ok2 := a.(algo.Coster)
	if !ok1 || !ok2 {
		return f, fmt.Errorf("reducescatter direct states no memory traffic")
	}
	p := sched.Params{Coll: sched.ReduceScatter, NRanks: n, Count: int(f.Bytes / 4 / int64(n))}
	f.Moved = mv.Moved(p, 4, m)
	f.Latency = k.Cost(p, 4, m.Latencies())
	f.Rate = memoryRate(n, f.Moved, f.Secs, f.Latency)
	if f.CopyAll, f.CopyOne, err = copyRates(ctx, c, copyRounds*reps); err != nil {
		return f, err
	}
	f.Saturated = saturated(n, cores, f.CopyAll, f.CopyOne)
	return f, nil
}

// copyRates returns the bytes per second that every rank of c copying
// copyBytes (in pieces of copyPiece, copyReps times) at once reach
// together, and that rank 0 reaches alone, each the fastest of rounds
// rounds timed from a barrier to the slowest rank's end.
func copyRates(ctx context.Context, c *braid.Comm, rounds int) (all, one float64, err error) {
	src, dst := make([]byte, copyBytes), make([]byte, copyBytes)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	timed := func(alone bool) (float64, error) {
		best := math.Inf(1)
		for range rounds {
			if err := c.Barrier(ctx); err != nil {
				return 0, err
			}
			t0 := time.Now()
			if !alone || c.Rank() == 0 {
				for range copyReps {
					for off := 0; off < copyBytes; off += copyPiece {
						copy(dst[off:off+copyPiece], src[off:off+copyPiece])
					}
				}
			}
			v := []float64{time.Since(t0).Seconds()}
			if alone && c.Rank() != 0 {
				v[0] = 0
			}
			if err := c.Allreduce(ctx, v, v, braid.Max); err != nil {
				return 0, err
			}
			best = min(best, v[0])
		}
		return best, nil
	}
	tAll, err := timed(false)
	if err != nil {
		return 0, 0, err
	}
	tOne, err := timed(true)
	if err != nil {
		return 0, 0, err
	}
	bytes := float64(copyBytes * copyReps)
	return float64(c.Size()) * bytes / tAll, bytes / tOne, nil
}

// writeFit writes f as JSON to file.
func writeFit(file string, f modelFit) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// readFit reads what writeFit wrote.
func readFit(file string) (modelFit, error) {
	var f modelFit
	b, err := os.ReadFile(file)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", file, err)
	}
	return f, nil
}

// combineFits returns the memory rate, a thread's rate and the overhead
// a table gets from its jobs' fits, each where none is measured def's,
// and comment lines that say where each figure came from. The memory rate
// is the largest among the jobs whose ranks contend for the host (a limit
// that other causes only lower); a thread's rate (cost.Model.Core) is the
// largest rate a rank reached in the jobs whose ranks do not contend,
// the same reduce-scatter's bytes a rank over its time, as DefaultCore was
// fitted; the overhead is that of the job with the most ranks it was
// measured on (it grows with the ranks that poll at once, and the planner
// needs it where steps have many peers).
func combineFits(fits []modelFit, def cost.Model) (memory, core, overhead float64, notes []string) {
	memory, core, overhead = def.Memory, def.Core, def.Overhead
	memFrom, coreFrom, ohFrom := -1, -1, -1
	for i, f := range fits {
		mf, of := f.Memory, f.Overhead
		switch {
		case mf.Skipped != "":
			notes = append(notes, fmt.Sprintf("memory, %d ranks: not measured (%s)", f.Ranks, mf.Skipped))
		default:
			state := "the ranks contend for memory"
			if f.Ranks >= f.Cores {
				state = fmt.Sprintf("%d ranks on %d cores", f.Ranks, f.Cores)
			} else if !mf.Saturated {
				state = "they do not contend: a lower bound"
			}
			notes = append(notes, fmt.Sprintf("memory, %d ranks: reducescatter direct of %s in %s, %s a rank through memory: %s; copy loop %s together, %s for one rank alone (%.2f×; %s)",
				f.Ranks, plan.FormatSize(mf.Bytes), usString(mf.Secs), plan.FormatSize(int64(mf.Moved)), rateString(mf.Rate),
				rateString(mf.CopyAll), rateString(mf.CopyOne), mf.CopyAll/mf.CopyOne, state))
			if mf.Saturated && mf.Rate > 0 && (memFrom < 0 || mf.Rate > memory) {
				memory, memFrom = mf.Rate, i
			}
			if r := mf.Rate / float64(max(f.Ranks, 1)); !mf.Saturated && f.Ranks < f.Cores && r > 0 && (coreFrom < 0 || r > core) {
				core, coreFrom = r, i
			}
		}
		switch {
		case of.Skipped != "":
			notes = append(notes, fmt.Sprintf("overhead, %d ranks: not measured (%s)", f.Ranks, of.Skipped))
		case of.OK:
			s := fmt.Sprintf("overhead, %d ranks:", f.Ranks)
			for _, r := range of.Runs {
				s += fmt.Sprintf(" %s %s %s;", r.Coll, r.Algo, usString(r.Secs))
			}
			notes = append(notes, fmt.Sprintf("%s fit: step α %s, o %s", s, usString(of.Alpha), usString(of.O)))
			if ohFrom < 0 || f.Ranks > fits[ohFrom].Ranks {
				overhead, ohFrom = of.O, i
			}
		}
	}
	if memFrom >= 0 {
		notes = append(notes, fmt.Sprintf("memory: the %d-rank figure", fits[memFrom].Ranks))
	} else {
		cores := 0
		for _, f := range fits {
			cores = max(cores, f.Cores)
		}
		notes = append(notes, fmt.Sprintf("memory: the built-in %s (no job measured the host's rate; tune with -n %d, a rank per core)", rateString(def.Memory), cores))
	}
	if coreFrom >= 0 {
		notes = append(notes, fmt.Sprintf("core: a rank's rate in the %d-rank job, %s", fits[coreFrom].Ranks, rateString(core)))
	} else {
		notes = append(notes, fmt.Sprintf("core: the built-in %s (no job of fewer ranks than cores measured a rank's rate alone; tune with -n 2)", rateString(def.Core)))
	}
	if ohFrom >= 0 {
		notes = append(notes, fmt.Sprintf("overhead: the %d-rank figure", fits[ohFrom].Ranks))
	} else {
		notes = append(notes, fmt.Sprintf("overhead: the built-in %s (no job measured it: it needs 3 ranks or more on one host)", usString(def.Overhead)))
	}
	return memory, core, overhead, notes
}

// usString writes seconds in µs to three significant figures, as a
// table's times are written ("us").
func usString(s float64) string { return plan.FormatMicros(s, "us") }

func rateString(r float64) string { return fmt.Sprintf("%.3gGB/s", r/1e9) }
