package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

const tuneDeviceUsage = `usage: braid tune --device cuda [flags]

Measures, on device buffers, every fused kernel and every schedule that
can run each collective, at each size, one rank per GPU, and writes a
device tuning table (format: package plan): at each size the fastest, as
DeviceOptions.Algo and BRAID_ALGO name it ("gpu_oneshot" and "direct"
for the fused allreduces, "fused" for the fused broadcast, allgather and
reduce-scatter, "ring", "chain", ...). Its machine line records the GPUs
(count and model); a device communicator reads it through
BRAID_GPU_TUNING (DeviceOptions.Tuning), or by default from the cache
file this writes, and refuses it on other GPUs. Calls are stream-ordered,
as braid bench --device cuda times them: the best of --trials loops of
--target each, the slowest rank's time.

With --multipath it tunes the multi-path copy between two GPUs instead
(braid tune --device cuda --multipath -h).

examples:
  braid tune --device cuda                  # every visible GPU, the default collectives
  braid tune --device cuda -n 2,4 --colls allreduce,bcast --max-size 64M --out cuda.txt
  BRAID_GPU_TUNING=cuda.txt BRAID_DEBUG=info braid bench --device cuda -n 4 allreduce

flags:
`

// tuneDeviceColls are the collectives braid tune --device cuda measures
// by default: those braid bench --device cuda times.
const tuneDeviceColls = "allreduce,bcast,allgather,reducescatter"

// tuneDeviceTable is braid tune --device cuda.
func tuneDeviceTable(args []string) error {
	fs := flag.NewFlagSet("braid tune --device cuda", flag.ContinueOnError)
	nsF := fs.String("n", "", "GPU counts to tune for, each run as its own local job, one rank per GPU (default: every GPU the driver shows)")
	collsF := fs.String("colls", tuneDeviceColls, "collectives to tune")
	minS := fs.String("min-size", "8", "smallest size (bytes; K, M, G suffixes)")
	maxS := fs.String("max-size", "256M", "largest size")
	step := fs.Int("step", 4, "factor between measured sizes")
	target := fs.Duration("target", 20*time.Millisecond, "time of one timed loop")
	trials := fs.Int("trials", 2, "timed loops per size and algorithm; the best counts")
	out := fs.String("out", "", "table file to write (default: "+braid.DefaultDeviceTuningFile()+")")
	part := fs.String("part", "", "internal: run as one rank of a tuning job and write its part here")
	fs.Usage = func() { fmt.Fprint(os.Stderr, tuneDeviceUsage); fs.PrintDefaults() }
	if done, err := parseFlags(fs, args); done {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"tune --device cuda: unexpected argument " + fs.Arg(0)}
	}
	colls, err := parseDeviceColls(*collsF)
	if err != nil {
		return usageError{"tune --device cuda: " + err.Error()}
	}
	lo, err := plan.ParseSize(*minS)
	if err != nil {
		return usageError{"tune --device cuda: --min-size: " + err.Error()}
	}
	hi, err := plan.ParseSize(*maxS)
	if err != nil {
		return usageError{"tune --device cuda: --max-size: " + err.Error()}
	}
	switch {
	case hi < 1 || hi < lo:
		return usageError{fmt.Sprintf("tune --device cuda: want 0 < --min-size ≤ --max-size, got %s and %s", *minS, *maxS)}
	case *step < 2:
		return usageError{fmt.Sprintf("tune --device cuda: --step %d: want a factor ≥ 2", *step)}
	case *target <= 0 || *trials < 1:
		return usageError{"tune --device cuda: want a positive --target and --trials ≥ 1"}
	}
	sizes := tuneSizes(lo, hi, int64(*step))
	if *part != "" {
		return tuneDeviceRank(colls, sizes, *target, *trials, *part)
	}

	var ns []int
	if *nsF != "" {
		for _, f := range strings.Split(*nsF, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 || slices.Contains(ns, n) {
				return usageError{fmt.Sprintf("tune --device cuda: -n %q: want GPU counts ≥ 2, comma separated, each once", *nsF)}
			}
			ns = append(ns, n)
		}
	}
	dest := *out
	if dest == "" {
		if dest = braid.DefaultDeviceTuningFile(); dest == "" {
			return fmt.Errorf("tune --device cuda: no cache directory for the default table; give --out")
		}
	} else if err := checkWritable("tune --device cuda: --out", dest); err != nil {
		return err
	}
	ngpu, err := cuda.DeviceCount()
	if err != nil {
		return fmt.Errorf("tune --device cuda: %w", err)
	}
	here, err := braid.ThisGPUs(0)
	if err != nil {
		return fmt.Errorf("tune --device cuda: %w", err)
	}
	if ns == nil {
		ns = []int{ngpu}
	}
	for _, n := range ns {
		switch {
		case n < 2:
			return fmt.Errorf("tune --device cuda: %d GPU visible: a device table needs 2 or more (-n runs ranks that share GPUs, for tests only)", ngpu)
		case n > ngpu:
			fmt.Fprintf(os.Stderr, "braid tune: -n %d on %d GPUs: ranks share GPUs, which the driver time-slices; the figures are not those of %d GPUs\n", n, ngpu, n)
		}
	}
	if a := os.Getenv("BRAID_ALGO"); a != "" {
		fmt.Fprintf(os.Stderr, "braid tune: ignoring BRAID_ALGO=%s: tuning times every algorithm\n", a)
		os.Unsetenv("BRAID_ALGO")
	}
	var knobs []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BRAID_GPU_") && !strings.HasPrefix(kv, "BRAID_GPU_TUNING=") {
			knobs = append(knobs, kv)
		}
	}
	if len(knobs) > 0 {
		fmt.Fprintf(os.Stderr, "braid tune: the fused kernels are measured as %s set them: the table holds for jobs that set them alike\n", strings.Join(knobs, " "))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "braid-tune-cuda-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	t := &plan.Table{Machine: here}
	for _, n := range ns {
		fmt.Fprintf(os.Stderr, "braid tune: %d GPUs (%v): %s, %d sizes from %s to %s\n", n, here, *collsF, len(sizes), plan.FormatSize(lo), plan.FormatSize(hi))
		file := filepath.Join(tmp, fmt.Sprintf("part-%d.txt", n))
		child := []string{"tune", "--device", "cuda", "--part", file, "--colls", *collsF, "--min-size", *minS, "--max-size", *maxS,
			"--step", strconv.Itoa(*step), "--target", target.String(), "--trials", strconv.Itoa(*trials)}
		if err := launchLocal(n, false, "", self, child); err != nil {
			return fmt.Errorf("tune --device cuda: %d GPUs: %w", n, err)
		}
		p, err := plan.LoadTable(file)
		if err != nil {
			return fmt.Errorf("tune --device cuda: %d GPUs: %w", n, err)
		}
		t.Entries = append(t.Entries, p.Entries...)
	}
	t.Sort()
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	var sb strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&sb, "# braid device tuning table, written by braid tune --device cuda on %s at %s\n", host, time.Now().Format(time.RFC3339))
	fmt.Fprintf(&sb, "# GPUs %v, sizes %s to %s ×%d, best of %d loops of %v, stream-ordered calls\n", ns, plan.FormatSize(lo), plan.FormatSize(hi), *step, *trials, *target)
	t.WriteTo(&sb)
	if err := os.WriteFile(dest, []byte(sb.String()), 0o644); err != nil {
		return err
	}
	fmt.Print(sb.String())
	fmt.Fprintf(os.Stderr, "braid tune: wrote %s\n", dest)
	return nil
}

// parseDeviceColls reads --colls: collectives braid bench --device cuda
// times.
func parseDeviceColls(s string) ([]sched.Collective, error) {
	colls, err := parseColls(s)
	if err != nil {
		return nil, err
	}
	for _, c := range colls {
		switch c {
		case sched.Allreduce, sched.Bcast, sched.Allgather, sched.ReduceScatter:
		default:
			return nil, fmt.Errorf("--colls: %v is not tuned on devices (allreduce, bcast, allgather, reducescatter)", c)
		}
	}
	return colls, nil
}

// deviceTuneRuns lists what braid tune --device cuda times for coll: the
// fused kernels by the names the planner gives them (gpu_oneshot and, as
// a schedule's name, direct for allreduce; fused for the others), then
// every schedule of coll. Each is forced in turn (DeviceOptions.Algo); one
// that cannot run a size is left out there.
func deviceTuneRuns(coll sched.Collective) []string {
	var runs []string
	switch coll {
	case sched.Allreduce:
		runs = append(runs, algo.GPUOneShot.Name())
	case sched.Bcast, sched.Allgather, sched.ReduceScatter:
		runs = append(runs, choice.Fused)
	}
	for _, a := range algo.ForCollective(coll) {
		if !slices.Contains(runs, a.Name()) {
			runs = append(runs, a.Name())
		}
	}
	return runs
}

// deviceTiming is one run's time at one size.
type deviceTiming struct {
	bytes int64 // the size, as a tuning table keys it (plan.Size)
	run   string
	secs  float64
}

// fastestBySize picks each size's fastest run from timings, which come
// size by size, but keeps the previous size's choice where it is within
// tuneTolerance of the fastest (a table that flips between equals at
// every size helps no one). It returns the sizes and their choices.
func fastestBySize(timings []deviceTiming) ([]int64, []plan.Choice, error) {
	var sizes []int64
	var best []plan.Choice
	for i := 0; i < len(timings); {
		j := i
		var win, prev *deviceTiming
		for ; j < len(timings) && timings[j].bytes == timings[i].bytes; j++ {
			r := &timings[j]
			if win == nil || r.secs < win.secs {
				win = r
			}
			if len(best) > 0 && r.run == best[len(best)-1].String() {
				prev = r
			}
		}
		i = j
		if prev != nil && prev.secs <= win.secs*(1+tuneTolerance) {
			win = prev
		}
		ch, err := plan.ParseChoice(win.run)
		if err != nil {
			return nil, nil, err
		}
		sizes, best = append(sizes, win.bytes), append(best, ch)
	}
	return sizes, best, nil
}

// tuneDeviceRank is one rank of a device tuning job: it times every run
// of every collective at every size, and rank 0 writes the job's part of
// the table to file.
func tuneDeviceRank(colls []sched.Collective, sizes []int64, target time.Duration, trials int, file string) error {
	ctx := context.Background()
	os.Unsetenv("BRAID_ALGO")
	c, err := braid.Init(ctx, &braid.Options{Tuning: "none"})
	if err != nil {
		return err
	}
	defer c.Close()
	ngpu, err := cuda.DeviceCount()
	if err != nil {
		return err
	}
	gpu := cuda.Device(c.LocalRank() % ngpu)
	here, err := braid.ThisGPUs(gpu)
	if err != nil {
		return err
	}
	t := &plan.Table{Machine: here}
	for _, coll := range colls {
		timings, err := timeDeviceRuns(ctx, c, gpu, coll, sizes, target, trials)
		if err != nil {
			return fmt.Errorf("tune --device cuda: %v: %w", coll, err)
		}
		measured, best, err := fastestBySize(timings)
		if err != nil {
			return err
		}
		t.Entries = append(t.Entries, tableEntries(coll, c.Size(), 1, measured, best)...)
	}
	if c.Rank() != 0 {
		return nil
	}
	var sb strings.Builder
	t.WriteTo(&sb)
	return os.WriteFile(file, []byte(sb.String()), 0o644)
}

// timeDeviceRuns times every run of coll at every size on device buffers
// of gpu, a device communicator per run, and returns the times that ran,
// size by size. A run that cannot take a size (an InvalidArgument from
// the planner, the same on every rank) is left out there.
func timeDeviceRuns(ctx context.Context, c *braid.Comm, gpu cuda.Device, coll sched.Collective, sizes []int64, target time.Duration, trials int) ([]deviceTiming, error) {
	const dt, op, es = braid.Float32, braid.Sum, 4
	n := c.Size()
	runs := deviceTuneRuns(coll)
	comms := make([]*braid.DeviceComm, len(runs))
	defer func() {
		for _, dc := range comms {
			if dc != nil {
				dc.Close()
			}
		}
	}()
	for i, r := range runs {
		dc, err := c.NewDeviceComm(ctx, gpu, &braid.DeviceOptions{StreamOrdered: true, Tuning: "none", Algo: map[string]string{coll.String(): r}})
		if err != nil {
			return nil, err
		}
		comms[i] = dc
	}
	w := comms[0].Worker()
	maxBytes := int(sizes[len(sizes)-1]) + es*n
	var bufA, bufB cuda.DevicePtr
	if err := w.Do(ctx, func(cc *cuda.Ctx) (err error) {
		if bufA, err = cc.Alloc(maxBytes); err != nil {
			return err
		}
		bufB, err = cc.Alloc(maxBytes)
		return err
	}); err != nil {
		return nil, err
	}
	defer w.Do(context.Background(), func(cc *cuda.Ctx) error { cc.Free(bufA); return cc.Free(bufB) })
	var out []deviceTiming
	for _, size := range sizes {
		count := int(size) / es
		if coll == sched.Allgather || coll == sched.ReduceScatter {
			count /= n // a block per rank, as braid bench --device cuda cuts them
		}
		if count == 0 {
			continue
		}
		bytes := plan.Size(sched.Params{Coll: coll, NRanks: n, Count: count}, es)
		for i, r := range runs {
			dc := comms[i]
			call := deviceBenchCall(ctx, dc, coll, dt, op, 0, count, n, c.Rank(), bufA, bufB)
			issued := func() error { return w.Do(ctx, func(*cuda.Ctx) error { return nil }) }
			sync := func() error { return dc.Synchronize(ctx) }
			best, _, _, err := deviceBenchTime(ctx, c, call, issued, sync, target, trials, loopHooks{})
			var be *braid.Error
			switch {
			case errors.As(err, &be) && be.Kind == braid.InvalidArgument:
				continue // this run cannot take this size
			case err != nil:
				return nil, fmt.Errorf("%s at %s: %w", r, plan.FormatSize(bytes), err)
			}
			out = append(out, deviceTiming{bytes: bytes, run: r, secs: best.Seconds()})
			if c.Rank() == 0 {
				fmt.Fprintf(os.Stderr, "  %-13v %6s on %d GPUs: %-12s %10.2f µs\n", coll, plan.FormatSize(bytes), n, r, best.Seconds()*1e6)
			}
		}
	}
	return out, nil
}
