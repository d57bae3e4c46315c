package profile

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/braid-ccl/braid/internal/arrival"
)

// Patterns are the arrival patterns of one call name, measured from the
// arrival logs of every rank (Summary.Arrivals) with the imbalance metrics
// of "Efficient Process Arrival Pattern Aware Collective Communication for
// Deep Learning" (Alizadeh et al., EuroMPI/USA 2022): per call, the
// worst-case imbalance time Ω (latest minus earliest arrival) and the
// average-case imbalance time Δ̄ (mean distance from the mean arrival),
// §2.2; cluster-wide (over the communicator's ranks) and node-wide (within
// each host, averaged over the hosts, §4.3.2); averaged over the calls as
// the paper's Tables 1 and 2 average them. Times are µs.
type Patterns struct {
	Name  string
	Upper int64 // the calls' size bin (see SizeBin, BinUpper): (Upper/2, Upper] bytes
	Calls int   // calls whose every rank's arrival is in the logs
	Hosts int   // hosts of the largest communicator measured

	Worst, MaxWorst, Average float64 // cluster-wide: mean Ω, largest Ω, mean Δ̄
	NodeWorst, NodeAverage   float64 // node-wide: mean Ω, mean Δ̄

	// The imbalance factors Ω/α and Δ̄/α averaged over the calls, where
	// a call's α, its time once every rank is there, is the time from the
	// last arrival to the last return (Factored calls have α > 0).
	Factored                           int
	WorstFactor, AverageFactor         float64
	NodeWorstFactor, NodeAverageFactor float64
}

// Patterns measures the arrival pattern of every collective call that is
// in the arrival log of every rank of its communicator, by call name (in
// the order names first appear) and size bin (increasing).
func (r *Report) Patterns() []Patterns {
	type key struct{ comm, seq uint32 }
	type rec struct {
		a    Arrival
		host string
	}
	calls := map[key][]rec{}
	var order []key
	for _, s := range r.Ranks {
		for _, a := range s.Arrivals {
			k := key{a.Comm, a.Seq}
			if _, ok := calls[k]; !ok {
				order = append(order, k)
			}
			calls[k] = append(calls[k], rec{a, s.Host})
		}
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if a.comm != b.comm {
			return int(int64(a.comm) - int64(b.comm))
		}
		return int(int64(a.seq) - int64(b.seq))
	})
	by := map[string]*Patterns{}
	var names []string
	factors := map[string][2][]arrival.Factors{}
	for _, k := range order {
		rs := calls[k]
		n := rs[0].a.Group
		if len(rs) != n || n < 1 {
			continue // not every rank's log holds it
		}
		slices.SortFunc(rs, func(x, y rec) int { return x.a.Rank - y.a.Rank })
		t := make([]float64, n)
		hostIdx := make([]int, n)
		hosts := map[string]int{}
		var last, ret int64
		ok := true
		for i, x := range rs {
			if x.a.Rank != i || x.a.Name != rs[0].a.Name {
				ok = false
				break
			}
			t[i] = float64(x.a.ArriveNS-rs[0].a.ArriveNS) / 1e3
			h, seen := hosts[x.host]
			if !seen {
				h = len(hosts)
				hosts[x.host] = h
			}
			hostIdx[i] = h
			last = max(last, x.a.ArriveNS)
			if x.a.ReturnNS == 0 {
				ret = math.MinInt64 // a rank did not read its clock at the end: no α
			} else if ret != math.MinInt64 {
				ret = max(ret, x.a.ReturnNS)
			}
		}
		if !ok {
			continue
		}
		cl, err1 := arrival.Measure(t)
		nw, err2 := arrival.NodeWide(t, hostIdx)
		if err1 != nil || err2 != nil {
			continue
		}
		up := BinUpper(SizeBin(rs[0].a.Bytes))
		name := rs[0].a.Name + "\x00" + BinLabel(up)
		p := by[name]
		if p == nil {
			p = &Patterns{Name: rs[0].a.Name, Upper: up}
			by[name] = p
			names = append(names, name)
		}
		p.Calls++
		p.Hosts = max(p.Hosts, len(hosts))
		p.Worst += cl.Worst
		p.MaxWorst = max(p.MaxWorst, cl.Worst)
		p.Average += cl.Average
		p.NodeWorst += nw.Worst
		p.NodeAverage += nw.Average
		if alpha := float64(ret-last) / 1e3; ret != math.MinInt64 && alpha > 0 {
			f1, _ := cl.Factors(alpha)
			f2, _ := nw.Factors(alpha)
			fs := factors[name]
			fs[0], fs[1] = append(fs[0], f1), append(fs[1], f2)
			factors[name] = fs
		}
	}
	first := map[string]int{}
	for i, n := range names {
		if _, ok := first[by[n].Name]; !ok {
			first[by[n].Name] = i
		}
	}
	slices.SortStableFunc(names, func(a, b string) int {
		pa, pb := by[a], by[b]
		if pa.Name != pb.Name {
			return first[pa.Name] - first[pb.Name]
		}
		return int(pa.Upper - pb.Upper)
	})
	out := make([]Patterns, 0, len(names))
	for _, name := range names {
		p := by[name]
		c := float64(p.Calls)
		p.Worst, p.Average, p.NodeWorst, p.NodeAverage = p.Worst/c, p.Average/c, p.NodeWorst/c, p.NodeAverage/c
		fs := factors[name]
		p.Factored = len(fs[0])
		m1, m2 := arrival.MeanFactors(fs[0]), arrival.MeanFactors(fs[1])
		p.WorstFactor, p.AverageFactor = m1.Worst, m1.Average
		p.NodeWorstFactor, p.NodeAverageFactor = m2.Worst, m2.Average
		out = append(out, *p)
	}
	return out
}

// writePatterns writes the arrival patterns' table, or the spreads the
// ranks measured themselves where no call is in every rank's log.
func (r *Report) writePatterns(w io.Writer, ms []*Merged) {
	fmt.Fprintln(w, "\narrival patterns (imbalance metrics of \"Efficient Process Arrival Pattern Aware Collective")
	fmt.Fprintln(w, "Communication for Deep Learning\", EuroMPI/USA 2022, §2.2 and §4.3):")
	ps := r.Patterns()
	if len(ps) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "call\tbytes\tcalls\thosts\tΩ µs mean\tmax\tΔ̄ µs mean\tΩ/α\tΔ̄/α\tnode-wide Ω µs\tΔ̄ µs\tΩ/α\tΔ̄/α\t")
		for _, p := range ps {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Name, BinLabel(p.Upper), p.Calls, p.Hosts,
				usText(p.Worst), usText(p.MaxWorst), usText(p.Average), factorText(p.WorstFactor, p.Factored), factorText(p.AverageFactor, p.Factored),
				usText(p.NodeWorst), usText(p.NodeAverage), factorText(p.NodeWorstFactor, p.Factored), factorText(p.NodeAverageFactor, p.Factored))
		}
		tw.Flush()
		fmt.Fprintf(w, "(over the calls in every rank's arrival log: sequence numbers up to %d, then every %d-th; Ω: latest minus earliest arrival,\n", ArrivalAll, ArrivalEvery)
		fmt.Fprintln(w, "Δ̄: mean distance from the mean arrival; node-wide: within each host, averaged over hosts; α: last arrival to last return)")
		return
	}
	spread := false
	for _, m := range ms {
		if len(m.Spread) > 0 {
			spread = true
			mean, lo, hi := stats(m.Spread)
			fmt.Fprintf(w, "  %s: Ω mean %s µs over the ranks' calls through the shared area (ranks' means: min %s, max %s)\n", m.Label, usText(mean), usText(lo), usText(hi))
		}
	}
	if !spread {
		fmt.Fprintln(w, "  n/a: no collective call is in the arrival log of every rank of its communicator (give every rank's file)")
	}
}

func factorText(f float64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3g", f)
}
