package profile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/braid-ccl/braid/internal/size"
)

// Report is the profile of several ranks of one job, merged.
type Report struct {
	Ranks []*Summary // by rank
	Files []string   // the summary files, in the same order
}

// Load reads the summary files that paths name: a summary file (PATH.RANK),
// or the prefix PATH that BRAID_PROFILE gave, which stands for every
// PATH.RANK beside it. Its errors name the file.
func Load(paths []string) (*Report, error) {
	if len(paths) == 0 {
		return nil, errors.New("no profile given")
	}
	var files []string
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			files = append(files, p)
			continue
		}
		ranks, err := RankFiles(p)
		if err != nil {
			return nil, err
		}
		files = append(files, ranks...)
	}
	r := &Report{}
	seen := map[int]string{}
	for _, f := range files {
		s, err := ReadSummary(f)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[s.Rank]; dup {
			return nil, fmt.Errorf("%s and %s both hold rank %d: give the files of one run", prev, f, s.Rank)
		}
		seen[s.Rank] = f
		if len(r.Ranks) > 0 && r.Ranks[0].Size != s.Size {
			return nil, fmt.Errorf("%s is a rank of %d ranks, %s of %d: give the files of one run", f, s.Size, r.Files[0], r.Ranks[0].Size)
		}
		r.Ranks = append(r.Ranks, s)
		r.Files = append(r.Files, f)
	}
	idx := make([]int, len(r.Ranks))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return r.Ranks[a].Rank - r.Ranks[b].Rank })
	ranks, names := make([]*Summary, len(idx)), make([]string, len(idx))
	for i, j := range idx {
		ranks[i], names[i] = r.Ranks[j], r.Files[j]
	}
	r.Ranks, r.Files = ranks, names
	return r, nil
}

// RankFiles returns the summary files of the prefix path: path.0, path.1,
// ... that exist, by rank.
func RankFiles(path string) ([]string, error) {
	dir, pre := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, notFound{fmt.Sprintf("%s: neither a profile nor the prefix of one: %v", path, err)}
	}
	type rf struct {
		rank int
		name string
	}
	var found []rf
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), pre+".")
		if !ok || e.IsDir() {
			continue
		}
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 && strconv.Itoa(n) == rest {
			found = append(found, rf{n, filepath.Join(dir, e.Name())})
		}
	}
	if len(found) == 0 {
		return nil, notFound{fmt.Sprintf("no profile %s nor %s.RANK files", path, path)}
	}
	slices.SortFunc(found, func(a, b rf) int { return a.rank - b.rank })
	out := make([]string, len(found))
	for i, f := range found {
		out[i] = f.name
	}
	return out, nil
}

// notFound is the error of a profile that is not there; it is
// fs.ErrNotExist.
type notFound struct{ msg string }

func (e notFound) Error() string { return e.msg }
func (e notFound) Unwrap() error { return fs.ErrNotExist }

// Label is how a report names a call: the method's name, "iallreduce" for
// the non-blocking one.
func (c *CallStats) Label() string {
	if c.Async {
		return "i" + c.Name
	}
	return c.Name
}

// Merged is one call's figures over the ranks.
type Merged struct {
	Label  string
	Kind   string
	Async  bool
	Calls  uint64 // over all ranks
	Failed uint64
	Bytes  uint64
	Shares []float64 // per rank in Report.Ranks order (0 where a rank never made the call)
	MeanUs float64   // per call, over every rank's calls
	MinUs  float64
	MaxUs  float64
	SpanUs float64
	WaitUs float64
	Waits  uint64
	Hist   map[int64]uint64 // calls per bin's upper bound, over all ranks
	Algos  []AlgoCount      // summed over ranks
	Spread []float64        // arrival spreads the ranks know, µs
}

// Calls merges the ranks' call statistics, in the order calls first appear
// (by rank).
func (r *Report) Calls() []*Merged {
	var out []*Merged
	by := map[string]*Merged{}
	for ri, s := range r.Ranks {
		for i := range s.Calls {
			c := &s.Calls[i]
			key := c.Kind + "/" + c.Label()
			m := by[key]
			if m == nil {
				m = &Merged{Label: c.Label(), Kind: c.Kind, Async: c.Async, Shares: make([]float64, len(r.Ranks)),
					Hist: map[int64]uint64{}}
				by[key] = m
				out = append(out, m)
			}
			if c.Calls > 0 {
				if m.Calls == 0 || c.MinUs < m.MinUs {
					m.MinUs = c.MinUs
				}
				m.MaxUs = max(m.MaxUs, c.MaxUs)
				m.MeanUs += c.MeanUs * float64(c.Calls) // a sum until the end
			}
			m.Calls += c.Calls
			m.Failed += c.Failed
			m.Bytes += c.Bytes
			m.Shares[ri] = c.Share
			m.SpanUs += c.SpanUs
			m.WaitUs += c.WaitUs
			m.Waits += c.Waits
			for _, b := range c.Hist {
				m.Hist[b.Upper] += b.Calls
			}
			for _, a := range c.Algos {
				j := slices.IndexFunc(m.Algos, func(x AlgoCount) bool { return x.Algo == a.Algo && x.Upper == a.Upper })
				if j < 0 {
					m.Algos = append(m.Algos, a)
				} else {
					m.Algos[j].Calls += a.Calls
				}
			}
			if c.ArrivalSpreadUs != nil {
				m.Spread = append(m.Spread, *c.ArrivalSpreadUs)
			}
		}
	}
	for _, m := range out {
		if m.Calls > 0 {
			m.MeanUs /= float64(m.Calls)
		}
		slices.SortStableFunc(m.Algos, func(a, b AlgoCount) int {
			switch {
			case a.Upper < b.Upper:
				return -1
			case a.Upper > b.Upper:
				return 1
			}
			return 0
		})
	}
	return out
}

// Bins returns the bins' upper bounds that hold calls of any of ms, in
// increasing order.
func Bins(ms []*Merged) []int64 {
	var bins []int64
	for _, m := range ms {
		for b := range m.Hist {
			if !slices.Contains(bins, b) {
				bins = append(bins, b)
			}
		}
	}
	slices.Sort(bins)
	return bins
}

// BinLabel names a bin by its upper bound: "0" for calls of no data,
// else "≤ 64K".
func BinLabel(upper int64) string {
	if upper == 0 {
		return "0"
	}
	return "≤ " + size.Format(upper)
}

// WriteText writes the report's tables: the calls with their share of the
// ranks' wall time, the overlap of non-blocking calls, the size histograms,
// the algorithms, the point-to-point partners and each rank's totals.
func (r *Report) WriteText(w io.Writer) error {
	if len(r.Ranks) == 0 {
		return errors.New("no ranks to report")
	}
	ms := r.Calls()
	n := r.Ranks[0].Size
	var ranks []string
	for _, s := range r.Ranks {
		ranks = append(ranks, strconv.Itoa(s.Rank))
	}
	shares := make([]float64, len(r.Ranks))
	for i, s := range r.Ranks {
		shares[i] = s.Share
	}
	mean, lo, hi := stats(shares)
	fmt.Fprintf(w, "Braid profile of %d of %d ranks (%s)\n", len(r.Ranks), n, compact(ranks))
	if len(r.Ranks) < n {
		fmt.Fprintf(w, "(ranks missing: the figures below are over the ranks given)\n")
	}
	fmt.Fprintf(w, "time in Braid's calls: %s of the wall time from Init to Close (mean over ranks; min %s, max %s)\n\n",
		pct(mean), pct(lo), pct(hi))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "call\tkind\tcalls\tfailed\tbytes\tshare mean\tmin\tmax\tµs/call mean\tmin\tmax\t")
	for _, m := range ms {
		mean, lo, hi := stats(m.Shares)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m.Label, m.Kind, m.Calls, m.Failed, bytesText(m.Bytes),
			pct(mean), pct(lo), pct(hi), usText(m.MeanUs), usText(m.MinUs), usText(m.MaxUs))
	}
	tw.Flush()
	fmt.Fprintln(w, "(calls and bytes over all ranks; share: of each rank's wall time, over ranks; µs/call: entry to return, or issue to completion, over all calls)")

	var async []*Merged
	for _, m := range ms {
		if m.Async {
			async = append(async, m)
		}
	}
	if len(async) > 0 {
		fmt.Fprintln(w, "\nnon-blocking calls: overlap = 1 − (time blocked in Wait) / (time from issue to completion)")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "call\tcalls\tissue→completion µs\tblocked in Wait µs\twaits\toverlap\t")
		for _, m := range async {
			ov := 0.0
			if m.SpanUs > 0 {
				ov = min(1, max(0, 1-m.WaitUs/m.SpanUs))
			}
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%d\t%s\t\n", m.Label, m.Calls, m.SpanUs, m.WaitUs, m.Waits, pct(ov))
		}
		tw.Flush()
	}

	bins := Bins(ms)
	if len(bins) > 0 {
		fmt.Fprintln(w, "\nmessage sizes: calls over all ranks per bin (2^(n−1), 2^n] bytes")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "bytes\t")
		for _, m := range ms {
			fmt.Fprintf(tw, "%s\t", m.Label)
		}
		fmt.Fprintln(tw)
		for _, b := range bins {
			fmt.Fprintf(tw, "%s\t", BinLabel(b))
			for _, m := range ms {
				fmt.Fprintf(tw, "%d\t", m.Hist[b])
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}

	fmt.Fprintln(w, "\nalgorithms: calls over all ranks")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "call\tbytes\talgorithm\tcalls")
	any := false
	for _, m := range ms {
		for _, a := range m.Algos {
			if a.Algo == "" {
				continue
			}
			any = true
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", m.Label, BinLabel(a.Upper), a.Algo, a.Calls)
		}
	}
	if !any {
		fmt.Fprintln(tw, "(no collectives)")
	}
	tw.Flush()

	if err := r.writeP2P(w); err != nil {
		return err
	}

	r.writePatterns(w, ms)

	fmt.Fprintln(w, "\nper rank")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\thost\tpid\twall s\tin Braid\tcalls\ttrace events\tfile\t")
	for i, s := range r.Ranks {
		var calls uint64
		for _, c := range s.Calls {
			calls += c.Calls + c.Failed
		}
		ev := strconv.Itoa(s.Trace.Events)
		if s.Trace.Stride > 1 {
			ev += fmt.Sprintf(" (1 in %d)", s.Trace.Stride)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.3f\t%s\t%d\t%s\t%s\t\n", s.Rank, s.Host, s.PID, s.WallUs/1e6, pct(s.Share), calls, ev, r.Files[i])
	}
	return tw.Flush()
}

// P2PMatrix returns the messages and bytes sent from rank i to rank j
// (world ranks, n × n), from the senders' files.
func (r *Report) P2PMatrix() (msgs, bytes [][]uint64) {
	n := r.Ranks[0].Size
	msgs, bytes = make([][]uint64, n), make([][]uint64, n)
	for i := range msgs {
		msgs[i], bytes[i] = make([]uint64, n), make([]uint64, n)
	}
	for _, s := range r.Ranks {
		for _, p := range s.P2P {
			if p.Peer >= 0 && p.Peer < n {
				msgs[s.Rank][p.Peer] += p.Sends
				bytes[s.Rank][p.Peer] += p.SendBytes
			}
		}
	}
	return msgs, bytes
}

func (r *Report) writeP2P(w io.Writer) error {
	fmt.Fprintln(w, "\npoint-to-point partners: messages sent from rank (row) to rank (column), and their bytes")
	msgs, bytes := r.P2PMatrix()
	total := uint64(0)
	for i := range msgs {
		for j := range msgs[i] {
			total += msgs[i][j]
		}
	}
	if total == 0 {
		fmt.Fprintln(w, "  (none)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "from\\to\t")
	for j := range msgs {
		fmt.Fprintf(tw, "%d\t", j)
	}
	fmt.Fprintln(tw)
	for i := range msgs {
		fmt.Fprintf(tw, "%d\t", i)
		for j := range msgs[i] {
			if msgs[i][j] == 0 {
				fmt.Fprint(tw, "·\t")
			} else {
				fmt.Fprintf(tw, "%d (%s)\t", msgs[i][j], bytesText(bytes[i][j]))
			}
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func stats(v []float64) (mean, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	lo, hi = v[0], v[0]
	for _, x := range v {
		mean += x
		lo, hi = min(lo, x), max(hi, x)
	}
	return mean / float64(len(v)), lo, hi
}

func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + " %" }

func usText(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// bytesText writes b with a binary unit: 512 B, 4.0 KiB, 1.5 GiB.
func bytesText(b uint64) string {
	const unit = 1024
	if b < unit {
		return strconv.FormatUint(b, 10) + " B"
	}
	v, u := float64(b)/unit, 0
	for v >= unit && u < 4 {
		v /= unit
		u++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[u]
}

// compact writes a sorted list of ranks as ranges: 0-3, 5.
func compact(ranks []string) string {
	var out []string
	for i := 0; i < len(ranks); {
		j := i
		a, _ := strconv.Atoi(ranks[i])
		for j+1 < len(ranks) {
			b, _ := strconv.Atoi(ranks[j+1])
			if b != a+(j+1-i) {
				break
			}
			j++
		}
		if j > i {
			out = append(out, ranks[i]+"-"+ranks[j])
		} else {
			out = append(out, ranks[i])
		}
		i = j + 1
	}
	return strings.Join(out, ", ")
}
