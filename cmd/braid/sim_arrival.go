package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/braid-ccl/braid/internal/arrival"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sim"
)

// simRow is one algorithm of braid sim: the variant it picked, balanced,
// or why it could not run.
type simRow struct {
	name, desc string
	res        *sim.Result
	again      func(sim.Config) (*sim.Result, error)
	err        error
}

// arrivals is what braid sim's --imbalance or --start asked for.
type arrivals struct {
	mif     float64   // --imbalance: draw patterns (0: --start instead)
	nodeMIF float64   // --node-imbalance: each rank's own part when nodes is set
	nodes   bool      // --node-imbalance given: draw by node (arrival.DrawNodes)
	start   []float64 // --start: the one pattern, seconds
	from    string    // --start's value, for messages
	seed    uint64
	trials  int
	alpha   string // --imbalance-alpha: bench.AlphaP2P or bench.AlphaCollective
}

// parseStart reads --start: offsets in microseconds, one per rank, as a
// comma-separated list or a file of numbers separated by commas, blanks
// or lines (# starts a comment). A value that exists as a file is read as
// one.
func parseStart(spec string) ([]float64, error) {
	text := spec
	if st, err := os.Stat(spec); err == nil && !st.IsDir() {
		b, err := os.ReadFile(spec)
		if err != nil {
			return nil, usageError{fmt.Sprintf("sim: --start %s: %v", spec, err)}
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			l, _, _ = strings.Cut(l, "#")
			lines = append(lines, l)
		}
		text = strings.Join(lines, "\n")
	}
	words := strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	if len(words) == 0 {
		return nil, usageError{fmt.Sprintf("sim: --start %q: no offsets (want microseconds per rank, e.g. 0,10,250, or a file of them)", spec)}
	}
	start := make([]float64, len(words))
	for r, w := range words {
		us, err := strconv.ParseFloat(w, 64)
		if err != nil || !(us >= 0) || math.IsInf(us, 0) {
			return nil, usageError{fmt.Sprintf("sim: --start %q: offset %q of rank %d is not a number of microseconds ≥ 0 (and no file %s exists)", spec, w, r, spec)}
		}
		start[r] = us * 1e-6
	}
	return start, nil
}

// runArrivals times every algorithm of rows again under process arrival
// patterns, each in the variant it picked balanced (its segment is not
// re-tuned for the pattern, as a planner that does not know arrivals
// would not), and prints the patterns' imbalance and each algorithm's
// latency as the PAP-aware collectives paper (Alizadeh et al.,
// EuroMPI/USA 2022, §6.1) measures it: per rank from its own arrival to
// its exit, averaged over ranks (sim.Result.AvgLatency), and over the
// patterns. α, the message time of the imbalance factors and of the
// draw, is by default the paper's (§2.2): one point-to-point message of
// size bytes between ranks 0 and 1 of net, half a simulated ping-pong
// (sim.MessageTime with cfg's overhead), the pair and the definition of
// braid bench --imbalance. With a.alpha bench.AlphaCollective it is the
// smallest balanced average latency among the algorithms, as braid bench
// --imbalance-alpha collective takes it. host[r] numbers rank r's node: with
// several nodes the node-wide imbalance (§4.3.2) is printed too, and
// --node-imbalance draws the patterns by node (arrival.DrawNodes).
func runArrivals(w io.Writer, rows []simRow, net *sim.Network, size int64, cfg sim.Config, host []int, a arrivals) error {
	n := len(host)
	alpha, what, err := simAlpha(rows, net, size, cfg, a.alpha)
	if err != nil {
		return err
	}
	var patterns [][]float64
	switch {
	case a.nodes:
		rng := rand.New(rand.NewPCG(a.seed, 0))
		for range a.trials {
			p, err := arrival.DrawNodes(rng, host, a.mif, a.nodeMIF, alpha)
			if err != nil {
				return err
			}
			patterns = append(patterns, p)
		}
		fmt.Fprintf(w, "\narrival patterns: %d drawn with seed %d, each node's offset uniform in [0, MIF × α], MIF %g, plus each rank's own uniform in [0, NMIF × α], NMIF %g, α %.2f us (%s)\n",
			len(patterns), a.seed, a.mif, a.nodeMIF, alpha*1e6, what)
	case a.mif > 0:
		rng := rand.New(rand.NewPCG(a.seed, 0))
		for range a.trials {
			p, err := arrival.Draw(rng, n, a.mif, alpha)
			if err != nil {
				return err
			}
			patterns = append(patterns, p)
		}
		fmt.Fprintf(w, "\narrival patterns: %d drawn with seed %d, each rank's offset uniform in [0, MIF × α], MIF %g, α %.2f us (%s)\n",
			len(patterns), a.seed, a.mif, alpha*1e6, what)
	default:
		patterns = [][]float64{a.start}
		fmt.Fprintf(w, "\narrival pattern: --start %s, α %.2f us (%s)\n", a.from, alpha*1e6, what)
	}
	var imb, nodeImb arrival.Imbalance
	var fs, nfs []arrival.Factors
	for _, p := range patterns {
		nw, err := arrival.NodeWide(p, host)
		if err != nil {
			return err
		}
		nf, err := nw.Factors(alpha)
		if err != nil {
			return err
		}
		nodeImb.Worst += nw.Worst / float64(len(patterns))
		nodeImb.Average += nw.Average / float64(len(patterns))
		nfs = append(nfs, nf)
		m, err := arrival.Measure(p)
		if err != nil {
			return err
		}
		f, err := m.Factors(alpha)
		if err != nil {
			return err
		}
		imb.Worst += m.Worst / float64(len(patterns))
		imb.Average += m.Average / float64(len(patterns))
		imb.Mean += (m.Last - m.Mean) / float64(len(patterns)) // the mean wait for the last arrival
		fs = append(fs, f)
	}
	f := arrival.MeanFactors(fs)
	fmt.Fprintf(w, "imbalance: worst-case Ω %.1f us (factor Ω/α %.2f), average-case Δ̄ %.1f us (factor Δ̄/α %.2f)\n",
		imb.Worst*1e6, f.Worst, imb.Average*1e6, f.Average)
	if nodes := slices.Max(host) + 1; nodes > 1 && nodes < n {
		nf := arrival.MeanFactors(nfs)
		fmt.Fprintf(w, "node-wide imbalance (each node's, averaged over the %d nodes): worst-case Ω %.1f us (factor Ω/α %.2f), average-case Δ̄ %.1f us (factor Δ̄/α %.2f)\n",
			nodes, nodeImb.Worst*1e6, nf.Worst, nodeImb.Average*1e6, nf.Average)
	}
	// No allreduce, arrival-aware or not, can end on a rank before the last
	// rank's data reaches it: its mean latency is at least the mean of
	// last − a_i, which is last − ā.
	fmt.Fprintf(w, "mean wait for the last arrival (last − ā, a floor on any allreduce's arrival latency): %.1f us\n", imb.Mean*1e6)

	type out struct {
		avg, max, after float64
		err             error
	}
	outs := make([]out, len(rows))
	best := math.Inf(1)
	for i, r := range rows {
		if r.err != nil {
			continue
		}
		var o out
		for _, p := range patterns {
			c := cfg
			c.Timeline = false
			c.Start = p
			res, err := r.again(c)
			if err != nil {
				o.err = err
				break
			}
			k := float64(len(patterns))
			o.avg += res.AvgLatency() / k
			o.max += res.MaxLatency() / k
			o.after += res.AfterLast() / k
		}
		outs[i] = o
		if o.err == nil {
			best = min(best, o.avg)
		}
	}
	fmt.Fprintf(w, "%-16s %12s %12s %8s %12s %14s %8s\n", "algorithm", "balanced(us)", "arrival(us)", "growth", "max(us)", "after-last(us)", "vs best")
	for i, r := range rows {
		o := outs[i]
		switch {
		case r.err != nil:
			continue // reported above
		case o.err != nil:
			fmt.Fprintf(w, "%-16s %v\n", r.name, o.err)
			continue
		}
		bal := r.res.AvgLatency()
		fmt.Fprintf(w, "%-16s %12.1f %12.1f %7.2fx %12.1f %14.1f %8.3f\n", r.name, bal*1e6, o.avg*1e6, o.avg/bal, o.max*1e6, o.after*1e6, o.avg/best)
	}
	return nil
}

// simAlpha returns runArrivals' α in seconds and what it is, in words: by
// definition def, bench.AlphaP2P (one message of size bytes between ranks
// 0 and 1 of net) or bench.AlphaCollective (the smallest balanced average
// latency of rows).
func simAlpha(rows []simRow, net *sim.Network, size int64, cfg sim.Config, def string) (float64, string, error) {
	if def == bench.AlphaCollective {
		alpha := math.Inf(1)
		for _, r := range rows {
			if r.err == nil {
				alpha = min(alpha, r.res.AvgLatency())
			}
		}
		if math.IsInf(alpha, 1) {
			return 0, "", fmt.Errorf("sim: no algorithm ran, so there is no balanced latency to scale the imbalance by (α collective)")
		}
		return alpha, "the fastest balanced average latency, --imbalance-alpha collective", nil
	}
	alpha, err := sim.MessageTime(context.Background(), net, cfg, 0, 1, size)
	if err != nil {
		return 0, "", fmt.Errorf("sim: α, one message between ranks 0 and 1: %w", err)
	}
	return alpha, fmt.Sprintf("one point-to-point message of %s between ranks 0 and 1, half a simulated ping-pong", plan.FormatSize(size)), nil
}
