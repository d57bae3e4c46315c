package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu/multipath"
	"github.com/braid-ccl/braid/plan"
)

const tuneMultiPathUsage = `usage: braid tune --device cuda --multipath [flags]

Tunes the multi-path copy between two GPUs (Algorithm 4.1 of Temuçin's
MASc thesis, Queen's University 2021): the direct peer copy of part of the
buffer while the rest is staged through pinned host memory in chunks. At each size it times the peer copy alone,
the host-staged path alone, and both paths over a grid of host shares and
chunk counts, each the fastest of --reps timings on the host clock (sizes
under --min-bytes are timed over that many bytes of back-to-back copies).
It prints GB/s per path and size, and writes the table of splits
(format: multipath.Table): the fastest split at each size where it
beats the peer copy alone by --min-gain percent, the peer copy alone
elsewhere. BRAID_GPU_MULTIPATH=FILE (DeviceOptions.MultiPath) gives it
to device communicators, whose fused kernels then send that share of
large allreduces, broadcasts, reduce-scatters and allgathers through
host memory.

examples:
  braid tune --device cuda --multipath
  braid tune --device cuda --multipath --max-size 256M --reps 3 --out-multipath mp.txt

flags:
`

// tuneDevice is braid tune --device DEV: the device tuning table, or with
// --multipath the multi-path copy's table.
func tuneDevice(dev string, args []string) error {
	if dev != "cuda" {
		return usageError{fmt.Sprintf("tune: --device %s: only cuda is supported", dev)}
	}
	var rest []string
	multi := false
	for _, a := range args {
		switch a {
		case "--multipath", "-multipath", "--multipath=true", "-multipath=true":
			multi = true
		case "--multipath=false", "-multipath=false":
		default:
			rest = append(rest, a)
		}
	}
	if multi {
		return tuneMultiPath(rest)
	}
	return tuneDeviceTable(rest)
}

// tuneMultiPath is braid tune --device cuda --multipath.
func tuneMultiPath(args []string) error {
	def := multipath.DefaultSweep()
	fs := flag.NewFlagSet("braid tune --device cuda --multipath", flag.ContinueOnError)
	srcF := fs.Int("src", 0, "source GPU")
	dstF := fs.Int("dst", 1, "destination GPU")
	minS := fs.String("min-size", plan.FormatSize(int64(def.Sizes[0])), "smallest size (bytes; K, M, G suffixes)")
	maxS := fs.String("max-size", plan.FormatSize(int64(def.Sizes[len(def.Sizes)-1])), "largest size")
	step := fs.Int("step", 4, "factor between measured sizes")
	sharesF := fs.String("shares", joinFloats(def.Shares), "host shares of the split grid (comma separated, each above 0 and below 1)")
	chunksF := fs.String("chunks", joinInts(def.Chunks), "chunk counts of the split grid")
	stagedF := fs.String("staged-chunks", joinInts(def.StagedChunks), "chunk counts of the host-staged path timed alone (empty: none)")
	reps := fs.Int("reps", def.Reps, "timings of each configuration; the fastest counts")
	minBytesS := fs.String("min-bytes", "64M", "bytes per timing at least; smaller copies repeat back to back")
	minGain := fs.Float64("min-gain", 3, "percent a split must beat the peer copy alone by to be chosen")
	spin := fs.Duration("spin", 10*time.Millisecond, "how long the GPU workers and their callers poll before sleeping (cuda.WorkerOptions.Spin); longer than the largest copy keeps the machine's wake-up delays out of the figures")
	out := fs.String("out-multipath", "", "table file to write (default: "+braid.DefaultMultiPathFile()+")")
	fs.Usage = func() { fmt.Fprint(os.Stderr, tuneMultiPathUsage); fs.PrintDefaults() }
	if done, err := parseFlags(fs, args); done {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"tune --device cuda --multipath: unexpected argument " + fs.Arg(0)}
	}
	sw := multipath.Sweep{Reps: *reps}
	lo, err := plan.ParseSize(*minS)
	if err != nil {
		return usageError{"tune --device cuda --multipath: --min-size: " + err.Error()}
	}
	hi, err := plan.ParseSize(*maxS)
	if err != nil {
		return usageError{"tune --device cuda --multipath: --max-size: " + err.Error()}
	}
	minBytes, err := plan.ParseSize(*minBytesS)
	if err != nil || minBytes < 1 {
		return usageError{"tune --device cuda --multipath: --min-bytes: want a positive size"}
	}
	sw.MinBytes = int(minBytes)
	if lo < 1 || hi < lo || *step < 2 || *reps < 1 || *srcF < 0 || *dstF < 0 || *srcF == *dstF || *minGain < 0 {
		return usageError{"tune --device cuda --multipath: want 0 < --min-size ≤ --max-size, --step ≥ 2, --reps ≥ 1, --min-gain ≥ 0 and two different GPUs"}
	}
	for _, s := range tuneSizes(lo, hi, int64(*step)) {
		sw.Sizes = append(sw.Sizes, int(s))
	}
	if sw.Shares, err = parseFloats(*sharesF); err != nil {
		return usageError{"tune --device cuda --multipath: --shares: " + err.Error()}
	}
	for _, s := range sw.Shares {
		if !(s > 0 && s < 1) {
			return usageError{fmt.Sprintf("tune --device cuda --multipath: --shares: %v is not between 0 and 1", s)}
		}
	}
	if sw.Chunks, err = parseInts(*chunksF); err != nil {
		return usageError{"tune --device cuda --multipath: --chunks: " + err.Error()}
	}
	if sw.StagedChunks, err = parseInts(*stagedF); err != nil {
		return usageError{"tune --device cuda --multipath: --staged-chunks: " + err.Error()}
	}
	dest := *out
	if dest == "" {
		if dest = braid.DefaultMultiPathFile(); dest == "" {
			return fmt.Errorf("tune --device cuda --multipath: no cache directory for the default table; give --out-multipath")
		}
	}

	ngpu, err := cuda.DeviceCount()
	if err != nil {
		return fmt.Errorf("tune --device cuda --multipath: %w", err)
	}
	if *srcF >= ngpu || *dstF >= ngpu {
		return fmt.Errorf("tune --device cuda --multipath: GPUs %d and %d asked for, %d visible (the multi-path copy needs two)", *srcF, *dstF, ngpu)
	}
	src, dst := cuda.Device(*srcF), cuda.Device(*dstF)
	ws, err := cuda.NewWorker(src, cuda.WorkerOptions{Spin: *spin})
	if err != nil {
		return err
	}
	defer ws.Close()
	wd, err := cuda.NewWorker(dst, cuda.WorkerOptions{Spin: *spin})
	if err != nil {
		return err
	}
	defer wd.Close()
	names := [2]string{}
	for i, d := range []cuda.Device{src, dst} {
		if names[i], err = d.Name(); err != nil {
			return err
		}
	}
	header := fmt.Sprintf("multi-path copy GPU %d (%s) -> GPU %d (%s)", src, names[0], dst, names[1])
	fmt.Fprintf(os.Stderr, "braid tune: %s: %d sizes from %s to %s, %d splits, best of %d\n",
		header, len(sw.Sizes), plan.FormatSize(lo), plan.FormatSize(hi), len(sw.Shares)*len(sw.Chunks), sw.Reps)
	sw.Progress = func(size int, rs []multipath.Result) {
		fmt.Fprintf(os.Stderr, "  %6s: peer copy alone %.1f GB/s\n", plan.FormatSize(int64(size)), rs[0].GBps)
	}
	start := time.Now()
	res, err := multipath.Measure(context.Background(), ws, wd, sw)
	if err != nil {
		return fmt.Errorf("tune --device cuda --multipath: %w", err)
	}
	sums, err := multipath.Summarize(res)
	if err != nil {
		return err
	}
	tab := multipath.Choose(sums, *minGain/100)

	var report strings.Builder
	fmt.Fprintf(&report, "%s, host clock, fastest of %d, workers polling %v; sizes under %s timed over %s of back-to-back copies\n",
		header, sw.Reps, *spin, plan.FormatSize(minBytes), plan.FormatSize(minBytes))
	writeMultiPathReport(&report, sums, sw.StagedChunks, tab)
	fmt.Print(report.String())

	var file strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&file, "# braid multi-path copy table, written by braid tune --device cuda on %s at %s (%v)\n",
		host, time.Now().Format(time.RFC3339), time.Since(start).Round(time.Second))
	fmt.Fprintf(&file, "# splits chosen where they beat the peer copy alone by %g%% or more; measured:\n", *minGain)
	for _, l := range strings.Split(strings.TrimRight(report.String(), "\n"), "\n") {
		fmt.Fprintf(&file, "#   %s\n", l)
	}
	tab.WriteTo(&file)
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(dest, []byte(file.String()), 0o644); err != nil {
		return err
	}
	fmt.Println()
	tab.WriteTo(os.Stdout)
	fmt.Fprintf(os.Stderr, "braid tune: wrote %s; BRAID_GPU_MULTIPATH=%s gives it to device communicators\n", dest, dest)
	return nil
}

// writeMultiPathReport prints one line per size: GB/s of the peer copy
// alone, of the host-staged path alone in each chunk count, of the fastest
// split and its gain over the peer copy alone, and the table's choice.
func writeMultiPathReport(w io.Writer, sums []multipath.Summary, stagedChunks []int, tab *multipath.Table) {
	fmt.Fprintf(w, "%8s %8s", "size", "direct")
	for _, c := range stagedChunks {
		fmt.Fprintf(w, " %10s", fmt.Sprintf("staged/%d", c))
	}
	fmt.Fprintf(w, " %10s %6s %6s %8s  %s\n", "multipath", "host", "chunks", "gain", "chosen")
	for _, s := range sums {
		fmt.Fprintf(w, "%8s %8.1f", plan.FormatSize(int64(s.Size)), s.Direct.GBps)
		for _, c := range stagedChunks {
			v := "-"
			for _, r := range s.Staged {
				if r.Chunks == c {
					v = strconv.FormatFloat(r.GBps, 'f', 1, 64)
				}
			}
			fmt.Fprintf(w, " %10s", v)
		}
		if s.Best.GBps > 0 {
			fmt.Fprintf(w, " %10.1f %5.0f%% %6d %+7.1f%%", s.Best.GBps, s.Best.HostShare*100, s.Best.Chunks, s.Gain*100)
		} else {
			fmt.Fprintf(w, " %10s %6s %6s %8s", "-", "-", "-", "-")
		}
		chosen := "direct"
		if share, chunks := tab.Lookup(s.Size); share > 0 {
			chosen = fmt.Sprintf("host=%g chunks=%d", share, chunks)
		}
		fmt.Fprintf(w, "  %s\n", chosen)
	}
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: want numbers, comma separated", s)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 || v > multipath.MaxChunks {
			return nil, fmt.Errorf("%q: want counts from 1 to %d, comma separated", s, multipath.MaxChunks)
		}
		out = append(out, v)
	}
	return out, nil
}

func joinFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}
