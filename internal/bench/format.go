package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
)

// FormatSize writes bytes with a binary suffix: 8, 4K, 64M.
func FormatSize(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dG", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dM", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dK", b>>10)
	}
	return strconv.FormatInt(b, 10)
}

// ParseSize reads a size such as 8, 4K, 64M, 1G (binary suffixes; a
// trailing B or iB is accepted).
func ParseSize(s string) (int64, error) {
	orig := s
	mult := int64(1)
	for _, suf := range []string{"iB", "B", "b"} {
		if len(s) > len(suf) && s[len(s)-len(suf):] == suf {
			s = s[:len(s)-len(suf)]
			break
		}
	}
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult, s = 1<<10, s[:n-1]
		case 'm', 'M':
			mult, s = 1<<20, s[:n-1]
		case 'g', 'G':
			mult, s = 1<<30, s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional K, M or G suffix", orig)
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: too large", orig)
	}
	return v * mult, nil
}

// Header describes the run above the table.
type Header struct {
	Coll, DType, Op, Transport string
	Ranks, Hosts               int
	InPlace                    bool
	Algo                       string
}

// Write prints rows in format "table", "csv" or "json".
func Write(w io.Writer, format string, h Header, rows []Row) error {
	switch format {
	case "", "table":
		fmt.Fprintf(w, "# braid bench %s: %d ranks on %d host(s), %s, dtype %s", h.Coll, h.Ranks, h.Hosts, h.Transport, h.DType)
		if h.Op != "" {
			fmt.Fprintf(w, ", op %s", h.Op)
		}
		if h.InPlace {
			fmt.Fprint(w, ", in place")
		}
		if h.Algo != "" {
			fmt.Fprintf(w, ", algo %s", h.Algo)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "# latency in µs (mean per rank: avg over ranks, min, max); bandwidth in GB/s from the slowest rank")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "size\tcount\talgo\titers\tavg µs\tmin µs\tmax µs\talgbw\tbusbw\tcorrect\t")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n",
				FormatSize(r.Bytes), r.Count, r.Algo, r.Iters, r.AvgUs, r.MinUs, r.MaxUs, r.AlgBW, r.BusBW, r.Correct)
		}
		return tw.Flush()
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write([]string{"collective", "algo", "bytes", "count", "iters", "avg_us", "min_us", "max_us", "algbw_gbs", "busbw_gbs", "correct"})
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
		for _, r := range rows {
			cw.Write([]string{r.Coll, r.Algo, strconv.FormatInt(r.Bytes, 10), strconv.Itoa(r.Count), strconv.Itoa(r.Iters),
				f(r.AvgUs), f(r.MinUs), f(r.MaxUs), f(r.AlgBW), f(r.BusBW), r.Correct})
		}
		cw.Flush()
		return cw.Error()
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Header Header `json:"run"`
			Rows   []Row  `json:"rows"`
		}{h, rows})
	}
	return fmt.Errorf("unknown format %q (want table, csv or json)", format)
}
