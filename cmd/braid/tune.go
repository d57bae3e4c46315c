package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

const tuneUsage = `usage: braid tune [flags]

Measures every applicable algorithm of each collective, with its parameter
variants, at each size on this machine, and writes a tuning table (format:
package plan) that jobs read through BRAID_TUNING, or by default from the
cache file it writes. It also measures the figures that the planner's
cost model uses where the table has no entry: the links (latency and
bandwidth between ranks, by ping-pong), the reduction speed, the
per-message overhead (small allreduces and allgathers by direct exchange
against recursive doubling; 3 ranks or more) and the rate at which the
host's ranks together move memory (a 16 MiB direct reduce-scatter by
every rank; kept where the ranks contend for memory, as a copy loop by
every rank and by one tells). The table's comments say what each job
measured and which figures it kept.

Examples:
  braid tune                         # 2 and 4 local ranks, the default collectives
  braid tune -n 2,4,8 --colls allreduce,bcast --out tuning.txt
  BRAID_TUNING=tuning.txt braid bench -n 4 allreduce --all-algos

`

// tuneTolerance is how much slower than the fastest run the previous
// size's choice may be and still be kept.
const tuneTolerance = 0.03

// tuneColls are the collectives braid tune measures by default.
var tuneColls = "allreduce,bcast,reduce,allgather,reducescatter"

func tuneCmd(args []string) error {
	if dev, rest := benchDeviceArgs(args); dev != "" {
		return tuneDevice(dev, rest)
	}
	fs := flag.NewFlagSet("braid tune", flag.ContinueOnError)
	fs.String("device", "", "cuda: tune the planner's choices on device buffers instead, or with --multipath the multi-path copy between two GPUs (see braid tune --device cuda -h)")
	nsF := fs.String("n", "2,4", "rank counts to tune for, each run as its own local job")
	collsF := fs.String("colls", tuneColls, "collectives to tune")
	minS := fs.String("min-size", "8", "smallest size (bytes; K, M, G suffixes)")
	maxS := fs.String("max-size", "64M", "largest size")
	step := fs.Int("step", 4, "factor between measured sizes")
	budget := fs.Duration("budget", 30*time.Millisecond, "timed loop per size and algorithm")
	reps := fs.Int("reps", 3, "sweeps over every size and algorithm; each keeps its fastest (interference only slows)")
	out := fs.String("out", "", "table file to write (default: "+braid.DefaultTuningFile()+")")
	transportF := fs.String("transport", "", "shm or tcp between processes (as BRAID_TRANSPORT)")
	part := fs.String("part", "", "internal: run as one rank of a tuning job and write its part here")
	fs.Usage = func() { fmt.Fprint(os.Stderr, tuneUsage); fs.PrintDefaults() }
	if done, err := parseFlags(fs, args); done {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"tune: unexpected argument " + fs.Arg(0)}
	}
	colls, err := parseColls(*collsF)
	if err != nil {
		return usageError{"tune: " + err.Error()}
	}
	lo, err := plan.ParseSize(*minS)
	if err != nil {
		return usageError{"tune: --min-size: " + err.Error()}
	}
	hi, err := plan.ParseSize(*maxS)
	if err != nil {
		return usageError{"tune: --max-size: " + err.Error()}
	}
	switch {
	case hi < 1:
		return usageError{fmt.Sprintf("tune: --max-size %s: want a positive size", *maxS)}
	case hi < lo:
		return usageError{fmt.Sprintf("tune: --max-size %s is smaller than --min-size %s", *maxS, *minS)}
	case *step < 2:
		return usageError{fmt.Sprintf("tune: --step %d: want a factor ≥ 2", *step)}
	case *budget <= 0:
		return usageError{fmt.Sprintf("tune: --budget %v: want a positive duration", *budget)}
	case *reps < 1:
		return usageError{fmt.Sprintf("tune: --reps %d: want at least 1", *reps)}
	}
	switch *transportF {
	case "", "auto", "shm", "tcp":
	default:
		return usageError{fmt.Sprintf("tune: --transport %q: want shm or tcp (default: shm within a host, tcp across)", *transportF)}
	}
	sizes := tuneSizes(lo, hi, int64(*step))
	if *part != "" {
		return tuneRank(colls, sizes, *budget, *reps, *transportF, *part)
	}

	var ns []int
	for _, f := range strings.Split(*nsF, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return usageError{fmt.Sprintf("tune: -n %q: want rank counts ≥ 2, comma separated", *nsF)}
		}
		if slices.Contains(ns, n) {
			return usageError{fmt.Sprintf("tune: -n %q: %d given twice", *nsF, n)}
		}
		ns = append(ns, n)
	}
	dest := *out
	if dest == "" {
		dest = braid.DefaultTuningFile()
		if dest == "" {
			return fmt.Errorf("tune: no cache directory for the default table; give --out")
		}
	} else if err := checkWritable("tune: --out", dest); err != nil {
		// The default's directory is made below; a named one must exist
		// before the measurements, not only after them.
		return err
	}
	if a := os.Getenv("BRAID_ALGO"); a != "" {
		// A forced algorithm would override every measurement: the
		// ranks must not inherit it.
		fmt.Fprintf(os.Stderr, "braid tune: ignoring BRAID_ALGO=%s: tuning times every algorithm\n", a)
		os.Unsetenv("BRAID_ALGO")
	}
	if err := (&braid.Options{Transport: *transportF, Tuning: "none"}).Validate(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "braid-tune-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var parts []*plan.Table
	var fits []modelFit
	for _, n := range ns {
		fmt.Fprintf(os.Stderr, "braid tune: %d ranks: %s, %d sizes from %s to %s\n", n, *collsF, len(sizes), plan.FormatSize(lo), plan.FormatSize(hi))
		file := filepath.Join(tmp, fmt.Sprintf("part-%d.txt", n))
		child := []string{"tune", "--part", file, "--colls", *collsF, "--min-size", *minS, "--max-size", *maxS,
			"--step", strconv.Itoa(*step), "--budget", budget.String(), "--reps", strconv.Itoa(*reps)}
		if *transportF != "" {
			child = append(child, "--transport", *transportF)
		}
		if err := launchLocal(n, false, "", self, child); err != nil {
			return fmt.Errorf("tune: %d ranks: %w", n, err)
		}
		t, err := plan.LoadTable(file)
		if err != nil {
			return fmt.Errorf("tune: %d ranks: %w", n, err)
		}
		parts = append(parts, t)
		f, err := readFit(file + ".fit")
		if err != nil {
			return fmt.Errorf("tune: %d ranks: %w", n, err)
		}
		fits = append(fits, f)
	}
	model := cost.Default()
	if parts[0].Model != nil {
		model = *parts[0].Model
	}
	var notes []string
	model.Memory, model.Core, model.Overhead, notes = combineFits(fits, cost.Default())
	t := &plan.Table{Model: &model, Machine: parts[0].Machine}
	for _, p := range parts {
		t.Entries = append(t.Entries, p.Entries...)
	}
	t.Sort()
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	var sb strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&sb, "# braid tuning table, written by braid tune on %s at %s\n", host, time.Now().Format(time.RFC3339))
	fmt.Fprintf(&sb, "# ranks %s, sizes %s to %s ×%d, %v per measurement\n", *nsF, plan.FormatSize(lo), plan.FormatSize(hi), *step, *budget)
	for _, s := range notes {
		fmt.Fprintf(&sb, "# %s\n", s)
	}
	t.WriteTo(&sb)
	if err := os.WriteFile(dest, []byte(sb.String()), 0o644); err != nil {
		return err
	}
	fmt.Print(sb.String())
	fmt.Fprintf(os.Stderr, "braid tune: wrote %s\n", dest)
	return nil
}

func parseColls(s string) ([]sched.Collective, error) {
	var out []sched.Collective
	for _, f := range strings.Split(s, ",") {
		c, err := sched.ParseCollective(f)
		if err != nil {
			return nil, err
		}
		if c == sched.Barrier {
			return nil, fmt.Errorf("barrier has no sizes to tune")
		}
		if slices.Contains(out, c) {
			return nil, fmt.Errorf("--colls %q: %v given twice", s, c)
		}
		out = append(out, c)
	}
	return out, nil
}

// tuneSizes returns lo, lo·step, ... up to hi (hi included).
func tuneSizes(lo, hi, step int64) []int64 {
	lo = max(lo, 1)
	var out []int64
	for s := lo; s <= hi; s *= step {
		out = append(out, s)
		if s > hi/step {
			break
		}
	}
	if out[len(out)-1] != hi {
		out = append(out, hi)
	}
	return out
}

// tuneRank is one rank of a tuning job: it measures, and rank 0 writes
// the job's part of the table to file.
func tuneRank(colls []sched.Collective, sizes []int64, budget time.Duration, reps int, transport, file string) error {
	ctx := context.Background()
	forcer := &bench.Forcer{}
	os.Unsetenv("BRAID_ALGO") // braid tune said it ignores it
	limitMemory(sizes[len(sizes)-1])
	c, err := braid.Init(ctx, &braid.Options{Transport: transport, Planner: forcer, Tuning: "none", DisableMIAD: true})
	if err != nil {
		return err
	}
	defer c.Close()
	t := &plan.Table{Machine: braid.ThisMachine()}
	m, err := measureLinks(ctx, c)
	if err != nil {
		return err
	}
	m, fit, err := measureModel(ctx, c, forcer, budget, reps, transport, m)
	if err != nil {
		return fmt.Errorf("rank %d of %d: %w", c.Rank(), c.Size(), err)
	}
	t.Model = &m
	for _, coll := range colls {
		runs := tuneRuns(coll, c.Size())
		cfg := bench.Config{Coll: coll, SizeList: sizes, DType: braid.Float32, Op: braid.Sum,
			Budget: budget, Algos: runs, Forcer: forcer}
		rows, err := bench.Run(ctx, c, cfg)
		for rep := 1; rep < reps && err == nil; rep++ {
			var more []bench.Row
			if more, err = bench.Run(ctx, c, cfg); err == nil {
				rows = bench.Fastest(rows, more)
			}
		}
		if err != nil {
			return err
		}
		var best []plan.Choice
		var measured []int64
		for i := 0; i < len(rows); {
			// Rows come size by size; pick each size's fastest run, but
			// keep the previous size's choice when it is within
			// tuneTolerance of the fastest: on a noisy machine that
			// avoids tables that flip between equals at every size.
			j := i
			var win, prev *bench.Row
			for ; j < len(rows) && rows[j].Bytes == rows[i].Bytes; j++ {
				r := &rows[j]
				if r.Err != "" || r.Iters == 0 {
					continue
				}
				if win == nil || r.AvgUs < win.AvgUs {
					win = r
				}
				if len(best) > 0 && r.Algo == best[len(best)-1].String() {
					prev = r
				}
			}
			i = j
			if win == nil {
				continue
			}
			if prev != nil && prev.AvgUs <= win.AvgUs*(1+tuneTolerance) {
				win = prev
			}
			ch, err := plan.ParseChoice(win.Algo)
			if err != nil {
				return err
			}
			if c.Rank() == 0 {
				fmt.Fprintf(os.Stderr, "  %-13v %6s on %d: %s %.2f µs\n", coll, plan.FormatSize(win.Bytes), c.Size(), ch, win.AvgUs)
			}
			best = append(best, ch)
			measured = append(measured, win.Bytes)
		}
		t.Entries = append(t.Entries, tableEntries(coll, c.Size(), c.Hosts(), measured, best)...)
	}
	if c.Rank() != 0 {
		return nil
	}
	var sb strings.Builder
	t.WriteTo(&sb)
	if err := writeFit(file+".fit", fit); err != nil {
		return err
	}
	return os.WriteFile(file, []byte(sb.String()), 0o644)
}

// tuneRuns lists the runs braid tune times for coll on n ranks: every
// algorithm, and for those with parameters, variants of them.
func tuneRuns(coll sched.Collective, n int) []string {
	var runs []string
	if choice.SharedRuns(coll) {
		// The host's shared area (where the ranks share one; elsewhere
		// its rows fail and are left out).
		runs = append(runs, choice.Shared)
	}
	for _, a := range algo.ForCollective(coll) {
		runs = append(runs, a.Name())
		t, ok := a.(algo.Tuner)
		if !ok {
			continue
		}
		// Which parameters does it take? Ask it to tune a large call.
		p := t.Tune(sched.Params{Coll: coll, NRanks: n, Count: 16 << 20}, 4, cost.Default())
		if p.Segment > 0 {
			for _, seg := range []int64{16 << 10, 64 << 10, 256 << 10, 1 << 20} {
				runs = append(runs, plan.Choice{Algo: a.Name(), Segment: seg}.String())
			}
		}
		if p.Radix > 0 {
			for _, k := range []int{2, 3, 4, 8} {
				if k < n {
					runs = append(runs, plan.Choice{Algo: a.Name(), Radix: k}.String())
				}
			}
		}
	}
	return runs
}

// tableEntries turns the best choice at each measured size into table
// entries: each choice holds from its size up to the next measured size,
// the first from 0 and the last without bound; neighbours with the same
// choice merge.
func tableEntries(coll sched.Collective, n, hosts int, sizes []int64, best []plan.Choice) []plan.Entry {
	var out []plan.Entry
	for i, ch := range best {
		lo := sizes[i]
		if i == 0 {
			lo = 0
		}
		if k := len(out) - 1; k >= 0 && out[k].Choice == ch {
			out[k].Max = 0
		} else {
			if k >= 0 {
				out[k].Max = lo
			}
			out = append(out, plan.Entry{Coll: coll, Ranks: n, Hosts: hosts, Min: lo, Choice: ch})
		}
		if i+1 < len(best) {
			out[len(out)-1].Max = sizes[i+1]
		}
	}
	if k := len(out) - 1; k >= 0 {
		out[k].Max = 0
	}
	return out
}

// measureLinks measures the model's figures: latency and bandwidth between
// rank 0 and rank 1 (and rank 0 and the first rank on another host, if
// any) by ping-pong, and the reduction speed on rank 0. Every rank gets
// rank 0's figures.
func measureLinks(ctx context.Context, c *braid.Comm) (cost.Model, error) {
	m := cost.Default()
	peers := map[cost.Class]int{cost.Intra: 1}
	if c.Hosts() > 1 {
		if r := firstRemote(c); r > 0 {
			peers[cost.Inter] = r
		}
	}
	for _, class := range []cost.Class{cost.Intra, cost.Inter} {
		peer, ok := peers[class]
		if !ok || peer >= c.Size() {
			continue
		}
		if class == cost.Intra && c.Hosts() > 1 && firstRemote(c) == 1 {
			continue // rank 1 is on another host: no intra-host figure
		}
		small, err := pingPong(ctx, c, peer, 8, 2000)
		if err != nil {
			return m, err
		}
		const big = 4 << 20
		large, err := pingPong(ctx, c, peer, big, 20)
		if err != nil {
			return m, err
		}
		l := cost.Link{Alpha: small, Beta: big / max(large-small, 1e-9)}
		m.Links[class] = l
		if class == cost.Intra {
			m.Links[cost.Cross] = l // this probe cannot tell NUMA nodes apart
		}
	}
	if c.Rank() == 0 {
		k, err := reduce.For(dtype.Float32, dtype.Sum)
		if err != nil {
			return m, err
		}
		a, b := make([]byte, 4<<20), make([]byte, 4<<20)
		k(a, b)
		t0 := time.Now()
		const reps = 20
		for range reps {
			k(a, b)
		}
		m.Gamma = time.Since(t0).Seconds() / (reps * float64(len(a)))
	}
	// Share rank 0's figures.
	v := []float64{m.Links[cost.Intra].Alpha, m.Links[cost.Intra].Beta, m.Links[cost.Inter].Alpha, m.Links[cost.Inter].Beta, m.Gamma}
	if err := c.Bcast(ctx, v, 0); err != nil {
		return m, err
	}
	m.Links[cost.Intra] = cost.Link{Alpha: v[0], Beta: v[1]}
	m.Links[cost.Cross] = m.Links[cost.Intra]
	m.Links[cost.Inter] = cost.Link{Alpha: v[2], Beta: v[3]}
	m.Gamma = v[4]
	if err := m.Valid(); err != nil {
		return cost.Default(), nil
	}
	return m, nil
}

// firstRemote returns the first rank on another host than rank 0, or -1.
func firstRemote(c *braid.Comm) int {
	for r := 1; r < c.Size(); r++ {
		if c.HostOf(r) != c.HostOf(0) {
			return r
		}
	}
	return -1
}

// pingPong returns half the mean round trip of a size-byte message
// between rank 0 and peer, in seconds, on rank 0 (other ranks return 0).
func pingPong(ctx context.Context, c *braid.Comm, peer, size, iters int) (float64, error) {
	buf := make([]byte, size)
	if err := c.Barrier(ctx); err != nil {
		return 0, err
	}
	var secs float64
	switch c.Rank() {
	case 0:
		for i := range iters + 5 {
			if i == 5 {
				secs = -float64(time.Now().UnixNano()) / 1e9
			}
			if err := c.Send(ctx, buf, peer, 1); err != nil {
				return 0, err
			}
			if err := c.Recv(ctx, buf, peer, 1); err != nil {
				return 0, err
			}
		}
		secs += float64(time.Now().UnixNano()) / 1e9
		secs /= 2 * float64(iters)
	case peer:
		for range iters + 5 {
			if err := c.Recv(ctx, buf, 0, 1); err != nil {
				return 0, err
			}
			if err := c.Send(ctx, buf, 0, 1); err != nil {
				return 0, err
			}
		}
	}
	return secs, c.Barrier(ctx)
}

// limitMemory gives a benchmarking rank a soft memory limit (unless
// GOMEMLIMIT sets one): sweeps allocate buffers of every size and
// algorithm, and without a limit the garbage collector lets a 4-rank
// reducescatter sweep to 64 MiB reach 0.7 GiB per rank (9 GiB in braid
// tune, where the kernel killed a rank); with it, 0.3 GiB.
func limitMemory(maxSize int64) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(512<<20 + 6*maxSize)
}
