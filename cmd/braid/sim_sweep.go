package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
	"github.com/braid-ccl/braid/topo"
)

// uniqueAllocations returns one allocation (GPU ordinals, increasing) of
// each isomorphism class of the allocations of lo to hi GPUs of t whose
// NVLink graph is connected, classes told apart by their NVLink graph with
// lane counts; the representative is the first in order of the bit mask of
// its GPUs. On a DGX-1 there are 14 classes of 3 to 8 GPUs on the P100 and
// 46 on the V100 (Blink, MLSys 2020, §5.2).
func uniqueAllocations(t *topo.Topology, lo, hi int) [][]int {
	gpus := t.GPUs()
	n := len(gpus)
	if n > 16 {
		n = 16 // the search is exponential; no preset needs more
	}
	ln := lanes(t, gpus[:n])
	seen := map[string]bool{}
	var out [][]int
	for mask := 1; mask < 1<<n; mask++ {
		var a []int
		for i := range n {
			if mask>>i&1 == 1 {
				a = append(a, i)
			}
		}
		if len(a) < lo || len(a) > hi || !nvlinkConnected(ln, a) {
			continue
		}
		if c := canonicalForm(ln, a); !seen[c] {
			seen[c] = true
			out = append(out, a)
		}
	}
	return out
}

// nvlinkConnected reports whether the NVLinks among the GPUs a join them.
func nvlinkConnected(ln [][]int, a []int) bool {
	seen := map[int]bool{a[0]: true}
	stack := []int{a[0]}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, v := range a {
			if !seen[v] && ln[u][v] > 0 {
				seen[v] = true
				stack = append(stack, v)
			}
		}
	}
	return len(seen) == len(a)
}

// canonicalForm returns the least lane matrix of the GPUs a over every
// order of them: equal exactly for isomorphic NVLink graphs.
func canonicalForm(ln [][]int, a []int) string {
	k := len(a)
	perm := make([]int, k)
	for i := range perm {
		perm[i] = i
	}
	best := ""
	b := make([]byte, 0, k*k)
	var rec func(i int)
	rec = func(i int) {
		if i == k {
			b = b[:0]
			for _, x := range perm {
				for _, y := range perm {
					b = append(b, byte('0'+ln[a[x]][a[y]]))
				}
			}
			if best == "" || string(b) < best {
				best = string(b)
			}
			return
		}
		for j := i; j < k; j++ {
			perm[i], perm[j] = perm[j], perm[i]
			rec(i + 1)
			perm[i], perm[j] = perm[j], perm[i]
		}
	}
	rec(0)
	return best
}

// sweepRow is one allocation's comparison.
type sweepRow struct {
	gpus      []int
	trees     int     // trees of the tree-based construction
	treeRate  float64 // its rate, GB/s
	treeTime  float64 // simulated seconds
	treeDesc  string
	nvlTime   float64 // simulated seconds of the NVLink trees alone
	pcieShare float64 // the part of the bytes on PCIe trees (Blink eq. 8)
	ringName  string
	ringTime  float64 // simulated, the fastest construction
	ringDesc  string
	modelTree float64 // seconds at the rates alone
	modelRing float64
	// choice is what the planner runs: "trees", or "rings" where the
	// trees are slower in the simulator.
	choice           string
	modelRingName    string
	speedup, modelSp float64
	nvlSp            float64 // the NVLink trees alone over the best rings
	err              error
}

// runSweep compares, for every unique allocation of 3 to 8 GPUs of t,
// the packed trees with the best ring construction in the simulator and
// prints the rows and the distribution of the speedups by allocation size.
// It returns the rows.
func runSweep(w io.Writer, t *topo.Topology, coll sched.Collective, size int64, segment int, cfg sim.Config) []sweepRow {
	return sweepAllocs(w, t, uniqueAllocations(t, 3, 8), coll, size, segment, cfg)
}

// sweepAllocs is runSweep on the allocations allocs.
func sweepAllocs(w io.Writer, t *topo.Topology, allocs [][]int, coll sched.Collective, size int64, segment int, cfg sim.Config) []sweepRow {
	count := int(size / int64(cfg.ElemSize))
	rows := make([]sweepRow, len(allocs))
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				rows[i] = sweepOne(t, allocs[i], coll, count, segment, cfg)
			}
		}()
	}
	for i := range allocs {
		work <- i
	}
	close(work)
	wg.Wait()

	fmt.Fprintf(w, "%v of %s per GPU on %s: %d unique NVLink-connected allocations of 3-8 GPUs; packed trees (NVLink trees, with PCIe trees beside them where Blink's eq. 8 gives them a part) against the best ring construction, both in the simulator\n",
		coll, plan.FormatSize(size), t.Name, len(allocs))
	fmt.Fprintf(w, "%-16s %8s %-40s %6s %9s %-18s %9s %8s %8s  %-6s   %-10s %8s\n", "gpus", "nvlink", "trees", "pcie", "GB/s", "rings", "GB/s", "speedup", "nvlink", "runs", "model ring", "model")
	bySize := map[int][]float64{}
	nvlBySize := map[int][]float64{}
	modelBySize := map[int][]float64{}
	for _, r := range rows {
		name := joinInts(r.gpus)
		if r.err != nil {
			fmt.Fprintf(w, "%-16s %v\n", name, r.err)
			continue
		}
		gb := func(s float64) float64 { return float64(size) / s / 1e9 }
		fmt.Fprintf(w, "%-16s %8.2f %-40s %5.1f%% %9.2f %-18s %9.2f %8.3f %8.3f  %-6s   %-10s %8.3f\n", name, gb(r.nvlTime), r.treeDesc, 100*r.pcieShare, gb(r.treeTime),
			r.ringDesc, gb(r.ringTime), r.speedup, r.nvlSp, r.choice, r.modelRingName, r.modelSp)
		n := len(r.gpus)
		bySize[n] = append(bySize[n], r.speedup)
		nvlBySize[n] = append(nvlBySize[n], r.nvlSp)
		modelBySize[n] = append(modelBySize[n], r.modelSp)
	}
	for _, tab := range []struct {
		title string
		m     map[int][]float64
	}{
		{"simulated speedup of packed trees (with the hybrid split) over the best rings", bySize},
		{"simulated speedup of the NVLink trees alone over the best rings", nvlBySize},
		{"model speedup (rates alone, as Blink, MLSys 2020, §5.1)", modelBySize},
	} {
		fmt.Fprintf(w, "\n%s, by allocation size:\n", tab.title)
		fmt.Fprintf(w, "%5s %7s %7s %7s %7s %7s %7s\n", "gpus", "allocs", "min", "p5", "median", "p95", "max")
		var all []float64
		for n := 3; n <= 8; n++ {
			xs := tab.m[n]
			all = append(all, xs...)
			if len(xs) > 0 {
				writeDist(w, strconv.Itoa(n), xs)
			}
		}
		if len(all) > 0 {
			writeDist(w, "all", all)
		}
	}
	var rings []string
	for _, r := range rows {
		if r.err == nil && r.choice != "trees" {
			rings = append(rings, joinInts(r.gpus))
		}
	}
	if len(rings) == 0 {
		fmt.Fprintf(w, "\nthe planner runs the packed trees on every allocation: none is slower than the best rings\n")
	} else {
		fmt.Fprintf(w, "\nthe planner runs the rings on %d allocations where the packed trees are slower: %s\n", len(rings), strings.Join(rings, " "))
	}
	return rows
}

func writeDist(w io.Writer, label string, xs []float64) {
	xs = slices.Clone(xs)
	sort.Float64s(xs)
	fmt.Fprintf(w, "%5s %7d %7.3f %7.3f %7.3f %7.3f %7.3f\n", label, len(xs), xs[0], percentile(xs, 5), percentile(xs, 50), percentile(xs, 95), xs[len(xs)-1])
}

// percentile returns the p-th percentile of sorted xs, interpolating
// linearly between the closest ranks (as numpy's default does).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 1 {
		return xs[0]
	}
	x := p / 100 * float64(len(xs)-1)
	i := int(math.Floor(x))
	if i >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	return xs[i] + (x-float64(i))*(xs[i+1]-xs[i])
}

func joinInts(a []int) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// sweepOne compares trees and rings on one allocation (GPU ordinals).
func sweepOne(t *topo.Topology, gpus []int, coll sched.Collective, count, segment int, cfg sim.Config) sweepRow {
	row := sweepRow{gpus: gpus}
	all := t.GPUs()
	devs := make([]int, len(gpus))
	for i, g := range gpus {
		devs[i] = all[g]
	}
	n := len(devs)
	net, err := sim.FromTopology(t, devs)
	if err != nil {
		row.err = err
		return row
	}
	pt, err := packHybrid(t, devs, coll, 0, float64(count*cfg.ElemSize), 0)
	if err != nil {
		row.err = err
		return row
	}
	row.trees, row.treeRate, row.pcieShare = len(pt.trees().Tree), pt.treeRate(), pt.pcieShare
	res, desc, err := treeSchedule(coll, count, 0, pt).best(net, cfg, segment, count)
	if err != nil {
		row.err = fmt.Errorf("treepack: %w", err)
		return row
	}
	row.treeTime, row.treeDesc = res.Time, desc
	row.nvlTime = res.Time
	if pt.hybrid != nil {
		nvl := &packedTrees{plan: pt.hybrid.NVLink, graph: pt.hybrid.NVLinkGraph, links: "nvlink"}
		if res, _, err = treeSchedule(coll, count, 0, nvl).best(net, cfg, segment, count); err != nil {
			row.err = fmt.Errorf("treepack over NVLink: %w", err)
			return row
		}
		row.nvlTime = res.Time
	}
	bytes := float64(count * cfg.ElemSize)
	row.modelTree = bytes / (pt.treeRate() * 1e9)
	lane := 0.0 // GB/s of one NVLink lane
	for _, a := range devs {
		for _, b := range devs {
			for _, i := range t.Between(a, b) {
				if l := t.Links[i]; l.Class == topo.NVLink {
					lane = max(lane, l.Bandwidth)
				}
			}
		}
	}
	names, sets := ringConstructions(t, devs)
	for k, cycles := range sets {
		res, desc, err := ringMaker(n, coll, count, 0, names[k], cycles).best(net, cfg, segment, count)
		if err != nil {
			row.err = fmt.Errorf("%s rings: %w", names[k], err)
			return row
		}
		if row.ringName == "" || res.Time < row.ringTime {
			row.ringName, row.ringTime, row.ringDesc = names[k], res.Time, desc
		}
		// The model of Blink (MLSys 2020) §5.1: every NVLink ring at one
		// lane's bandwidth, and where there is none, one ring over PCIe
		// (the routed fallback) at half of that.
		var bw float64
		switch {
		case strings.HasPrefix(names[k], "nvlink"):
			bw = float64(len(cycles)) * lane
		case names[k] == "routed":
			bw = lane / 2
		default:
			continue
		}
		m := bytes / (bw * 1e9)
		if coll == sched.Allreduce {
			m *= 2 * float64(n-1) / float64(n)
		}
		if row.modelRingName == "" || m < row.modelRing {
			row.modelRingName, row.modelRing = names[k], m
		}
	}
	if row.ringName == "" {
		row.err = fmt.Errorf("no ring construction")
		return row
	}
	row.speedup = row.ringTime / row.treeTime
	row.nvlSp = row.ringTime / row.nvlTime
	row.modelSp = row.modelRing / row.modelTree
	row.choice = "trees"
	if row.treeTime > row.ringTime {
		row.choice = "rings"
	}
	return row
}
