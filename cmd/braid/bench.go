package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/internal/benchplot"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"golang.org/x/term"
)

const benchUsage = `usage: braid bench [-n N] COLLECTIVE [flags]

Times COLLECTIVE from --min-size to --max-size (powers of two) on the ranks of
the job it runs in (braid run, mpirun, Slurm, torchrun), or on N local ranks
that it starts itself with -n N. Rank 0 prints the table (or CSV or JSON) on
standard output, draws --plot, and shows a progress bar on standard error
when that is a terminal.

--all-algos times every algorithm of COLLECTIVE side by side at each size,
with the planner's own choice as "auto"; --algos LIST times the ones listed
(names may carry parameters: segring:seg=64K,knomial:k=4,auto).
--imbalance MIF injects, before each call, compute of a random length in
[0, MIF × α] on every rank, and reports the latency of the calls alone, as
"Efficient Process Arrival Pattern Aware Collective Communication for Deep
Learning" (EuroMPI/USA 2022, §6.1) does, split on the job's common clock
into the wait for the last arrival (which no allreduce shortens) and the
tail after it (what the algorithm does once every rank is there). α is the
paper's (§2.2): the time of one point-to-point message of the size, half
the median round trip of a ping-pong between ranks 0 and 1 measured before
each size's imbalanced runs (the α µs column); --imbalance-alpha collective
takes the size's smallest balanced latency of the collective instead.
--device cuda times GPU buffers instead (braid bench --device cuda -h).

examples:
  braid bench -n 4 allreduce --check
  braid bench -n 2 allreduce --all-algos --max-size 16M --plot allreduce.png
  braid bench -n 4 bcast --algos binomial,chain:seg=256K,auto --format csv
  braid bench -n 4 allreduce --imbalance 10 --max-size 64K
  braid bench -n 2 reducescatter --algo shm --registered --min-size 64K

flags:
`

func benchCmd(args []string) error {
	if dev, rest := benchDeviceArgs(args); dev != "" {
		// Device buffers: bench_cuda.go.
		return benchDevice(dev, rest)
	}
	fs := flag.NewFlagSet("braid bench", flag.ContinueOnError)
	n := fs.Int("n", 0, "start N local ranks (as braid run -n N would)")
	minS := fs.String("min-size", "4", "smallest size (bytes; K, M, G suffixes)")
	maxS := fs.String("max-size", "64M", "largest size")
	sizesF := fs.String("sizes", "", "measure these sizes (comma-separated, K, M, G suffixes) instead of the powers of two from --min-size to --max-size")
	iters := fs.Int("iters", 0, "timed iterations per size (0: as many as fit in --budget)")
	warmup := fs.Int("warmup", 0, "warm-up iterations per size (0: 50 small, 5 medium, 2 large; -1: none)")
	chk := fs.Bool("check", false, "verify every result before timing (the table's correct column)")
	algoF := fs.String("algo", "", "force an algorithm (as BRAID_ALGO)")
	transportF := fs.String("transport", "", "shm or tcp between processes (as BRAID_TRANSPORT)")
	dt := fs.String("dtype", "float32", "element type")
	opF := fs.String("op", "sum", "reduction operator (of allreduce, reduce and reducescatter; the others ignore it)")
	root := fs.Int("root", 0, "root rank of rooted collectives (bcast, reduce, gather, scatter; the others ignore it)")
	inplace := fs.Bool("inplace", false, "in-place calls")
	registered := fs.Bool("registered", false, "take the buffers from braid.Alloc: registered memory, which the host's shared area (algorithm shm) reads in place instead of copying")
	format := fs.String("format", "table", "table, csv or json")
	imb := fs.Float64("imbalance", 0, "inject random compute before each call, up to MIF × α (one message's time)")
	alphaF := fs.String("imbalance-alpha", bench.AlphaP2P, "α of --imbalance: p2p (one point-to-point message of the size, by ping-pong) or collective (the size's smallest balanced latency)")
	cpuprof := fs.String("cpuprofile", "", "write each rank's CPU profile to FILE.RANK")
	allAlgos := fs.Bool("all-algos", false, "time every algorithm of the collective side by side, and the planner's choice (auto)")
	algosF := fs.String("algos", "", "time these algorithms side by side (comma-separated; auto is the planner's choice)")
	budget := fs.Duration("budget", 250*time.Millisecond, "timed loop per size and algorithm when --iters is 0")
	reps := fs.Int("reps", 1, "measure every size this many times (interleaved sweeps) and report each run's fastest")
	plotF := fs.String("plot", "", "draw latency and bus bandwidth against size into FILE.png or FILE.svg")
	seed := fs.Uint64("seed", 1, "seed of --imbalance's random compute")
	fs.Usage = func() { fmt.Fprint(os.Stderr, benchUsage); fs.PrintDefaults() }

	// Flags may come before or after the collective: the one argument
	// that is neither a flag nor a flag's value names it.
	words, flags := splitArgs(fs, args)
	if done, err := parseFlags(fs, flags); done {
		return err
	}
	if len(words) == 0 {
		fs.Usage()
		return usageError{"bench: which collective? (allreduce, bcast, ...)"}
	}
	if len(words) > 1 {
		return usageError{fmt.Sprintf("bench: unexpected argument %s (after the collective %s; flags start with -)", words[1], words[0])}
	}
	col, err := sched.ParseCollective(words[0])
	if err != nil {
		return usageError{"bench: " + err.Error()}
	}
	ba, err := parseBenchArgs(col, *dt, *opF, *minS, *maxS)
	if err != nil {
		return err
	}
	d, op, lo, hi := ba.d, ba.op, ba.lo, ba.hi
	set := given(fs)
	launch := set["n"]
	if err := checkRanks("bench", set["n"], *n); err != nil {
		return err
	}
	if *imb < 0 || math.IsNaN(*imb) || math.IsInf(*imb, 0) {
		return usageError{fmt.Sprintf("bench: --imbalance %v: want a factor ≥ 0", *imb)}
	}
	if err := bench.CheckAlpha(*alphaF); err != nil {
		return usageError{fmt.Sprintf("bench: --imbalance-alpha %q: want %s or %s", *alphaF, bench.AlphaP2P, bench.AlphaCollective)}
	}
	if set["imbalance-alpha"] && *imb == 0 {
		return usageError{"bench: --imbalance-alpha applies only to --imbalance"}
	}
	if *imb > 0 && *alphaF == bench.AlphaP2P && set["n"] && *n < 2 {
		return usageError{"bench: --imbalance with α p2p (one message between two ranks) needs -n 2 or more (or --imbalance-alpha collective)"}
	}
	if *iters < 0 {
		return usageError{fmt.Sprintf("bench: --iters %d: want a count ≥ 1 (or 0: as many as fit in --budget)", *iters)}
	}
	if *warmup < -1 {
		return usageError{fmt.Sprintf("bench: --warmup %d: want a count ≥ 1 (0: by size; -1: none)", *warmup)}
	}
	if *reps < 1 {
		return usageError{fmt.Sprintf("bench: --reps %d: want at least 1", *reps)}
	}
	if *budget <= 0 {
		return usageError{fmt.Sprintf("bench: --budget %v: want a positive duration", *budget)}
	}
	if *root < 0 {
		return usageError{fmt.Sprintf("bench: --root %d: want a rank of the job (≥ 0)", *root)}
	}
	if set["n"] && *root >= *n {
		return usageError{fmt.Sprintf("bench: --root %d: want a rank of the job (0 to %d with -n %d)", *root, *n-1, *n)}
	}
	switch *format {
	case "table", "csv", "json":
	default:
		return usageError{fmt.Sprintf("bench: --format %q: want table, csv or json", *format)}
	}
	switch *transportF {
	case "", "auto", "shm", "tcp":
	default:
		return usageError{fmt.Sprintf("bench: --transport %q: want shm or tcp (default: shm within a host, tcp across)", *transportF)}
	}
	if *algoF != "" {
		if _, _, err := choice.ParseAlgo(*algoF); err != nil {
			return usageError{fmt.Sprintf("bench: --algo %q: %v", *algoF, err)}
		}
	}
	if *plotF != "" {
		if ext := strings.ToLower(filepath.Ext(*plotF)); ext != ".png" && ext != ".svg" {
			return usageError{fmt.Sprintf("bench: --plot %s: want a .png or .svg file", *plotF)}
		}
		if err := checkWritable("bench: --plot", *plotF); err != nil {
			return err
		}
	}
	algos, err := benchAlgos(col, *allAlgos, *algosF, *algoF)
	if err != nil {
		return err
	}
	var sizeList []int64
	if *sizesF != "" {
		if set["min-size"] || set["max-size"] {
			return usageError{"bench: --sizes lists the sizes; --min-size and --max-size give a range: use one of them"}
		}
		for _, f := range strings.Split(*sizesF, ",") {
			v, err := bench.ParseSize(strings.TrimSpace(f))
			if err != nil {
				return usageError{fmt.Sprintf("bench: --sizes %q: %v", *sizesF, err)}
			}
			sizeList = append(sizeList, v)
		}
	}
	cfg := bench.Config{Coll: col, MinSize: lo, MaxSize: hi, SizeList: sizeList, Iters: *iters, Warmup: *warmup,
		Check: *chk, DType: d, Op: op, Root: *root, InPlace: *inplace, Registered: *registered, Imbalance: *imb, Alpha: *alphaF, Seed: *seed,
		Algos: algos, Budget: *budget}
	if !col.Reduces() {
		cfg.Op = 0
	}
	// The sizes must hold whole elements: on the ranks -n starts, or on
	// one rank at least (bench.Run checks again on the job's).
	if err := bench.CheckSizes(cfg, max(*n, 1)); err != nil {
		return usageError{err.Error()}
	}
	var ignored string // BRAID_ALGO, unset for the runs
	if algos != nil {
		if ignored = os.Getenv("BRAID_ALGO"); ignored != "" {
			// A forced algorithm would override every run (and the
			// ranks -n starts inherit its absence).
			os.Unsetenv("BRAID_ALGO")
		}
	}
	if launch {
		// The arguments are good, and so is the environment: launch
		// ourselves on n ranks without -n.
		if err := (&braid.Options{Algo: *algoF, Transport: *transportF}).Validate(); err != nil {
			return err
		}
		if ignored != "" {
			fmt.Fprintf(os.Stderr, "braid bench: ignoring BRAID_ALGO=%s: each run chooses its algorithm\n", ignored)
		}
		return launchSelf(*n, []string{"bench"}, args)
	}

	ctx := context.Background()
	opts := &braid.Options{Algo: *algoF, Transport: *transportF}
	var forcer *bench.Forcer
	if algos != nil {
		if forcer, err = bench.NewForcer(""); err != nil {
			return err
		}
		opts.Planner = forcer
		for _, a := range algos {
			if ch, _ := plan.ParseChoice(a); ch.Segment > 0 || ch.Radix > 0 {
				// MIAD would move a segment given as a parameter.
				opts.DisableMIAD = true
			}
		}
	}
	limitMemory(hi)
	c, err := braid.Init(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	if ignored != "" && c.Rank() == 0 {
		fmt.Fprintf(os.Stderr, "braid bench: ignoring BRAID_ALGO=%s: each run chooses its algorithm\n", ignored)
	}
	if *root >= c.Size() {
		return usageError{fmt.Sprintf("bench: --root %d out of range for %d ranks", *root, c.Size())}
	}
	cfg.Forcer = forcer
	if *cpuprof != "" {
		stop, err := startCPUProfile(*cpuprof, c.Rank())
		if err != nil {
			return err
		}
		defer stop()
	}
	bar := c.Rank() == 0 && term.IsTerminal(int(os.Stderr.Fd()))
	if bar {
		start := time.Now()
		width := 24
		if w, _, err := term.GetSize(int(os.Stderr.Fd())); err == nil && w >= 80 {
			width = min(40, w-56)
		}
		cfg.Progress = func(p bench.Progress) {
			fmt.Fprint(os.Stderr, "\r"+progressLine(col.String(), p, time.Since(start), width)+"\033[K")
		}
	}
	rows, err := bench.Run(ctx, c, cfg)
	for rep := 1; rep < *reps && err == nil; rep++ {
		// Best of several sweeps: interference from the rest of the
		// machine only ever makes a measurement slower.
		var more []bench.Row
		if more, err = bench.Run(ctx, c, cfg); err == nil {
			rows = bench.Fastest(rows, more)
		}
	}
	if bar {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	if algos == nil && (*algoF != "" || os.Getenv("BRAID_ALGO") != "") {
		// One forced run: name it by the algorithm it ran.
		for i := range rows {
			rows[i].Algo = rows[i].Ran
		}
	}
	bad := 0
	for _, r := range rows {
		if r.Correct == bench.Wrong {
			bad++
		}
	}
	if c.Rank() == 0 {
		tr := *transportF
		if tr == "" {
			tr = os.Getenv("BRAID_TRANSPORT")
		}
		if tr == "" {
			tr = "shm within a host, tcp across"
			if c.Size() == 1 {
				tr = "single rank"
			}
		}
		h := bench.Header{Coll: col.String(), DType: d.String(), Transport: tr, Ranks: c.Size(), Hosts: c.Hosts(),
			InPlace: *inplace, Registered: *registered, Algo: *algoF, MIF: *imb, CPUs: whereRunning()}
		if *imb > 0 {
			h.Alpha = *alphaF
		}
		if col.Reduces() {
			h.Op = op.String()
		}
		if err := bench.Write(os.Stdout, *format, h, rows); err != nil {
			return err
		}
		if *plotF != "" {
			fig, err := benchplot.New(h, rows)
			if err == nil {
				err = fig.Write(*plotF)
			}
			if err != nil {
				return fmt.Errorf("bench: --plot: %w", err)
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("bench: %d sizes gave wrong results", bad)
	}
	return nil
}

// benchAlgos returns the runs --all-algos or --algos ask for, or nil for
// one run as the communicator is configured.
func benchAlgos(col sched.Collective, all bool, list, forced string) ([]string, error) {
	if !all && list == "" {
		return nil, nil
	}
	if all && list != "" {
		return nil, usageError{"bench: --all-algos and --algos: give one"}
	}
	if forced != "" {
		return nil, usageError{"bench: --algo forces one algorithm; with --all-algos or --algos, leave it out"}
	}
	var algos []string
	if all {
		for _, a := range algo.ForCollective(col) {
			algos = append(algos, a.Name())
		}
		algos = append(algos, bench.Auto)
	} else {
		for _, a := range strings.Split(list, ",") {
			if a = strings.TrimSpace(a); a != "" {
				algos = append(algos, a)
			}
		}
	}
	if len(algos) == 0 {
		return nil, usageError{"bench: --algos: no algorithm given"}
	}
	if err := bench.CheckAlgos(col, algos); err != nil {
		return nil, usageError{"bench: " + err.Error()}
	}
	return algos, nil
}

// benchArgs are the arguments host and device benchmarks parse alike.
type benchArgs struct {
	d      braid.DType
	op     braid.Op
	lo, hi int64
}

// parseBenchArgs checks the dtype, op and size range of a benchmark of col.
func parseBenchArgs(col sched.Collective, dt, opName, minS, maxS string) (benchArgs, error) {
	var a benchArgs
	var err error
	if a.d, err = dtype.ParseDType(dt); err != nil {
		return a, usageError{"bench: " + err.Error()}
	}
	if a.op, err = dtype.ParseOp(opName); err != nil {
		return a, usageError{"bench: " + err.Error()}
	}
	if col.Reduces() && !dtype.Supports(a.d, a.op) {
		return a, usageError{fmt.Sprintf("bench: op %v is not defined on %v", a.op, a.d)}
	}
	if a.lo, err = bench.ParseSize(minS); err != nil {
		return a, usageError{"bench: --min-size: " + err.Error()}
	}
	if a.hi, err = bench.ParseSize(maxS); err != nil {
		return a, usageError{"bench: --max-size: " + err.Error()}
	}
	if a.hi < a.lo {
		return a, usageError{"bench: --max-size is smaller than --min-size"}
	}
	return a, nil
}

// launchSelf starts n local ranks of this program with args less its -n
// flag, prefixed by cmd (the subcommand and its fixed flags).
func launchSelf(n int, cmd, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := append([]string(nil), cmd...)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-n" || a == "--n" {
			i++
			continue
		}
		if strings.HasPrefix(a, "-n=") || strings.HasPrefix(a, "--n=") {
			continue
		}
		child = append(child, a)
	}
	return launchLocal(n, false, "", self, child)
}

// startCPUProfile writes this rank's CPU profile to path.RANK (--cpuprofile)
// until stop is called.
func startCPUProfile(path string, rank int) (stop func(), err error) {
	f, err := os.Create(fmt.Sprintf("%s.%d", path, rank))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// whereRunning describes the CPUs this process may run on, as Linux lists
// them in /proc/self/status ("0-7"), and its GOMAXPROCS: what BRAID_BIND
// and Init's lowering of GOMAXPROCS left it. "" where that file is not.
func whereRunning() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return fmt.Sprintf("%s, GOMAXPROCS %d", strings.TrimSpace(v), runtime.GOMAXPROCS(0))
		}
	}
	return ""
}
