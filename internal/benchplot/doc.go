// Package benchplot draws the results of braid bench: latency (µs, log
// scale) and bus bandwidth (GB/s) against message size (log2 scale), side
// by side, one line per run (per algorithm with --all-algos, the planner's
// choice dashed in black on top), into a PNG or SVG file. A barrier, which
// has no size, is drawn as one latency bar per run. With --imbalance the
// latency panel also shows each run's balanced latency, dotted.
//
// Example:
//
//	fig, err := benchplot.New(header, rows) // rows from bench.Run
//	if err == nil {
//		err = fig.Write("allreduce.png")
//	}
package benchplot
