package main

import (
	"fmt"
	"math"
	"slices"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// The ring constructions braid sim compares packed trees with, after what
// NCCL does on a DGX-1 (Blink, MLSys 2020, §2, §5.1): rings of NVLinks
// where the allocation has them, each going at one NVLink lane, as many as
// the lanes allow; otherwise a ring whose hops take NVLink where the pair
// has it and PCIe (through the switches and CPUs) elsewhere. A broadcast
// goes down each ring from the root as algo's pipelined chain; an allreduce
// runs algo's ring allreduce on each ring; the data is split evenly among
// the rings.

// lanes returns the NVLink lane counts between the ranks on devs.
func lanes(t *topo.Topology, devs []int) [][]int {
	n := len(devs)
	m := make([][]int, n)
	for a := range n {
		m[a] = make([]int, n)
		for b := range n {
			if a != b {
				m[a][b] = t.Lanes(devs[a], devs[b], topo.NVLink)
			}
		}
	}
	return m
}

// maxCycles and maxCycleSearch bound hamiltonianCycles: every directed
// Hamiltonian cycle of up to 8 ranks (at most 7! = 5040) is found, and on
// more ranks a search that could take days stops early.
const (
	maxCycles      = 20000
	maxCycleSearch = 1 << 21
)

// hamiltonianCycles returns the directed Hamiltonian cycles of the graph
// whose edges are the pairs with ok(a, b), each as the ranks in order from
// rank 0 (so each cycle appears once per direction): all of them, or on
// many ranks the first maxCycles found within maxCycleSearch steps.
func hamiltonianCycles(n int, ok func(a, b int) bool) [][]int {
	if n < 2 {
		return nil
	}
	var out [][]int
	path := []int{0}
	used := make([]bool, n)
	used[0] = true
	steps := 0
	var rec func()
	rec = func() {
		if steps++; steps > maxCycleSearch || len(out) >= maxCycles {
			return
		}
		u := path[len(path)-1]
		if len(path) == n {
			if ok(u, 0) {
				out = append(out, slices.Clone(path))
			}
			return
		}
		for v := 1; v < n; v++ {
			if !used[v] && ok(u, v) {
				used[v] = true
				path = append(path, v)
				rec()
				path = path[:len(path)-1]
				used[v] = false
			}
		}
	}
	rec()
	return out
}

// maxRingSearch bounds the nodes nvlinkRings's search visits.
const maxRingSearch = 1 << 20

// nvlinkRings returns the largest set of directed Hamiltonian cycles over
// the NVLinks of the ranks on devs in which no pair's lanes carry more
// rings than the pair has lanes (a cycle may repeat), by exhaustive
// search; nil when the NVLinks have no Hamiltonian cycle. For two ranks
// the "cycles" are the two directions of their link.
func nvlinkRings(t *topo.Topology, devs []int) [][]int {
	n := len(devs)
	ln := lanes(t, devs)
	cycles := hamiltonianCycles(n, func(a, b int) bool { return ln[a][b] > 0 })
	if len(cycles) == 0 {
		return nil
	}
	// Every ring leaves every rank once: the fewest lanes out of (or into)
	// a rank bounds the rings.
	bound := func(left [][]int) int {
		b := math.MaxInt
		for a := range n {
			out, in := 0, 0
			for c := range n {
				out += left[a][c]
				in += left[c][a]
			}
			b = min(b, out, in)
		}
		return b
	}
	left := make([][]int, n)
	for a := range n {
		left[a] = slices.Clone(ln[a])
	}
	limit := bound(left)
	var best, cur [][]int
	visits := 0
	var rec func(from int)
	rec = func(from int) {
		visits++
		if len(cur) > len(best) {
			best = slices.Clone(cur)
		}
		if len(best) == limit || visits > maxRingSearch || len(cur)+bound(left) <= len(best) {
			return
		}
		for k := from; k < len(cycles); k++ {
			c := cycles[k]
			fits := true
			for i := range n {
				if left[c[i]][c[(i+1)%n]] == 0 {
					fits = false
					break
				}
			}
			if !fits {
				continue
			}
			for i := range n {
				left[c[i]][c[(i+1)%n]]--
			}
			cur = append(cur, c)
			rec(k)
			cur = cur[:len(cur)-1]
			for i := range n {
				left[c[i]][c[(i+1)%n]]++
			}
			if len(best) == limit || visits > maxRingSearch {
				return
			}
		}
	}
	rec(0)
	return best
}

// hopWidth returns the capacity in GB/s of the widest route from device a
// to device b (topo's Router over every link): the NVLinks of the pair if
// it has them, else the narrowest link of the PCIe path.
func hopWidth(r *topo.Router, t *topo.Topology, a, b int) float64 {
	path := r.Route(a, b, nil)
	if path == nil {
		return 0
	}
	w := math.Inf(1)
	for k := 1; k < len(path); k++ {
		w = min(w, t.Capacity(path[k-1], path[k]))
	}
	return w
}

// widestRing returns a cyclic order of the ranks on devs, from rank 0,
// whose narrowest hop is widest (hops as hopWidth), ties broken by the
// larger sum of widths; nil if no order has a route for every hop. On up
// to 9 ranks it tries every order; on more it takes, for the widest
// threshold that allows one, the first cycle a bounded search finds over
// the hops at least that wide.
func widestRing(t *topo.Topology, devs []int) []int {
	n := len(devs)
	r := t.Router(nil)
	w := make([][]float64, n)
	var widths []float64
	for a := range n {
		w[a] = make([]float64, n)
		for b := range n {
			if a != b {
				w[a][b] = hopWidth(r, t, devs[a], devs[b])
				if w[a][b] > 0 && !slices.Contains(widths, w[a][b]) {
					widths = append(widths, w[a][b])
				}
			}
		}
	}
	if n > 9 {
		slices.Sort(widths)
		slices.Reverse(widths)
		for _, th := range widths {
			cs := hamiltonianCyclesFirst(n, func(a, b int) bool { return w[a][b] >= th })
			if cs != nil {
				return cs
			}
		}
		return nil
	}
	var best []int
	bestMin, bestSum := 0.0, 0.0
	for _, c := range hamiltonianCycles(n, func(a, b int) bool { return w[a][b] > 0 }) {
		lo, sum := math.Inf(1), 0.0
		for i := range n {
			x := w[c[i]][c[(i+1)%n]]
			lo, sum = min(lo, x), sum+x
		}
		if best == nil || lo > bestMin || lo == bestMin && sum > bestSum {
			best, bestMin, bestSum = c, lo, sum
		}
	}
	return best
}

// hamiltonianCyclesFirst returns the first directed Hamiltonian cycle
// the bounded search of hamiltonianCycles finds, or nil.
func hamiltonianCyclesFirst(n int, ok func(a, b int) bool) []int {
	path := []int{0}
	used := make([]bool, n)
	used[0] = true
	steps := 0
	var rec func() bool
	rec = func() bool {
		if steps++; steps > maxCycleSearch {
			return false
		}
		u := path[len(path)-1]
		if len(path) == n {
			return ok(u, 0)
		}
		for v := 1; v < n; v++ {
			if !used[v] && ok(u, v) {
				used[v] = true
				path = append(path, v)
				if rec() {
					return true
				}
				path = path[:len(path)-1]
				used[v] = false
			}
		}
		return false
	}
	if n >= 2 && rec() {
		return path
	}
	return nil
}

// part is one piece of a composed schedule: algorithm a's call p on the
// elements [off, off+p.Count) of the whole call's buffers, its rank k
// played by rank perm[k], its messages on channel ch.
type part struct {
	a    algo.Algorithm
	p    sched.Params
	perm []int
	off  int
	ch   uint8
}

// compose returns the schedule of call p made of parts that run at once
// on disjoint ranges of the buffers: each part's programs with its ranks
// renamed, its chunks of In and Out moved to its range, its scratch after
// the previous parts', its tags after theirs, and its messages on its
// channel. A rank's steps of different parts are interleaved one by one,
// so that the executor, which issues steps in order, advances every part
// together.
func compose(p sched.Params, parts []part) ([]sched.Program, error) {
	n := p.NRanks
	progs := make([][]sched.Program, len(parts))
	tagBase := make([]int32, len(parts))
	next := int32(0)
	for k, pt := range parts {
		if len(pt.perm) != n {
			return nil, fmt.Errorf("compose: part %d places %d ranks, want %d", k, len(pt.perm), n)
		}
		if err := pt.a.Supports(pt.p); err != nil {
			return nil, err
		}
		progs[k] = algo.Programs(pt.a, pt.p)
		tagBase[k] = next
		top := int32(-1)
		for _, pr := range progs[k] {
			for _, s := range pr.Steps {
				if s.Kind == sched.KindSend {
					top = max(top, s.Tag)
				}
			}
		}
		next += top + 1
	}
	out := make([]sched.Program, n)
	for r := range n {
		subs := make([]*sched.Program, len(parts))
		tmpBase := make([]int, len(parts))
		tmp := 0
		for k, pt := range parts {
			subs[k] = &progs[k][slices.Index(pt.perm, r)]
			tmpBase[k] = tmp
			tmp += subs[k].TmpLen
		}
		move := func(k int, c sched.Chunk) sched.Chunk {
			if c.Buf == sched.Tmp {
				c.Off += tmpBase[k]
			} else {
				c.Off += parts[k].off
			}
			return c
		}
		prog := sched.Program{Rank: r, TmpLen: tmp}
		idx := make([][]int32, len(parts))
		for i := 0; ; i++ {
			more := false
			for k, sub := range subs {
				if i >= len(sub.Steps) {
					continue
				}
				more = true
				s := sub.Steps[i]
				switch s.Kind {
				case sched.KindSend:
					s.Src = move(k, s.Src)
				case sched.KindRecv, sched.KindRecvReduce:
					s.Dst = move(k, s.Dst)
				default:
					s.Src, s.Dst = move(k, s.Src), move(k, s.Dst)
				}
				if s.Kind == sched.KindSend || s.Kind == sched.KindRecv || s.Kind == sched.KindRecvReduce {
					s.Peer = parts[k].perm[s.Peer]
					s.Tag += tagBase[k]
					s.Channel = parts[k].ch
				}
				deps := make([]int32, len(s.Deps))
				for j, d := range s.Deps {
					deps[j] = idx[k][d]
				}
				s.Deps = deps
				idx[k] = append(idx[k], int32(len(prog.Steps)))
				prog.Steps = append(prog.Steps, s)
			}
			if !more {
				break
			}
		}
		for k, sub := range subs {
			for _, c := range sub.Final {
				prog.Final = append(prog.Final, move(k, c))
			}
		}
		out[r] = prog
	}
	return out, nil
}

// ringSchedule returns the schedule of a broadcast from root (algo's
// chain down each ring) or an allreduce (algo's ring on each ring) of
// count elements split evenly over the rings cycles, ring k on channel k;
// segment is the chain's segment in elements (0: its default).
func ringSchedule(coll sched.Collective, n, count, root, segment int, cycles [][]int) (sched.Params, []sched.Program, error) {
	p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root}
	name := "ring"
	if coll == sched.Bcast {
		name = "chain"
	}
	a, err := algo.Lookup(coll, name)
	if err != nil {
		return p, nil, err
	}
	var parts []part
	for k, c := range cycles {
		lo, hi := count*k/len(cycles), count*(k+1)/len(cycles)
		q := sched.Params{Coll: coll, NRanks: n, Count: hi - lo, Segment: segment}
		if coll == sched.Bcast {
			q.Root = slices.Index(c, root)
		}
		parts = append(parts, part{a: a, p: q, perm: c, off: lo, ch: uint8(min(k, 255))})
	}
	progs, err := compose(p, parts)
	return p, progs, err
}
