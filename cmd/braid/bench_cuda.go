package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

const benchDeviceUsage = `usage: braid bench --device cuda [-n N] COLLECTIVE [flags]

Times COLLECTIVE on device buffers, one rank per GPU (rank r on GPU
LOCAL_RANK mod the GPUs visible), as nccl-tests and NCCL's own benchmarks
do: the size is the largest buffer (allgather: the gathered output;
reducescatter: the whole input), powers of two up to 1M and then powers
of four; allreduce and bcast run in place, allgather and reducescatter
not. Calls are stream-ordered (DeviceOptions.StreamOrdered), as NCCL's
are: a timed loop queues its calls and synchronises once at the end, which
is how NCCL's figures are taken. With --sync every call returns only when
its result is in place, and the loop measures the latency such a caller
sees; --resident 500us runs those of allreduce up to --resident-max on a
kernel that stays on each GPU between calls (DeviceOptions.Resident), with
no launch per call. In graph mode --graph-calls calls are captured into one CUDA graph
(DeviceComm.Capture) after a few calls one by one, and the loop replays
the graph back to back, one synchronisation at the end; the time is per
call (per replay / --graph-calls). Only calls the planner runs as fused
kernels can be captured: a size whose call runs a schedule says so
instead. --modes ordered,sync,graph times all three, each on its own
communicator.
Per size: warm-up calls, an estimate, then as many calls as fill
--target, best of --trials loops, the time the slowest rank took.

With --inputs K (K >= 2; float32, sum) the calls run out of place from K
input buffers in turn, whose values differ from each other and from one
timed loop to the next, into one output buffer (bcast: from the root's
input buffer into the others' output buffer); after every timed loop the
last call's result is compared with what it must hold (every element up
to 64M, pieces of it above), and a wrong one fails the run; --check's
call then runs in place on the first input buffer. A graph's calls take
the input buffers in turn as they were captured, and every replay reads
their current values.

examples:
  braid bench --device cuda -n 2 allreduce --check
  braid bench --device cuda -n 4 allreduce --algos gpu_oneshot,direct,ring --max-size 64M
  braid bench --device cuda -n 2 allreduce --modes ordered,graph --inputs 4 --max-size 256K
  braid run -n 2 -- braid bench --device cuda bcast --format json

flags:
`

// benchDeviceArgs returns the value of --device (or -device) in args and
// the arguments without it. benchCmd passes the call here when a device
// is named:
//
//	if dev, rest := benchDeviceArgs(args); dev != "" { return benchDevice(dev, rest) }
func benchDeviceArgs(args []string) (string, []string) {
	var dev string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--device" || a == "-device":
			if i+1 < len(args) {
				dev = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--device=") || strings.HasPrefix(a, "-device="):
			_, dev, _ = strings.Cut(a, "=")
		default:
			rest = append(rest, a)
		}
	}
	return dev, rest
}

// benchDevice is braid bench --device DEV.
func benchDevice(dev string, args []string) error {
	if dev != "cuda" {
		return usageError{fmt.Sprintf("bench: --device %s: only cuda is supported", dev)}
	}
	fs := flag.NewFlagSet("braid bench --device cuda", flag.ContinueOnError)
	n := fs.Int("n", 0, "start N local ranks, one per GPU (as braid run -n N would)")
	minS := fs.String("min-size", "8", "smallest size (bytes; K, M, G suffixes)")
	maxS := fs.String("max-size", "1G", "largest size")
	sizesF := fs.String("sizes", "", "these sizes only, comma-separated (8,4K,1G), in place of --min-size to --max-size")
	algosF := fs.String("algos", "", "time these algorithms side by side (comma-separated; auto is the default choice)")
	algoF := fs.String("algo", "", "force one algorithm")
	dt := fs.String("dtype", "float32", "element type")
	opF := fs.String("op", "sum", "reduction operator")
	root := fs.Int("root", 0, "root rank of bcast")
	chk := fs.Bool("check", false, "verify one call's result at every size up to 64M before timing it")
	format := fs.String("format", "table", "table or json (one object per line)")
	target := fs.Duration("target", 50*time.Millisecond, "time of one timed loop")
	trials := fs.Int("trials", 2, "timed loops per size; the best counts")
	oneShot := fs.String("oneshot-max", "", "largest allreduce run one-shot (bytes, or never; default braid.DefaultOneShotMax(n))")
	directMax := fs.String("direct-max", "", "largest allreduce run as direct reduce-scatter and allgather, the fused two-shot kernel (bytes, or never)")
	groupsF := fs.String("groups", "", "GPU groups for hierpipe and hier, rank r's group at position r (e.g. 0,0,1,1)")
	fusedF := fs.String("fused-max", "", "largest bcast, or allgather or reducescatter block, run as a fused kernel (bytes, or never)")
	llF := fs.String("ll-max", "", "largest one-shot allreduce run in low-latency lines (bytes, or never; default fused.DefaultLLBytes(n))")
	hostF := fs.String("host-share", "", "percentage of fused two-shot allreduces, broadcasts, reduce-scatters and allgathers on 3+ GPUs (and of broadcasts on 2) sent through host memory beside NVLink (or never; default by size)")
	slotF := fs.String("slot", "", "bytes of each slot of the region the fused kernels push into (default: 32M / n)")
	segF := fs.String("segment", "", "bytes per message of pipelined algorithms (default: by size)")
	syncF := fs.Bool("sync", false, "synchronous calls (each returns when its result is in place) instead of stream-ordered ones")
	modesF := fs.String("modes", "", "ordered, sync, graph, or several, comma-separated (default: ordered, or sync with --sync)")
	syncMaxF := fs.String("sync-max", "", "largest size timed in sync mode (default: every size)")
	graphMaxF := fs.String("graph-max", "", "largest size timed in graph mode (default: every size)")
	graphCalls := fs.Int("graph-calls", 20, "calls captured in one CUDA graph in graph mode")
	inputsF := fs.Int("inputs", 1, "K input buffers used in turn, out of place, the last result checked after every timed loop (1: one buffer, in place, unchecked)")
	cpuprof := fs.String("cpuprofile", "", "write each rank's CPU profile to FILE.RANK")
	residentF := fs.Duration("resident", 0, "synchronous allreduces up to --resident-max on a kernel that stays on the GPU, which ends after this long without one (DeviceOptions.Resident; 0: off, or BRAID_GPU_RESIDENT)")
	residentMaxF := fs.String("resident-max", "", "largest allreduce the resident kernel runs (bytes; default 16K)")
	fs.Usage = func() { fmt.Fprint(os.Stderr, benchDeviceUsage); fs.PrintDefaults() }
	words, flags := splitArgs(fs, args)
	if done, err := parseFlags(fs, flags); done {
		return err
	}
	if len(words) == 0 {
		fs.Usage()
		return usageError{"bench: which collective? (allreduce, bcast, allgather, reducescatter)"}
	}
	if len(words) > 1 {
		return usageError{fmt.Sprintf("bench: unexpected argument %s (after the collective %s; flags start with -)", words[1], words[0])}
	}
	coll := words[0]
	set := given(fs)
	if err := checkRanks("bench", set["n"], *n); err != nil {
		return err
	}
	switch {
	case *target <= 0:
		return usageError{fmt.Sprintf("bench: --target %v: want a positive duration", *target)}
	case *trials < 1:
		return usageError{fmt.Sprintf("bench: --trials %d: want at least 1", *trials)}
	case *root < 0 || set["n"] && *root >= *n:
		return usageError{fmt.Sprintf("bench: --root %d: want a rank of the job", *root)}
	case *algoF != "" && *algosF != "":
		return usageError{"bench: --algo forces one algorithm and --algos times several: give one"}
	}
	col, err := sched.ParseCollective(coll)
	if err != nil {
		return usageError{"bench: " + err.Error()}
	}
	switch col {
	case sched.Allreduce, sched.Bcast, sched.Allgather, sched.ReduceScatter:
	default:
		return usageError{fmt.Sprintf("bench --device cuda: %v is not benchmarked on devices (allreduce, bcast, allgather, reducescatter)", col)}
	}
	ba, err := parseBenchArgs(col, *dt, *opF, *minS, *maxS)
	if err != nil {
		return err
	}
	d, op, lo, hi := ba.d, ba.op, ba.lo, ba.hi
	var only []int64
	if *sizesF != "" {
		if set["min-size"] || set["max-size"] {
			return usageError{"bench: --sizes names the sizes; --min-size and --max-size bound a series: give one"}
		}
		lo, hi = math.MaxInt64, 0
		for _, f := range strings.Split(*sizesF, ",") {
			v, err := bench.ParseSize(strings.TrimSpace(f))
			if err != nil || v <= 0 {
				return usageError{fmt.Sprintf("bench: --sizes %s: want positive sizes (8,4K,1G)", *sizesF)}
			}
			only = append(only, v)
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	var opts braid.DeviceOptions
	if *residentF < 0 {
		return usageError{fmt.Sprintf("bench: --resident %v: want a positive duration, or 0 for off", *residentF)}
	}
	opts.Resident = *residentF
	modes := []string{"ordered"}
	if *syncF {
		modes = []string{"sync"}
	}
	if *modesF != "" {
		if *syncF {
			return usageError{"bench: --sync and --modes: give one"}
		}
		modes = strings.Split(*modesF, ",")
		for _, m := range modes {
			if m != "ordered" && m != "sync" && m != "graph" {
				return usageError{fmt.Sprintf("bench: --modes %s: want ordered, sync, graph, or several of them comma-separated", *modesF)}
			}
		}
	}
	syncMax, graphMax := int64(math.MaxInt64), int64(math.MaxInt64)
	if *syncMaxF != "" {
		if syncMax, err = bench.ParseSize(*syncMaxF); err != nil {
			return usageError{"bench: --sync-max: " + err.Error()}
		}
	}
	if *graphMaxF != "" {
		if graphMax, err = bench.ParseSize(*graphMaxF); err != nil {
			return usageError{"bench: --graph-max: " + err.Error()}
		}
	}
	if *graphCalls < 1 {
		return usageError{fmt.Sprintf("bench: --graph-calls %d: want at least 1", *graphCalls)}
	}
	rotate := *inputsF
	switch {
	case rotate < 1:
		return usageError{fmt.Sprintf("bench: --inputs %d: want 1, or 2 and more", rotate)}
	case rotate > 1 && (d != dtype.Float32 || (col.Reduces() && op != dtype.Sum)):
		return usageError{"bench: --inputs: the checked values are float32 sums (--dtype float32 --op sum)"}
	}
	if *groupsF != "" {
		for _, f := range strings.Split(*groupsF, ",") {
			g, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return usageError{"bench: --groups: " + err.Error()}
			}
			opts.Groups = append(opts.Groups, g)
		}
	}
	for _, f := range []struct {
		s   string
		dst *int
	}{{*oneShot, &opts.OneShotMax}, {*directMax, &opts.DirectMax}, {*segF, &opts.Segment}, {*fusedF, &opts.FusedMax}, {*slotF, &opts.SlotBytes}, {*llF, &opts.LLMax}, {*hostF, &opts.HostShare}, {*residentMaxF, &opts.ResidentMax}} {
		if f.s == "never" || strings.HasPrefix(f.s, "-") {
			*f.dst = -1
			continue
		}
		if f.s != "" {
			v, err := bench.ParseSize(f.s)
			if err != nil {
				return usageError{"bench: " + err.Error()}
			}
			*f.dst = int(v)
		}
	}
	algos := []string{"auto"}
	if *algosF != "" {
		algos = strings.Split(*algosF, ",")
	} else if *algoF != "" {
		algos = []string{*algoF}
	}
	if *format != "table" && *format != "json" {
		return usageError{fmt.Sprintf("bench: --format %q: want table or json", *format)}
	}
	if set["n"] {
		return launchSelf(*n, []string{"bench", "--device", "cuda"}, args)
	}

	ctx := context.Background()
	c, err := braid.Init(ctx, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	if *root >= c.Size() {
		return usageError{fmt.Sprintf("bench: --root %d out of range for %d ranks", *root, c.Size())}
	}
	ngpu, err := cuda.DeviceCount()
	if err != nil {
		return fmt.Errorf("bench --device cuda: %w", err)
	}
	gpuID := cuda.Device(c.LocalRank() % ngpu)
	if *cpuprof != "" {
		stop, err := startCPUProfile(*cpuprof, c.Rank())
		if err != nil {
			return err
		}
		defer stop()
	}
	nr := c.Size()
	es := d.Size()
	var sizes []int64
	for _, s := range only {
		if s >= int64(es) {
			sizes = append(sizes, s)
		}
	}
	for s := max(lo, int64(es)); only == nil && s <= hi; {
		sizes = append(sizes, s)
		if s < 1<<20 {
			s *= 2
		} else {
			s *= 4
		}
	}
	if len(sizes) == 0 {
		return usageError{fmt.Sprintf("bench: --max-size %s is smaller than one %v element (%d B)", *maxS, d, es)}
	}
	// One buffer pair for the largest size.
	// A communicator per algorithm and mode.
	comms := map[string]*braid.DeviceComm{}
	defer func() {
		for _, dc := range comms {
			dc.Close()
		}
	}()
	for _, a := range algos {
		for _, m := range modes {
			o := opts
			o.StreamOrdered = m == "ordered" || m == "graph"
			if a != "auto" {
				o.Algo = map[string]string{col.String(): a}
			}
			dc, err := c.NewDeviceComm(ctx, gpuID, &o)
			if err != nil {
				return err
			}
			comms[a+"/"+m] = dc
		}
	}
	w := comms[algos[0]+"/"+modes[0]].Worker()
	maxBytes := int(hi) + es*nr
	// One buffer pair for the largest size, or the slots and the output
	// of --inputs.
	var bufA, bufB cuda.DevicePtr
	var slots []cuda.DevicePtr
	if err := w.Do(ctx, func(cc *cuda.Ctx) (err error) {
		if rotate > 1 {
			slotBytes, outBytes := rotationBytes(hi, nr)
			for range rotate {
				p, err := cc.Alloc(slotBytes)
				if err != nil {
					return err
				}
				slots = append(slots, p)
			}
			bufB, err = cc.Alloc(outBytes)
			return err
		}
		if bufA, err = cc.Alloc(maxBytes); err != nil {
			return err
		}
		if bufB, err = cc.Alloc(maxBytes); err != nil {
			return err
		}
		return nil
	}); err != nil {
		return err
	}
	defer w.Do(context.Background(), func(cc *cuda.Ctx) error {
		for _, p := range slots {
			cc.Free(p)
		}
		if bufA != 0 {
			cc.Free(bufA)
		}
		return cc.Free(bufB)
	})

	rank := c.Rank()
	if rank == 0 && *format == "table" {
		name, _ := gpuID.Name()
		inputs := "one buffer, in place"
		if rotate > 1 {
			inputs = fmt.Sprintf("%d input buffers in turn, out of place, each loop's last result checked", rotate)
		}
		fmt.Printf("# braid bench --device cuda %v, %d ranks on %s, %v %v, %s calls, %s; time = slowest rank, best of %d loops\n",
			col, nr, name, d, op, strings.Join(modes, " and "), inputs, *trials)
		fmt.Printf("%10s %12s %-12s %-8s %12s %10s %10s %8s\n", "size", "count", "algo", "mode", "time(us)", "algbw", "busbw", "correct")
	}
	wrong := 0 // sizes and algorithms checked and found wrong
	for _, size := range sizes {
		// count: elements per rank as sched.Params counts them.
		total := int(size) / es
		count := total
		if col == sched.Allgather || col == sched.ReduceScatter {
			// A block per rank: the size is cut down to a multiple of
			// nr elements (as nccl-tests and scripts/nccl_ctypes.py do),
			// so that 3, 5, 6 or 7 GPUs run every size too.
			count = total / nr
			size = int64(count * nr * es)
		}
		if count == 0 {
			continue
		}
		for _, am := range cross(algos, modes) {
			a, mode := am[0], am[1]
			if mode == "sync" && size > syncMax || mode == "graph" && size > graphMax {
				continue
			}
			dc := comms[a+"/"+mode]
			// --check's call: in place on A (with --inputs, the first slot).
			checkA := bufA
			if rotate > 1 {
				checkA = slots[0]
			}
			call := deviceBenchCall(ctx, dc, col, d, op, *root, count, nr, rank, checkA, bufB)
			checkCall := call
			var hooks loopHooks
			if rotate > 1 {
				rot := newRotation(col, rotate, nr, rank, *root, count, slots, bufB)
				call = rot.call(ctx, dc, op)
				gen := 0
				hooks.before = func() error { gen++; return rot.fill(ctx, w, gen) }
				hooks.after = func() error { return rot.check(ctx, w) }
			}
			sync := func() error { return dc.Synchronize(ctx) }
			correct := bench.Unchecked
			if *chk && size <= checkMax {
				correct = bench.Right
				checked := func() error {
					if err := checkCall(); err != nil {
						return err
					}
					return sync()
				}
				if err := deviceBenchCheck(ctx, c, w, checked, col, d, op, *root, count, nr, rank, checkA, bufB); err != nil {
					correct = bench.Wrong
					wrong++
					fmt.Fprintf(os.Stderr, "rank %d: %v %d B %s: %v\n", rank, col, size, a, err)
				}
			}
			issued := func() error { return dc.Worker().Do(ctx, func(*cuda.Ctx) error { return nil }) }
			timed, per := call, 1
			var graph *braid.DeviceGraph
			if mode == "graph" {
				var skip string
				if graph, skip, err = benchGraph(ctx, dc, call, sync, *graphCalls); err != nil {
					return err
				}
				if graph == nil {
					if rank == 0 {
						reportGraphSkip(*format, col, nr, size, count, benchAlgoName(dc, a, col, count, es), skip)
					}
					continue
				}
				timed, per = func() error { return graph.Launch(ctx) }, *graphCalls
			}
			best, issue, iters, err := deviceBenchTime(ctx, c, timed, issued, sync, *target, *trials, hooks)
			if graph != nil {
				err = errors.Join(err, graph.Close())
			}
			best, issue, iters = best/time.Duration(per), issue/time.Duration(per), iters*per
			if rotate > 1 {
				if correct != bench.Wrong {
					correct = bench.Right
				}
				var wr *wrongResult
				if errors.As(err, &wr) {
					correct = bench.Wrong
					wrong++
					fmt.Fprintf(os.Stderr, "rank %d: WRONG RESULT: %v %d B %s %s: %v\n", rank, col, size, a, mode, wr.err)
					err = nil
				}
			}
			if err != nil {
				return err
			}
			name := benchAlgoName(dc, a, col, count, es)
			if rank != 0 {
				continue
			}
			us := best.Seconds() * 1e6
			algbw := float64(size) / best.Seconds() / 1e9
			busbw := algbw * bench.BusFactor(col, nr)
			if *format == "json" {
				rec := map[string]any{"api": "braid", "op": col.String(), "n": nr, "bytes": size, "algo": name,
					"time_us": us, "issue_us": issue.Seconds() * 1e6, "algbw_GBps": algbw, "busbw_GBps": busbw, "iters": iters, "correct": correct, "dtype": d.String(), "mode": mode,
					"inputs": rotate, "trials": *trials, "host_share": hostShareName(*hostF)}
				if mode == "graph" {
					rec["graph_calls"] = *graphCalls
				}
				b, _ := json.Marshal(rec)
				fmt.Println(string(b))
			} else {
				fmt.Printf("%10s %12d %-12s %-8s %12.2f %10.2f %10.2f %8s\n", bench.FormatSize(size), count, name, mode, us, algbw, busbw, string(correct))
			}
		}
	}
	if wrong > 0 {
		return fmt.Errorf("bench: %d checked runs gave wrong results", wrong)
	}
	return nil
}

// checkMax is the largest size --check verifies: the host reference costs
// tens of nanoseconds per element.
const checkMax = 64 << 20

// deviceBenchCall returns one call of col on the benchmark's buffers:
// allreduce and bcast in place on A, allgather and reducescatter from A
// to B.
func deviceBenchCall(ctx context.Context, dc *braid.DeviceComm, col sched.Collective, d dtype.DType, op dtype.Op, root, count, n, rank int, bufA, bufB cuda.DevicePtr) func() error {
	switch col {
	case sched.Allreduce:
		buf := braid.Device{Ptr: bufA, Count: count, Type: d}
		return func() error { return dc.Allreduce(ctx, buf, buf, op) }
	case sched.Bcast:
		buf := braid.Device{Ptr: bufA, Count: count, Type: d}
		return func() error { return dc.Bcast(ctx, buf, root) }
	case sched.Allgather:
		s, r := braid.Device{Ptr: bufA, Count: count, Type: d}, braid.Device{Ptr: bufB, Count: n * count, Type: d}
		return func() error { return dc.Allgather(ctx, s, r) }
	default:
		s, r := braid.Device{Ptr: bufA, Count: n * count, Type: d}, braid.Device{Ptr: bufB, Count: count, Type: d}
		return func() error { return dc.ReduceScatter(ctx, s, r, op) }
	}
}

// deviceBenchCheck fills the input, runs call once and compares the
// output with the reference; every rank learns whether all passed.
func deviceBenchCheck(ctx context.Context, c *braid.Comm, w *cuda.Worker, call func() error, col sched.Collective, d dtype.DType, op dtype.Op, root, count, n, rank int, bufA, bufB cuda.DevicePtr) error {
	p := sched.Params{Coll: col, NRanks: n, Count: count, Root: root}
	es := d.Size()
	in := make([]byte, p.InLen(rank)*es)
	check.FillInput(p, d, op, in, rank, 7)
	outPtr := bufB
	if col == sched.Allreduce || col == sched.Bcast {
		outPtr = bufA
	}
	outLen := p.OutLen(rank) * es
	err := w.Do(ctx, func(cc *cuda.Ctx) error {
		if outPtr != bufA {
			if err := cc.Memset8(outPtr, 0xff, outLen, 0); err != nil {
				return err
			}
		} else if len(in) == 0 {
			if err := cc.Memset8(bufA, 0xff, outLen, 0); err != nil {
				return err
			}
		}
		if len(in) > 0 {
			if err := cc.CopyHtoD(bufA, in, 0); err != nil {
				return err
			}
		}
		return cc.Synchronize()
	})
	if err == nil {
		err = call()
	}
	out := make([]byte, outLen)
	if err == nil {
		err = w.Do(ctx, func(cc *cuda.Ctx) error {
			if err := cc.CopyDtoH(out, outPtr, 0); err != nil {
				return err
			}
			return cc.Synchronize()
		})
	}
	if err == nil {
		err = check.Verify(p, d, op, rank, out, 7)
	}
	// Every rank reports the result of all: a wrong element on any rank
	// makes the size wrong.
	bad := 0.0
	if err != nil {
		bad = float64(rank + 1)
	}
	worst, aerr := slowest(ctx, c, bad)
	if aerr != nil {
		return errors.Join(err, aerr)
	}
	if err == nil && worst > 0 {
		err = fmt.Errorf("rank %d's result is wrong", int(worst)-1)
	}
	return err
}

// loopHooks run around deviceBenchTime's loops: before before the
// warm-up and before every timed loop (outside the time, before the
// ranks line up), after after every timed loop (its calls synchronised,
// outside the time). Either may be nil.
type loopHooks struct {
	before, after func() error
}

// wrongResult is the error of deviceBenchTime when a loop's result was
// wrong on some rank; err says which and how.
type wrongResult struct{ err error }

func (e *wrongResult) Error() string { return e.err.Error() }

// deviceBenchTime warms up, estimates the time of one call, agrees on an
// iteration count, and times trials loops, each closed by sync; it returns
// the best loop's time per call, the slowest rank's. It also returns the
// host's share of that loop: the time per call until issued (which waits
// for the worker to have issued every call) returned, the slowest rank's.
// When it is close to the time per call, the host's launches bound the
// rate, not the GPUs. Where hooks.after fails on a rank after a loop,
// every rank returns the times with a *wrongResult.
func deviceBenchTime(ctx context.Context, c *braid.Comm, call, issued, sync func() error, target time.Duration, trials int, hooks loopHooks) (time.Duration, time.Duration, int, error) {
	if hooks.before != nil {
		if err := hooks.before(); err != nil {
			return 0, 0, 0, err
		}
	}
	for range 10 {
		if err := call(); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := sync(); err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	for range 5 {
		if err := call(); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := sync(); err != nil {
		return 0, 0, 0, err
	}
	est, err := slowest(ctx, c, time.Since(start).Seconds()/5)
	if err != nil {
		return 0, 0, 0, err
	}
	iters := int(math.Min(50000, math.Max(20, math.Ceil(target.Seconds()/math.Max(est, 1e-7)))))
	best, bestIssue := math.Inf(1), 0.0
	var wrong error
	for range max(trials, 1) {
		if hooks.before != nil {
			if err := hooks.before(); err != nil {
				return 0, 0, 0, err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return 0, 0, 0, err
		}
		start := time.Now()
		for range iters {
			if err := call(); err != nil {
				return 0, 0, 0, err
			}
		}
		if err := issued(); err != nil {
			return 0, 0, 0, err
		}
		issue := time.Since(start).Seconds() / float64(iters)
		if err := sync(); err != nil {
			return 0, 0, 0, err
		}
		t, err := slowest(ctx, c, time.Since(start).Seconds()/float64(iters))
		if err != nil {
			return 0, 0, 0, err
		}
		if issue, err = slowest(ctx, c, issue); err != nil {
			return 0, 0, 0, err
		}
		if t < best {
			best, bestIssue = t, issue
		}
		if hooks.after != nil {
			local := hooks.after()
			bad := 0.0
			if local != nil {
				bad = float64(c.Rank() + 1)
			}
			worst, err := slowest(ctx, c, bad)
			if err != nil {
				return 0, 0, 0, errors.Join(local, err)
			}
			switch {
			case local != nil:
				wrong = local
			case worst > 0 && wrong == nil:
				wrong = fmt.Errorf("rank %d's result is wrong", int(worst)-1)
			}
		}
	}
	if wrong != nil {
		err = &wrongResult{wrong}
	}
	return time.Duration(best * 1e9), time.Duration(bestIssue * 1e9), iters, err
}

// cross is every pair of an a and a b, a major.
func cross(as, bs []string) [][2]string {
	var out [][2]string
	for _, a := range as {
		for _, b := range bs {
			out = append(out, [2]string{a, b})
		}
	}
	return out
}

// hostShareName is --host-share as the JSON records say it.
func hostShareName(v string) string {
	if v == "" {
		return "default"
	}
	return v
}

// slowest returns the largest v over the ranks.
func slowest(ctx context.Context, c *braid.Comm, v float64) (float64, error) {
	b := []float64{v}
	err := c.Allreduce(ctx, b, b, braid.Max)
	return b[0], err
}
