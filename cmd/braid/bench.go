package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
	"golang.org/x/term"
)

const benchUsage = `usage: braid bench [-n N] COLLECTIVE [flags]

Times COLLECTIVE from --min-size to --max-size (powers of two) on the ranks of
the job it runs in (braid run, mpirun, Slurm, torchrun), or on N local ranks
that it starts itself with -n N. Rank 0 prints the table.

flags:
`

func benchCmd(args []string) error {
	fs := flag.NewFlagSet("braid bench", flag.ContinueOnError)
	n := fs.Int("n", 0, "start N local ranks (as braid run -n N would)")
	minS := fs.String("min-size", "4", "smallest size (bytes; K, M, G suffixes)")
	maxS := fs.String("max-size", "64M", "largest size")
	iters := fs.Int("iters", 0, "timed iterations per size (0: as many as fit in about 0.25 s)")
	warmup := fs.Int("warmup", 0, "warm-up iterations per size (0: 50 small, 5 medium, 2 large)")
	chk := fs.Bool("check", false, "verify every result before timing (the table's correct column)")
	algoF := fs.String("algo", "", "force an algorithm (as BRAID_ALGO)")
	transportF := fs.String("transport", "", "shm or tcp between processes (as BRAID_TRANSPORT)")
	dt := fs.String("dtype", "float32", "element type")
	opF := fs.String("op", "sum", "reduction operator")
	root := fs.Int("root", 0, "root rank of rooted collectives")
	inplace := fs.Bool("inplace", false, "in-place calls")
	format := fs.String("format", "table", "table, csv or json")
	imb := fs.Float64("imbalance", 0, "inject random compute before each call, up to MIF × the call's balanced latency")
	cpuprof := fs.String("cpuprofile", "", "write each rank's CPU profile to FILE.RANK")
	fs.Usage = func() { fmt.Fprint(os.Stderr, benchUsage); fs.PrintDefaults() }

	// Flags may come before or after the collective: the first argument
	// that is neither a flag nor a flag's value names it.
	var coll string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			if coll == "" {
				coll = a
				continue
			}
			rest = append(rest, a)
			continue
		}
		rest = append(rest, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && i+1 < len(args) {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				continue
			}
			i++
			rest = append(rest, args[i])
		}
	}
	if err := fs.Parse(rest); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 && coll == "" {
		coll = fs.Arg(0)
	}
	if coll == "" {
		fs.Usage()
		return usageError{"bench: which collective? (allreduce, bcast, ...)"}
	}
	col, err := sched.ParseCollective(coll)
	if err != nil {
		return usageError{"bench: " + err.Error()}
	}
	if *n > 0 && os.Getenv("BRAID_RANK") == "" {
		// Launch ourselves on n ranks without -n.
		self, err := os.Executable()
		if err != nil {
			return err
		}
		var child []string
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
		return launchLocal(*n, false, self, append([]string{"bench"}, child...))
	}
	d, err := dtype.ParseDType(*dt)
	if err != nil {
		return usageError{"bench: " + err.Error()}
	}
	op, err := dtype.ParseOp(*opF)
	if err != nil {
		return usageError{"bench: " + err.Error()}
	}
	if col.Reduces() && !dtype.Supports(d, op) {
		return usageError{fmt.Sprintf("bench: op %v is not defined on %v", op, d)}
	}
	lo, err := bench.ParseSize(*minS)
	if err != nil {
		return usageError{"bench: --min-size: " + err.Error()}
	}
	hi, err := bench.ParseSize(*maxS)
	if err != nil {
		return usageError{"bench: --max-size: " + err.Error()}
	}
	if hi < lo {
		return usageError{"bench: --max-size is smaller than --min-size"}
	}

	ctx := context.Background()
	c, err := braid.Init(ctx, &braid.Options{Algo: *algoF, Transport: *transportF})
	if err != nil {
		return err
	}
	defer c.Close()
	if *root < 0 || *root >= c.Size() {
		return usageError{fmt.Sprintf("bench: --root %d out of range for %d ranks", *root, c.Size())}
	}
	cfg := bench.Config{Coll: col, MinSize: lo, MaxSize: hi, Iters: *iters, Warmup: *warmup,
		Check: *chk, DType: d, Op: op, Root: *root, InPlace: *inplace, Imbalance: *imb}
	if !col.Reduces() {
		cfg.Op = 0
	}
	if *cpuprof != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", *cpuprof, c.Rank()))
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	tty := c.Rank() == 0 && *format == "table" && term.IsTerminal(int(os.Stderr.Fd()))
	start := time.Now()
	if tty {
		cfg.Progress = func(size int64) {
			fmt.Fprintf(os.Stderr, "\r%s %-8s %5.1fs ", col, bench.FormatSize(size), time.Since(start).Seconds())
		}
	}
	rows, err := bench.Run(ctx, c, cfg)
	if tty {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	for i := range rows {
		count := rows[i].Count
		if a, _, err := c.Explain(col.String(), count, d, *root); err == nil {
			rows[i].Algo = a
		}
	}
	bad := 0
	for _, r := range rows {
		if r.Correct == "no" {
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
		h := bench.Header{Coll: col.String(), DType: d.String(), Transport: tr, Ranks: c.Size(), Hosts: c.Hosts(), InPlace: *inplace, Algo: *algoF}
		if col.Reduces() {
			h.Op = op.String()
		}
		if err := bench.Write(os.Stdout, *format, h, rows); err != nil {
			return err
		}
	}
	if bad > 0 {
		return fmt.Errorf("bench: %d sizes gave wrong results", bad)
	}
	return nil
}
