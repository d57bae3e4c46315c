package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
	"github.com/braid-ccl/braid/topo"
)

const simUsage = `usage: braid sim --topo PRESET|FILE [--gpus 0,1,2,5] --coll bcast|allreduce --size S [--algos A,B,...]
                 [--imbalance MIF [--node-imbalance NMIF] [--seed N] [--trials K] | --start LIST|FILE]
                 [--imbalance-alpha p2p|collective]
       braid sim --sweep dgx1-p100|dgx1-v100 --coll bcast|allreduce [--size 256M]

Runs Braid's schedules in the flow-level simulator (package sim) on a
topology: every link of the allocation with its bandwidth and latency,
messages routed as topo routes them, links shared fairly. It prints each
algorithm's time, bandwidth and ratio to the fastest.

Algorithms are algo's names for the collective, plus:
  treepack  Blink's packed spanning trees (pack, then algo's treepack)
  rings     the best ring construction (below)
Dynamic algorithms (papchain, hierpap) run their schedule for the order
in which the ranks arrive, papbcast (Patarasuk and Yuan's arrival-aware
broadcast) for the groups its root would serve at the times they arrive;
pattern algorithms, from the literature on arrival patterns and simulated
only, the schedule built for those times: prr (Proficz's pre-reduced ring
allreduce, as reconstructed in algo) and papscatter (Patarasuk and Yuan's
scatter variant). NAME:stale runs each arrival pattern with the
schedule for the one before, as a prediction from the last call would.

The packed trees are, by default (--links auto), Blink's hybrid (MLSys
2020, §3.4) where NVLink spans the allocation: trees packed over the
NVLinks and trees packed over the routes through the PCIe switches and
CPUs, at once, the bytes split between them by eq. 8 so that both finish
together (with no time to switch peer access off in the simulator, in
proportion to their rates); the PCIe trees' messages take those routes
(sched.RelayedChannel), not the NVLinks. Where NVLink does not span the
allocation, the trees are packed over every link and route (all).

Pipelined schedules (chain, segring, treepack, rings) take the segment that
runs fastest: starting from size/256 (at least 64K), the simulator tries
twice and half the segment while that helps, then steps of a quarter of
it, as Blink's MIAD does at run time (Blink, MLSys 2020, §4.2.1);
--segment fixes it instead.

--sweep runs every unique allocation of 3 to 8 GPUs of a DGX-1 (the
isomorphism classes of NVLink-connected allocations: 14 on the P100, 46 on
the V100; Blink, MLSys 2020, §5.2), the ranks in increasing GPU order, a
broadcast from the lowest GPU, and prints per allocation the speedup of the packed
trees (the hybrid, with its PCIe part) and of the NVLink trees alone on the
best ring construction, their distributions by allocation size (min, 5th
percentile, median, 95th percentile, max), as Blink (MLSys 2020) Figure
14, and what the planner runs: the trees, or the rings where the trees are
slower in the simulator (the last line names those allocations). The best ring construction is the fastest in the
simulator of:
  nvlink   NCCL's rings: the largest set of directed Hamiltonian cycles of
           the allocation's NVLink graph that its lanes can carry (each
           ring one lane of each hop; a pair with two lanes can carry two
           rings), the data split evenly among them;
  routed   one ring in the cyclic order whose narrowest hop is widest, each
           hop over the pair's NVLinks if it has them, else over its widest
           route: on a DGX-1, PCIe through the PCIe switches and, across
           sockets, QPI (NCCL's PCIe fallback);
  routed×2 that ring and its reverse, half the data each;
NVLink rings are used wherever they exist (as NCCL does), the routed
(PCIe) fallback only where they do not. A broadcast goes down each ring from the
root as a pipelined chain (algo's treepack over the rings' paths from the
root, which keeps the rings in step); an allreduce runs algo's ring
allreduce on each ring. --pcie sets the PCIe links' bandwidth (the
presets take the nominal 15.75 GB/s of PCIe 3.0 x16; Blink measured 8-12).

The "model" columns are the comparison of Blink (MLSys 2020) §5.1 from the rates
alone: the packing's rate against k NVLink rings at one lane's bandwidth
each, or, without NVLink rings, one PCIe ring at half a lane's bandwidth
(Blink's assumption); an allreduce's ring moves 2(n−1)/n of the data.

--imbalance MIF times every algorithm again under process arrival
patterns, as "Efficient Process Arrival Pattern Aware Collective
Communication for Deep Learning" (Alizadeh et al., EuroMPI/USA 2022, §6.1)
induces them: each rank starts after a random offset uniform in
[0, MIF × α]; --trials patterns are drawn from --seed and the times are
their mean. α is the paper's (§2.2), the one-way time of one
point-to-point message of --size: half the simulated round trip of a
ping-pong between ranks 0 and 1 on the topology's route between them,
with --overhead, every other rank idle. Ranks 0 and 1 are the pair that
braid bench --imbalance times by ping-pong, so that a simulated and a
measured run draw their offsets from the same α; with the ranks placed
by node, as here, it is a message within a node (the fastest pair of
most topologies, so the smallest α and the smallest offsets: the patterns
are not scaled by the slowest link). --imbalance-alpha collective keeps
the earlier α, the fastest balanced average latency of the algorithms
compared (braid bench's --imbalance-alpha collective). With --node-imbalance NMIF the offsets are correlated by node, as
the paper measured them in Horovod (§4.3, Tables 1 and 2): each node
draws one offset uniform in [0, MIF × α] and each of its ranks adds its
own, uniform in [0, NMIF × α]. --start gives one pattern instead: each rank's offset in
microseconds, as a list (0,12.5,0,300) or a file of numbers. Each
algorithm runs in the variant (segment, ring construction) it picked
balanced. The table gives the patterns' imbalance (§2.2: worst-case Ω,
the spread of the arrivals, and average-case Δ̄, the mean distance of an
arrival from the mean arrival, in µs and over α; on several nodes also
node-wide, §4.3.2: each node's, averaged over the nodes) and per algorithm its
latency as the paper's micro-benchmarks measure it, each rank from its own
arrival to its exit, averaged over the ranks (balanced and under the
pattern, and their ratio), the largest rank's, and the time from the last
arrival to the end.

Examples:
  braid sim --topo dgx1-v100 --gpus 1,4,5,6 --coll bcast --size 256M
  braid sim --topo dgx1-v100 --coll allreduce --size 64M --algos treepack,rings,ring,segring
  braid sim --sweep dgx1-v100 --coll bcast --size 256M
  braid sim --topo 16xcedar --coll allreduce --size 64K --algos ring,rabenseifner,hier --imbalance 20

`

func simCmd(args []string) error {
	fs := flag.NewFlagSet("braid sim", flag.ContinueOnError)
	spec := fs.String("topo", "", "preset or JSON file (default $BRAID_TOPO, else discover this host)")
	gpusF := fs.String("gpus", "", "GPU ordinals of the allocation (default: every GPU)")
	collF := fs.String("coll", "bcast", "collective: bcast or allreduce (or any collective for algo's algorithms)")
	sizeF := fs.String("size", "256M", "bytes per rank (K, M, G suffixes)")
	algosF := fs.String("algos", "", "algorithms to compare (default: treepack,rings and the collective's others)")
	root := fs.Int("root", 0, "root rank for rooted collectives (the others ignore it)")
	segF := fs.String("segment", "", "segment of pipelined schedules in bytes (default: the fastest in the simulator)")
	overhead := fs.Duration("overhead", 0, "time added to every message and local step (sim.Config.StepOverhead)")
	links := fs.String("links", "auto", "links the packed trees may use: nvlink, hybrid (NVLink and PCIe trees, Blink eq. 8), all, or auto (hybrid where NVLink spans the allocation, else all)")
	timeline := fs.String("timeline", "", "write the first algorithm's timeline as SVG to this file")
	sweep := fs.String("sweep", "", "dgx1-p100 or dgx1-v100: every unique allocation of 3-8 GPUs, trees against rings")
	pcie := fs.Float64("pcie", 0, "set every PCIe link to this many GB/s per direction (e.g. a measured figure; 0 keeps the topology's)")
	imb := fs.Float64("imbalance", 0, "time the algorithms again under random arrival patterns of this maximum imbalance factor (MIF)")
	nodeImb := fs.Float64("node-imbalance", 0, "with --imbalance: draw one offset per node (up to MIF × α) and add each rank's own, up to this factor × α")
	startF := fs.String("start", "", "time the algorithms again with these per-rank start offsets: microseconds, a list (0,10,250) or a file")
	seed := fs.Uint64("seed", 1, "seed of --imbalance's arrival patterns")
	trials := fs.Int("trials", 10, "arrival patterns drawn for --imbalance (the times are their mean)")
	alphaF := fs.String("imbalance-alpha", bench.AlphaP2P, "α of --imbalance, --node-imbalance and --start: p2p (one point-to-point message of --size between ranks 0 and 1, half a simulated ping-pong) or collective (the fastest balanced average latency of the algorithms)")
	cpuprof := fs.String("cpuprofile", "", "write the command's CPU profile to this file (go tool pprof reads it)")
	fs.Usage = func() { fmt.Fprint(os.Stderr, simUsage); fs.PrintDefaults() }
	if done, err := parseFlags(fs, args); done {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"sim: unexpected argument " + fs.Arg(0)}
	}
	coll, err := sched.ParseCollective(*collF)
	if err != nil {
		return usageError{"sim: " + err.Error()}
	}
	size, err := plan.ParseSize(*sizeF)
	if err != nil {
		return usageError{"sim: --size: " + err.Error()}
	}
	if size < 4 || size%4 != 0 {
		return usageError{fmt.Sprintf("sim: --size %s: want a positive multiple of 4 bytes (the simulator moves float32 elements)", *sizeF)}
	}
	if *pcie < 0 || math.IsNaN(*pcie) || math.IsInf(*pcie, 0) {
		return usageError{fmt.Sprintf("sim: --pcie %v: want GB/s > 0 (or 0 to keep the topology's)", *pcie)}
	}
	if *overhead < 0 {
		return usageError{fmt.Sprintf("sim: --overhead %v: want a duration ≥ 0", *overhead)}
	}
	switch *links {
	case "auto", "hybrid", "nvlink", "all":
	default:
		return usageError{fmt.Sprintf("sim: --links %q: want nvlink, hybrid, all or auto", *links)}
	}
	set := given(fs)
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if *imb < 0 || math.IsNaN(*imb) || math.IsInf(*imb, 0) {
		return usageError{fmt.Sprintf("sim: --imbalance %v: want a maximum imbalance factor ≥ 0", *imb)}
	}
	if *nodeImb < 0 || math.IsNaN(*nodeImb) || math.IsInf(*nodeImb, 0) {
		return usageError{fmt.Sprintf("sim: --node-imbalance %v: want a maximum imbalance factor ≥ 0", *nodeImb)}
	}
	if set["node-imbalance"] && !set["imbalance"] {
		return usageError{"sim: --node-imbalance needs --imbalance MIF, the spread of the nodes' offsets (0 for nodes that arrive together)"}
	}
	if *trials < 1 {
		return usageError{fmt.Sprintf("sim: --trials %d: want at least 1 arrival pattern", *trials)}
	}
	if set["imbalance"] && set["start"] {
		return usageError{"sim: --imbalance draws the arrival patterns and --start gives one: use one of them"}
	}
	for _, f := range []string{"seed", "trials"} {
		if set[f] && *imb == 0 && *nodeImb == 0 {
			return usageError{fmt.Sprintf("sim: --%s applies only to --imbalance MIF (MIF > 0)", f)}
		}
	}
	switch *alphaF {
	case bench.AlphaP2P, bench.AlphaCollective:
	default:
		return usageError{fmt.Sprintf("sim: --imbalance-alpha %q: want %s (one point-to-point message) or %s (the fastest balanced latency)", *alphaF, bench.AlphaP2P, bench.AlphaCollective)}
	}
	if set["imbalance-alpha"] && *imb == 0 && *nodeImb == 0 && !set["start"] {
		return usageError{"sim: --imbalance-alpha applies only to --imbalance, --node-imbalance or --start"}
	}
	arr := arrivals{mif: *imb, nodeMIF: *nodeImb, nodes: set["node-imbalance"], seed: *seed, trials: *trials, from: *startF, alpha: *alphaF}
	if set["start"] {
		if arr.start, err = parseStart(*startF); err != nil {
			return err
		}
	}
	if *sweep != "" {
		for _, f := range []string{"topo", "gpus", "algos", "root", "timeline", "links", "imbalance", "node-imbalance", "start", "imbalance-alpha"} {
			if set[f] {
				return usageError{fmt.Sprintf("sim: --%s does not apply to --sweep (which runs every allocation of the preset it names, packed over NVLink, against rings)", f)}
			}
		}
	}
	if *timeline != "" {
		if err := checkWritable("sim: --timeline", *timeline); err != nil {
			return err
		}
	}
	var segment int64
	if *segF != "" {
		if segment, err = plan.ParseSize(*segF); err != nil || segment < 4 {
			return usageError{fmt.Sprintf("sim: --segment %q: want a size of at least 4 bytes", *segF)}
		}
	}
	cfg := sim.Config{ElemSize: 4, StepOverhead: overhead.Seconds(), Timeline: *timeline != ""}
	if *sweep != "" {
		if coll != sched.Bcast && coll != sched.Allreduce {
			return usageError{"sim: --sweep compares bcast or allreduce"}
		}
		if *sweep != "dgx1-p100" && *sweep != "dgx1-v100" {
			return usageError{fmt.Sprintf("sim: --sweep %q: want dgx1-p100 or dgx1-v100", *sweep)}
		}
		t, _ := topo.Preset(*sweep)
		setPCIe(t, *pcie)
		cfg.Timeline = false
		runSweep(os.Stdout, t, coll, size, int(segment/4), cfg)
		return nil
	}
	t, err := loadTopology(*spec)
	if err != nil {
		return err
	}
	setPCIe(t, *pcie)
	devs, err := allocation(t, *gpusF)
	if err != nil {
		return usageError{"sim: " + err.Error()}
	}
	if arr.start != nil && len(arr.start) != len(devs) {
		return usageError{fmt.Sprintf("sim: --start %s: %d offsets for %d ranks", *startF, len(arr.start), len(devs))}
	}
	if (arr.mif > 0 || arr.nodeMIF > 0 || arr.start != nil) && arr.alpha == bench.AlphaP2P && len(devs) < 2 {
		return usageError{"sim: α p2p (one message between ranks 0 and 1) needs 2 ranks or more (or --imbalance-alpha collective)"}
	}
	if coll.Rooted() && (*root < 0 || *root >= len(devs)) {
		return usageError{fmt.Sprintf("sim: --root %d outside ranks 0-%d", *root, len(devs)-1)}
	}
	if !coll.Rooted() {
		*root = 0
	}
	names := strings.Split(*algosF, ",")
	if *algosF == "" {
		names = defaultAlgos(coll)
	}
	net, err := sim.FromTopology(t, devs)
	if err != nil {
		return err
	}
	count := int(size / int64(cfg.ElemSize))
	var gpuNames []string
	for r := range devs {
		gpuNames = append(gpuNames, devName(t, devs, r))
	}
	fmt.Printf("%v of %s per rank on %s, %d ranks on %s\n", coll, plan.FormatSize(size), t.Name, len(devs), strings.Join(gpuNames, " "))
	var rows []simRow
	for _, name := range names {
		name = strings.TrimSpace(name)
		c, err := candidate(t, devs, coll, count, *root, name, *links)
		if err != nil {
			rows = append(rows, simRow{name: name, err: err})
			continue
		}
		pk, err := c.pick(net, cfg, int(segment/4), count)
		rows = append(rows, simRow{name: name, desc: pk.desc, res: pk.res, again: pk.again, err: err})
	}
	best := math.Inf(1)
	for _, r := range rows {
		if r.err == nil {
			best = min(best, r.res.Time)
		}
	}
	fmt.Printf("%-16s %-26s %12s %12s %8s\n", "algorithm", "parameters", "time(us)", "algbw(GB/s)", "vs best")
	for _, r := range rows {
		if r.err != nil {
			fmt.Printf("%-16s %v\n", r.name, r.err)
			continue
		}
		fmt.Printf("%-16s %-26s %12.1f %12.2f %8.3f\n", r.name, r.desc, r.res.Time*1e6, float64(size)/r.res.Time/1e9, r.res.Time/best)
	}
	if *timeline != "" {
		for _, r := range rows {
			if r.err != nil {
				continue
			}
			f, err := os.Create(*timeline)
			if err != nil {
				return err
			}
			err = sim.WriteSVG(f, net, r.res, sim.SVGOptions{Title: fmt.Sprintf("%v %s: %s on %s", coll, plan.FormatSize(size), r.name, t.Name)})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "braid sim: wrote %s (%s)\n", *timeline, r.name)
			break
		}
	}
	if arr.mif > 0 || arr.nodeMIF > 0 || arr.start != nil {
		return runArrivals(os.Stdout, rows, net, size, cfg, t.Layout(devs).Host, arr)
	}
	return nil
}

// setPCIe sets every PCIe link of t to gbps GB/s (one lane); 0 leaves t
// as it is.
func setPCIe(t *topo.Topology, gbps float64) {
	if gbps <= 0 {
		return
	}
	for i := range t.Links {
		if t.Links[i].Class == topo.PCIe {
			t.Links[i].Count, t.Links[i].Bandwidth = 1, gbps
		}
	}
}

// defaultAlgos are the algorithms braid sim compares without --algos.
func defaultAlgos(c sched.Collective) []string {
	var names []string
	if c == sched.Bcast || c == sched.Allreduce {
		names = append(names, "treepack", "rings")
	}
	for _, a := range algo.ForCollective(c) {
		if !slices.Contains(names, a.Name()) { // treepack is in the registry too
			names = append(names, a.Name())
		}
	}
	return names
}

// runner is something braid sim can time: pick returns the simulated
// result of its fastest variant on net (segment, or ring construction),
// a description of that variant, and a way to run that variant again.
// segment, in elements, fixes the segment of pipelined schedules (0:
// search for the fastest).
type runner interface {
	pick(net *sim.Network, cfg sim.Config, segment, count int) (picked, error)
}

// picked is the variant a runner chose.
type picked struct {
	res  *sim.Result
	desc string
	// again simulates the same schedule under another configuration
	// (braid sim --imbalance: the same variant under an arrival pattern).
	again func(cfg sim.Config) (*sim.Result, error)
}

// schedule makes one algorithm's schedule for a segment in elements (0:
// the algorithm's own choice); pipelined says whether the segment
// matters.
type schedule struct {
	pipelined bool
	make      func(segment int) (sched.Params, []sched.Program, string, error)
}

// simulate runs one schedule.
func simulate(net *sim.Network, cfg sim.Config, p sched.Params, progs []sched.Program) (*sim.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return sim.Run(ctx, p, progs, net, cfg)
}

func (s *schedule) run(net *sim.Network, cfg sim.Config, seg int) (picked, error) {
	p, progs, desc, err := s.make(seg)
	if err != nil {
		return picked{}, err
	}
	res, err := simulate(net, cfg, p, progs)
	if err != nil {
		return picked{}, err
	}
	if s.pipelined && p.Segment > 0 {
		desc = strings.TrimSpace(desc + " seg " + plan.FormatSize(int64(p.Segment)*int64(cfg.ElemSize)))
	}
	again := func(c sim.Config) (*sim.Result, error) { return simulate(net, c, p, progs) }
	return picked{res, desc, again}, nil
}

// best is pick without the variant.
func (s *schedule) best(net *sim.Network, cfg sim.Config, segment, count int) (*sim.Result, string, error) {
	pk, err := s.pick(net, cfg, segment, count)
	return pk.res, pk.desc, err
}

// best times the schedule at the given segment, or searches for the fastest
// segment: from size/256 rounded up to a power of two (at least 64 KiB, at
// most the size), doubling while that is faster, and if the first doubling
// was not, halving while that is (down to 1 KiB), then stepping by a
// quarter of the segment found, down while that is faster, else up: a
// multiplicative then additive search like Blink's MIAD (MLSys 2020,
// §4.2.1), run in the simulator instead of over the first iterations of
// a job.
func (s *schedule) pick(net *sim.Network, cfg sim.Config, segment, count int) (picked, error) {
	if !s.pipelined || segment > 0 || count == 0 {
		return s.run(net, cfg, segment)
	}
	es := cfg.ElemSize
	quiet := cfg
	quiet.Timeline = false
	seg := max(1, min(count, max(64<<10, pow2Above(count*es/256))/es))
	first, err := s.run(net, quiet, seg)
	if err != nil {
		return picked{}, err
	}
	bestRes, bestSeg := first.res, seg
	try := func(next int) bool {
		pk, err := s.run(net, quiet, next)
		if err != nil || pk.res.Time >= bestRes.Time {
			return false
		}
		bestRes, bestSeg = pk.res, next
		return true
	}
	up := false
	for next := bestSeg * 2; bestSeg < count && try(min(next, count)); next = bestSeg * 2 {
		up = true
	}
	if !up {
		for next := bestSeg / 2; next*es >= 1<<10 && try(next); next = bestSeg / 2 {
		}
	}
	// Then additive steps of a quarter of that segment, down while that
	// is faster, else up while that is: the segment between two powers
	// of two that the multiplicative steps jump over.
	if step := bestSeg / 4; step > 0 && bestSeg < count {
		down := false
		for next := bestSeg - step; next*es >= 1<<10 && try(next); next = bestSeg - step {
			down = true
		}
		if !down {
			for next := bestSeg + step; next < count && try(next); next = bestSeg + step {
			}
		}
	}
	return s.run(net, cfg, bestSeg)
}

// pow2Above returns the least power of two ≥ x (1 for x ≤ 1).
func pow2Above(x int) int {
	p := 1
	for p < x {
		p *= 2
	}
	return p
}

// ringChoice is the best of several ring constructions.
type ringChoice struct {
	names []string
	makes []*schedule
}

func (c *ringChoice) pick(net *sim.Network, cfg sim.Config, segment, count int) (picked, error) {
	var best picked
	var firstErr error
	for k, m := range c.makes {
		pk, err := m.pick(net, cfg, segment, count)
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("%s rings: %w", c.names[k], err))
			continue
		}
		if best.res == nil || pk.res.Time < best.res.Time {
			best = pk
		}
	}
	if best.res == nil {
		if firstErr == nil {
			firstErr = fmt.Errorf("no ring construction")
		}
		return picked{}, firstErr
	}
	return best, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// candidate returns the runner of algorithm name for coll on the ranks
// on devs: treepack, rings, or one of algo's algorithms in rank order.
func candidate(t *topo.Topology, devs []int, coll sched.Collective, count, root int, name, links string) (runner, error) {
	n := len(devs)
	switch name {
	case "treepack":
		a := algo.Treepack(coll)
		if a == nil {
			return nil, fmt.Errorf("no tree-packing %v", coll)
		}
		var pt *packedTrees
		var err error
		if links == "auto" || links == "hybrid" {
			pt, err = packHybrid(t, devs, coll, root, float64(count)*4, 0)
		} else {
			pt, err = packTrees(t, devs, coll, root, links)
		}
		if err != nil {
			return nil, err
		}
		return treeSchedule(coll, count, root, pt), nil
	case "rings":
		if coll != sched.Bcast && coll != sched.Allreduce {
			return nil, fmt.Errorf("rings are for bcast and allreduce")
		}
		names, sets := ringConstructions(t, devs)
		c := &ringChoice{names: names}
		for k := range names {
			c.makes = append(c.makes, ringMaker(n, coll, count, root, names[k], sets[k]))
		}
		return c, nil
	}
	if base, stale := strings.CutSuffix(name, ":stale"); algo.LookupDynamic(coll, base) != nil {
		a := algo.LookupDynamic(coll, base)
		p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root, Layout: t.Layout(devs)}
		if pa, ok := a.(algo.PatternAlgorithm); ok {
			// Its data depends on when the ranks arrive, not only on
			// their order (papbcast): the programs for the times.
			return newPatternRunner(pa, p, stale)
		}
		if err := a.Supports(p); err != nil {
			return nil, err
		}
		return &dynamicRunner{a: a, p: p, stale: stale}, nil
	}
	if base, stale := strings.CutSuffix(name, ":stale"); algo.LookupPattern(coll, base) != nil {
		return newPatternRunner(algo.LookupPattern(coll, base), sched.Params{Coll: coll, NRanks: n, Count: count, Root: root, Layout: t.Layout(devs)}, stale)
	}
	a, err := algo.Lookup(coll, name)
	if err != nil {
		return nil, err
	}
	p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root, Layout: t.Layout(devs)}
	if err := a.Supports(p); err != nil {
		return nil, err
	}
	// Parameters other than the segment (a k-nomial tree's radix) come
	// from the cost model; a segment Tune sets is searched for instead.
	tuned := p
	if tu, ok := a.(algo.Tuner); ok {
		tuned = tu.Tune(p, 4, cost.Default())
	}
	pipelined := tuned.Segment != 0 && p.Count > 0
	return &schedule{pipelined: pipelined, make: func(seg int) (sched.Params, []sched.Program, string, error) {
		q := tuned
		if pipelined {
			q.Segment = seg
		}
		if err := a.Supports(q); err != nil {
			return q, nil, "", err
		}
		desc := ""
		if q.Radix != 0 {
			desc = fmt.Sprintf("radix %d", q.Radix)
		}
		return q, algo.Programs(a, q), desc, nil
	}}, nil
}

// treeSchedule returns the treepack schedule of a packing.
func treeSchedule(coll sched.Collective, count, root int, pt *packedTrees) *schedule {
	trees := pt.trees()
	a := algo.Treepack(coll)
	n := pt.plan.N
	return &schedule{pipelined: count > 0 && n > 1, make: func(seg int) (sched.Params, []sched.Program, string, error) {
		p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root, Segment: seg, Trees: trees}
		if n == 1 {
			p.Trees = nil
			b, _ := algo.Lookup(coll, "linear")
			if coll == sched.Allreduce {
				b, _ = algo.Lookup(coll, "ring")
			}
			return p, algo.Programs(b, p), "one rank", nil
		}
		if err := a.Supports(p); err != nil {
			return p, nil, "", err
		}
		return p, algo.Programs(a, p), fmt.Sprintf("%d trees %.4gGB/s %s", len(trees.Tree), pt.treeRate(), pt.links), nil
	}}
}

// ringConstructions returns the ring constructions of the ranks on devs
// that braid sim compares with trees, by name: NCCL's NVLink rings where
// the allocation's NVLinks have a Hamiltonian cycle ("nvlink×k"), else the
// fallback over the widest routes (PCIe on a DGX-1), one ring ("routed")
// or it and its reverse ("routed×2").
func ringConstructions(t *topo.Topology, devs []int) (names []string, sets [][][]int) {
	if len(devs) < 2 {
		return []string{"one rank"}, [][][]int{nil}
	}
	if c := nvlinkRings(t, devs); c != nil {
		return []string{fmt.Sprintf("nvlink×%d", len(c))}, [][][]int{c}
	}
	if c := widestRing(t, devs); c != nil {
		rev := slices.Clone(c)
		slices.Reverse(rev[1:])
		names = append(names, "routed", "routed×2")
		sets = append(sets, [][]int{c}, [][]int{c, rev})
	}
	return names, sets
}

// ringMaker returns the schedule of one ring construction: for a
// broadcast, each ring's path from the root (its n−1 hops in the ring's
// direction) as a tree of equal weight for algo's treepack, which
// pipelines each path as the chain broadcast does and keeps the paths in
// step; for an allreduce, algo's ring allreduce on each ring (compose).
func ringMaker(n int, coll sched.Collective, count, root int, name string, cycles [][]int) *schedule {
	return &schedule{pipelined: coll == sched.Bcast && n > 1 && count > 0, make: func(seg int) (sched.Params, []sched.Program, string, error) {
		if n == 1 {
			p := sched.Params{Coll: coll, NRanks: 1, Count: count, Root: root}
			a, _ := algo.Lookup(coll, "linear")
			if coll == sched.Allreduce {
				a, _ = algo.Lookup(coll, "ring")
			}
			return p, algo.Programs(a, p), name, nil
		}
		if coll == sched.Bcast {
			p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root, Segment: seg, Trees: ringPaths(cycles, root)}
			if err := algo.TreepackBcast.Supports(p); err != nil {
				return p, nil, "", err
			}
			return p, algo.Programs(algo.TreepackBcast, p), name, nil
		}
		p, progs, err := ringSchedule(coll, n, count, root, seg, cycles)
		return p, progs, name, err
	}}
}

// ringPaths returns, for each ring, its path from root in the ring's
// direction as a tree of weight 1.
func ringPaths(cycles [][]int, root int) *sched.Trees {
	ts := &sched.Trees{}
	for _, c := range cycles {
		n := len(c)
		parent := make([]int, n)
		at := slices.Index(c, root)
		parent[root] = -1
		for i := 1; i < n; i++ {
			parent[c[(at+i)%n]] = c[(at+i-1)%n]
		}
		ts.Tree = append(ts.Tree, sched.Tree{Root: root, Parent: parent, Weight: 1})
	}
	return ts
}

// dynamicRunner times a dynamic algorithm (algo.DynamicAlgorithm) by its
// schedule for the order of arrival (Trace): under an arrival pattern, the
// order of the ranks' start offsets (ties by rank), which is what the
// algorithm learns at run time, less its control messages (the simulator
// leaves them out). With stale set ("papchain:stale"), each pattern runs
// the schedule sorted by the previous pattern's order instead (the first
// by rank): a static schedule sorted by an estimate of the order from the
// last call, as the sorted linear tree with online arrival estimation of
// Proficz (2018) builds it.
type dynamicRunner struct {
	a     algo.DynamicAlgorithm
	p     sched.Params
	stale bool
}

func (d *dynamicRunner) pick(net *sim.Network, cfg sim.Config, segment, count int) (picked, error) {
	ident := make([]int, d.p.NRanks)
	for r := range ident {
		ident[r] = r
	}
	res, err := simulate(net, cfg, d.p, algo.ArrivalPrograms(d.a, d.p, ident))
	if err != nil {
		return picked{}, err
	}
	desc := "order of arrival"
	if d.stale {
		desc = "order of the last call"
	}
	prev := ident
	again := func(c sim.Config) (*sim.Result, error) {
		order := arrivalOrder(c.Start, d.p.NRanks)
		use := order
		if d.stale {
			use, prev = prev, order
		}
		return simulate(net, c, d.p, algo.ArrivalPrograms(d.a, d.p, use))
	}
	return picked{res, desc, again}, nil
}

// arrivalOrder returns the ranks sorted by their start offsets (ties, and
// no offsets, by rank).
func arrivalOrder(start []float64, n int) []int {
	order := make([]int, n)
	for r := range order {
		order[r] = r
	}
	if len(start) == n {
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(start[a], start[b]) })
	}
	return order
}
