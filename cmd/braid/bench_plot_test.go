package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/sched"
)

// runSplit executes braid with args and returns its standard output and
// standard error apart.
func runSplit(t *testing.T, timeout time.Duration, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, braidBin(), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("braid %v: did not finish within %v:\n%s%s", args, timeout, out.String(), errb.String())
	}
	return out.String(), errb.String(), err
}

// TestBenchAllAlgosPlot runs every allreduce algorithm and the planner's
// choice side by side on 2 processes, as CSV, and draws the PNG.
func TestBenchAllAlgosPlot(t *testing.T) {
	pngPath := filepath.Join(t.TempDir(), "out.png")
	out, errOut, err := runSplit(t, 120*time.Second, "bench", "-n", "2", "allreduce", "--all-algos", "--max-size", "64K",
		"--plot", pngPath, "--format", "csv", "--check", "--iters", "3", "--warmup", "1")
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("standard output is not CSV: %v\n%s", err, out)
	}
	if !slices.Equal(recs[0], bench.CSVHeader) {
		t.Fatalf("CSV header %v", recs[0])
	}
	var names []string
	for _, a := range algo.ForCollective(sched.Allreduce) {
		// Algorithms the job cannot run (treepack without a topology)
		// are not candidates: bench skips them.
		if a.Supports(sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 2}) != nil {
			continue
		}
		names = append(names, a.Name())
	}
	names = append(names, bench.Auto)
	sizes := bench.Sizes(4, 64<<10)
	if len(recs)-1 != len(sizes)*len(names) {
		t.Fatalf("%d rows, want %d sizes × %d runs (%v):\n%s", len(recs)-1, len(sizes), len(names), names, out)
	}
	for i, rec := range recs[1:] {
		algoCol, ranCol, correct := rec[1], rec[2], rec[len(rec)-1]
		if want := names[i%len(names)]; algoCol != want {
			t.Errorf("row %d: algo %q, want %q", i, algoCol, want)
		}
		if ranCol == "" || (algoCol != bench.Auto && !strings.HasPrefix(ranCol, algoCol)) {
			t.Errorf("row %d: %s ran %q", i, algoCol, ranCol)
		}
		if correct != "yes" {
			t.Errorf("row %d (%v): correct %q", i, rec, correct)
		}
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the plot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 400 {
		t.Errorf("plot of %v pixels", b)
	}
}

// TestBenchImbalanceJSON: --imbalance reports the calls' latencies with
// the balanced ones and α (one message's time, the same for every run of a
// size) beside them, and --plot draws an SVG.
func TestBenchImbalanceJSON(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "out.svg")
	out, errOut, err := runSplit(t, 120*time.Second, "bench", "-n", "2", "allreduce", "--algos", "ring,recdouble,auto",
		"--imbalance", "4", "--min-size", "256", "--max-size", "1K", "--iters", "20", "--warmup", "2", "--format", "json", "--plot", svg)
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	var res struct {
		Run  bench.Header `json:"run"`
		Rows []bench.Row  `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("standard output is not JSON: %v\n%s", err, out)
	}
	if res.Run.MIF != 4 || res.Run.Alpha != bench.AlphaP2P || res.Run.Ranks != 2 || len(res.Rows) != 3*3 {
		t.Fatalf("run %+v with %d rows, want MIF 4, α p2p, 2 ranks, 9 rows", res.Run, len(res.Rows))
	}
	alpha := map[int64]float64{}
	for _, r := range res.Rows {
		if r.MIF != 4 || r.BalancedUs <= 0 || r.AvgUs <= 0 || r.AlphaUs <= 0 || r.Iters != 20 {
			t.Errorf("row %+v: want MIF 4, balanced and imbalanced latencies, α, 20 iterations", r)
		}
		if a, ok := alpha[r.Bytes]; ok && a != r.AlphaUs {
			t.Errorf("%d B: α %v µs and %v µs: want one per size", r.Bytes, a, r.AlphaUs)
		}
		alpha[r.Bytes] = r.AlphaUs
	}
	b, err := os.ReadFile(svg)
	if err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("imbalance MIF 4")) {
		t.Errorf("SVG plot: %v, %d bytes", err, len(b))
	}
}

func TestBenchAlgosUsage(t *testing.T) {
	png := filepath.Join(t.TempDir(), "x.png")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"allreduce", "--all-algos", "--algo", "ring"}, "forces one algorithm"},
		{[]string{"allreduce", "--all-algos", "--algos", "ring"}, "give one"},
		{[]string{"allreduce", "--algos", "ring,nosuch"}, `no allreduce algorithm named "nosuch"`},
		{[]string{"allreduce", "--algos", "ring,ring"}, "twice"},
		{[]string{"allreduce", "--algos", "segring:seg=0"}, "positive size"},
		{[]string{"allreduce", "--plot", "out.txt"}, ".png or .svg"},
		{[]string{"allreduce", "--imbalance", "-2"}, "imbalance"},
	} {
		out, err := run(t, 30*time.Second, nil, append([]string{"bench", "-n", "3", "--max-size", "8", "--plot", png}, c.args...)...)
		if e, ok := err.(*exec.ExitError); !ok || e.ExitCode() != 2 {
			t.Errorf("braid bench %v: %v, want a usage error (exit 2):\n%s", c.args, err, out)
		}
		// Said once, before any rank starts.
		if strings.Count(out, c.want) != 1 {
			t.Errorf("braid bench %v: message does not say %q once:\n%s", c.args, c.want, out)
		}
	}
	if _, err := os.Stat(png); err == nil {
		t.Error("a refused run wrote its plot")
	}
}

// TestBenchProgressTTY runs bench with standard error on a terminal (made
// by script(1)) and standard output on a file: the bar goes to the
// terminal, the CSV stays clean.
func TestBenchProgressTTY(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) not installed (util-linux)")
	}
	dir := t.TempDir()
	csvPath, logPath := filepath.Join(dir, "out.csv"), filepath.Join(dir, "tty.log")
	line := braidBin() + " bench -n 2 allreduce --max-size 4K --iters 3 --warmup 1 --format csv > " + csvPath
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "-qec", line, logPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tty, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tty), "█") || !strings.Contains(string(tty), "allreduce [") {
		t.Errorf("no progress bar on the terminal:\n%q", tty)
	}
	b, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(recs) != 1+len(bench.Sizes(4, 4<<10)) || bytes.ContainsAny(b, "\r\x1b█") {
		t.Errorf("CSV on standard output: %v\n%q", err, b)
	}
}

func TestProgressLine(t *testing.T) {
	p := bench.Progress{Done: 5, Total: 10, Size: 1 << 20, Algo: "ring"}
	got := progressLine("allreduce", p, 3200*time.Millisecond, 10)
	want := "allreduce [█████░░░░░]  50%  5/10  1M ring  3.2s"
	if got != want {
		t.Errorf("progressLine = %q, want %q", got, want)
	}
	p = bench.Progress{Done: 0, Total: 0, Size: 8, Imbalanced: true}
	if got := progressLine("bcast", p, 0, 4); got != "bcast [░░░░]   0%  0/0  8 (imbalanced)  0.0s" {
		t.Errorf("progressLine = %q", got)
	}
	p = bench.Progress{Done: 12, Total: 10, Size: 8}
	if got := progressLine("bcast", p, 0, 4); !strings.Contains(got, "[████] 100%") {
		t.Errorf("progressLine past the end = %q", got)
	}
}
