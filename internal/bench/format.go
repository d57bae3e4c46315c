package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/braid-ccl/braid/plan"
)

// FormatSize writes bytes with a binary suffix: 8, 4K, 64M (plan.FormatSize).
func FormatSize(b int64) string { return plan.FormatSize(b) }

// ParseSize reads a size such as 8, 4K, 64M, 1G (plan.ParseSize).
func ParseSize(s string) (int64, error) { return plan.ParseSize(s) }

// Header describes the run above the table.
type Header struct {
	Coll      string `json:"collective"`
	DType     string `json:"dtype"`
	Op        string `json:"op,omitempty"`
	Transport string `json:"transport"`
	Ranks     int    `json:"ranks"`
	Hosts     int    `json:"hosts"`
	InPlace   bool   `json:"inplace"`
	// Registered says that the buffers came from braid.Alloc.
	Registered bool    `json:"registered,omitempty"`
	Algo       string  `json:"algo,omitempty"` // what --algo forced, if anything
	MIF        float64 `json:"mif,omitempty"`  // the imbalance factor, if any
	// Alpha is the definition of α under imbalance (Config.Alpha):
	// AlphaP2P or AlphaCollective; "" is AlphaP2P.
	Alpha string `json:"alpha,omitempty"`
	// CPUs says where rank 0 runs: the CPUs it may use and its GOMAXPROCS
	// ("0-7, GOMAXPROCS 8"), which BRAID_BIND decides; "" if not known.
	CPUs string `json:"cpus,omitempty"`
}

// AlgoCell is how the table shows a row's run: its name, with the
// algorithm that ran when that says more ("auto (ring)",
// "segring:seg=1M").
func AlgoCell(r Row) string {
	switch {
	case r.Ran == "" || r.Ran == r.Algo:
		return r.Algo
	case r.Algo == "" || strings.HasPrefix(r.Ran, r.Algo+":"):
		return r.Ran
	}
	return r.Algo + " (" + r.Ran + ")"
}

// Write prints rows in format "table", "csv" or "json".
func Write(w io.Writer, format string, h Header, rows []Row) error {
	imb := h.MIF > 0
	for _, r := range rows {
		imb = imb || r.MIF > 0
	}
	switch format {
	case "", "table":
		fmt.Fprintf(w, "# braid bench %s: %d ranks on %d host(s), %s, dtype %s", h.Coll, h.Ranks, h.Hosts, h.Transport, h.DType)
		if h.Op != "" {
			fmt.Fprintf(w, ", op %s", h.Op)
		}
		if h.InPlace {
			fmt.Fprint(w, ", in place")
		}
		if h.Registered {
			fmt.Fprint(w, ", registered buffers")
		}
		if h.Algo != "" {
			fmt.Fprintf(w, ", algo %s", h.Algo)
		}
		fmt.Fprintln(w)
		if h.CPUs != "" {
			fmt.Fprintf(w, "# rank 0: CPUs %s\n", h.CPUs)
		}
		fmt.Fprintln(w, "# latency in µs (mean per rank: avg over ranks, min, max); bandwidth in GB/s from the slowest rank")
		if imb {
			fmt.Fprintf(w, "# imbalance MIF %g: before each call every rank computes for a random time in [0, MIF × α], α %s;\n", h.MIF, alphaDef(h.Alpha))
			fmt.Fprintln(w, "# latencies count the calls only (waits for late ranks included); balanced is the run's latency without the compute;")
			fmt.Fprintln(w, "# wait + tail = avg: from a rank's arrival to the last arrival, and from the last arrival to its return")
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := "size\tcount\talgo\titers\tavg µs\tmin µs\tmax µs\talgbw\tbusbw\t"
		if imb {
			head += "α µs\tbalanced µs\twait µs\ttail µs\t"
		}
		fmt.Fprintln(tw, head+"correct\t")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t",
				FormatSize(r.Bytes), r.Count, AlgoCell(r), r.Iters, r.AvgUs, r.MinUs, r.MaxUs, r.AlgBW, r.BusBW)
			if imb {
				fmt.Fprintf(tw, "%.2f\t%.2f\t%.2f\t%.2f\t", r.AlphaUs, r.BalancedUs, r.WaitUs, r.TailUs)
			}
			fmt.Fprintf(tw, "%s\t\n", r.Correct)
		}
		return tw.Flush()
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(CSVHeader)
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
		for _, r := range rows {
			mif, alpha, bal, wait, tail := "", "", "", "", ""
			if r.MIF > 0 {
				mif, alpha, bal = strconv.FormatFloat(r.MIF, 'g', -1, 64), f(r.AlphaUs), f(r.BalancedUs)
				wait, tail = f(r.WaitUs), f(r.TailUs)
			}
			cw.Write([]string{r.Coll, r.Algo, r.Ran, strconv.FormatInt(r.Bytes, 10), strconv.Itoa(r.Count), strconv.Itoa(r.Iters),
				f(r.AvgUs), f(r.MinUs), f(r.MaxUs), f(r.AlgBW), f(r.BusBW), mif, alpha, bal, wait, tail, string(r.Correct)})
		}
		cw.Flush()
		return cw.Error()
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []Row{}
		}
		return enc.Encode(struct {
			Header Header `json:"run"`
			Rows   []Row  `json:"rows"`
		}{h, rows})
	}
	return fmt.Errorf("unknown format %q (want table, csv or json)", format)
}

// CSVHeader is the first record of the CSV format: one column per Row
// field. mif, alpha_us, balanced_us, wait_us and tail_us are empty without
// imbalance.
var CSVHeader = []string{"collective", "algo", "ran", "bytes", "count", "iters", "avg_us", "min_us", "max_us",
	"algbw_gbs", "busbw_gbs", "mif", "alpha_us", "balanced_us", "wait_us", "tail_us", "correct"}

// alphaDef says in words what α is under definition a (Config.Alpha).
func alphaDef(a string) string {
	if a == AlphaCollective {
		return "the size's smallest balanced latency (--imbalance-alpha collective)"
	}
	return "one point-to-point message of the size between ranks 0 and 1 (half the median round trip of a ping-pong)"
}
