package algo

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sched/schedtest"
)

// layoutAlgos are the algorithms of hier_test.go, by collective and name.
var layoutAlgos = []struct {
	coll sched.Collective
	name string
}{
	{sched.Allreduce, "direct"},
	{sched.Allreduce, "twostep"},
	{sched.Allreduce, "hier"},
	{sched.ReduceScatter, "direct"},
	{sched.Allgather, "direct"},
	{sched.Bcast, "hier"},
	{sched.Bcast, "topochain"},
}

// testLayout is a named layout builder for n ranks.
type testLayout struct {
	name string
	make func(n int) *sched.Layout
}

var (
	// uneven3 puts 3 ranks of the first 4 on host a and one on host b (the
	// 3+1 case), then adds a third host, interleaved.
	uneven3 = []string{"a", "b", "a", "a", "c", "a", "c", "b", "a"}
	layouts = []testLayout{
		{"nil", func(int) *sched.Layout { return nil }},
		{"onehost", func(n int) *sched.Layout { return hostsLayout(n, func(int) string { return "a" }, nil) }},
		{"2hosts", func(n int) *sched.Layout {
			return hostsLayout(n, func(r int) string { return fmt.Sprint(r * 2 / n) }, nil)
		}},
		{"2interleaved", func(n int) *sched.Layout { return hostsLayout(n, func(r int) string { return fmt.Sprint(r % 2) }, nil) }},
		{"3uneven", func(n int) *sched.Layout { return hostsLayout(n, func(r int) string { return uneven3[r] }, nil) }},
		{"hostperrank", func(n int) *sched.Layout { return hostsLayout(n, func(r int) string { return fmt.Sprint(r) }, nil) }},
		{"numa", func(n int) *sched.Layout {
			return hostsLayout(n, func(int) string { return "a" }, func(r int) int { return r % 2 })
		}},
		{"2hosts-numa", func(n int) *sched.Layout {
			return hostsLayout(n, func(r int) string { return fmt.Sprint(r % 2) }, func(r int) int { return r / 2 % 2 })
		}},
	}
)

func hostsLayout(n int, host func(int) string, numa func(int) int) *sched.Layout {
	hosts := make([]string, n)
	for r := range hosts {
		hosts[r] = host(r)
	}
	var nodes []int
	if numa != nil {
		nodes = make([]int, n)
		for r := range nodes {
			nodes[r] = numa(r)
		}
	}
	return sched.NewLayout(hosts, nodes)
}

func mustLookup(t testing.TB, c sched.Collective, name string) Algorithm {
	t.Helper()
	a, err := Lookup(c, name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestLayoutAlgorithms checks the direct, two-step, hierarchical and
// topology-aware algorithms on 1–9 ranks, every root, counts that divide
// evenly and that do not, and layouts with one host, two hosts contiguous
// or interleaved, three uneven hosts (3+1 at four ranks), a host per rank
// and NUMA nodes: the schedule validates and the reference interpreter
// gives the collective's result, in place and not, with the same bits
// everywhere.
func TestLayoutAlgorithms(t *testing.T) {
	counts := []int{0, 1, 7, 1000, 65537}
	if testing.Short() {
		counts = counts[:4]
	}
	for _, la := range layoutAlgos {
		a := mustLookup(t, la.coll, la.name)
		t.Run(la.coll.String()+"/"+la.name, func(t *testing.T) {
			t.Parallel()
			for _, lay := range layouts {
				for n := 1; n <= 9; n++ {
					roots := []int{0}
					if la.coll.Rooted() {
						roots = roots[:0]
						for r := range n {
							roots = append(roots, r)
						}
					}
					for _, count := range counts {
						for _, root := range roots {
							if count == 65537 && root != n-1 {
								continue // the large count once per layout and rank count
							}
							p := sched.Params{Coll: la.coll, NRanks: n, Count: count, Root: root, Layout: lay.make(n)}
							if err := a.Supports(p); err != nil {
								t.Fatalf("%s n=%d: %v", lay.name, n, err)
							}
							if err := checkSched(t, p, Programs(a, p)); err != nil {
								t.Fatalf("layout %s n=%d count=%d root=%d: %v", lay.name, n, count, root, err)
							}
						}
					}
				}
			}
		})
	}
}

// TestLayoutSegments runs the segmented paths with small segments, where
// owners keep several segments per peer in flight and chains forward many
// pieces.
func TestLayoutSegments(t *testing.T) {
	t.Parallel()
	for _, la := range layoutAlgos {
		a := mustLookup(t, la.coll, la.name)
		for _, lay := range []testLayout{layouts[0], layouts[3], layouts[4], layouts[7]} {
			for _, n := range []int{1, 2, 4, 5, 7} {
				for _, seg := range []int{1, 3, 16} {
					for _, count := range []int{5, 100} {
						p := sched.Params{Coll: la.coll, NRanks: n, Count: count, Root: n / 2, Segment: seg, Layout: lay.make(n)}
						if !la.coll.Rooted() {
							p.Root = 0
						}
						if err := checkSched(t, p, Programs(a, p)); err != nil {
							t.Fatalf("%v %s layout %s n=%d seg=%d count=%d: %v", la.coll, la.name, lay.name, n, seg, count, err)
						}
					}
				}
			}
		}
	}
}

// TestDirectReduceOrder checks that every owner adds its peers' blocks in
// rank order, after its own, whatever the segmentation: the Reduce steps
// into one segment take, in program order, data received from ascending
// ranks (the dependencies make the program order the execution order).
func TestDirectReduceOrder(t *testing.T) {
	for _, tc := range []struct {
		coll sched.Collective
		name string
		k    int // blocks per rank
	}{{sched.ReduceScatter, "direct", 1}, {sched.Allreduce, "direct", 1}, {sched.Allreduce, "twostep", 1}} {
		a := mustLookup(t, tc.coll, tc.name)
		for _, seg := range []int{0, 4} {
			p := sched.Params{Coll: tc.coll, NRanks: 6, Count: 60, Segment: seg}
			for r := range p.NRanks {
				prog := a.Program(p, r)
				from := map[int]int{} // Tmp offset -> peer of the last receive there
				order := map[int][]int{}
				for _, s := range prog.Steps {
					switch {
					case s.Kind == sched.KindRecv && s.Dst.Buf == sched.Tmp:
						from[s.Dst.Off] = s.Peer
					case s.Kind == sched.KindReduce:
						order[s.Dst.Off] = append(order[s.Dst.Off], from[s.Src.Off])
					case s.Kind == sched.KindRecvReduce:
						t.Fatalf("%v %s: rank %d adds as messages arrive: %v", tc.coll, tc.name, r, s)
					}
				}
				for off, peers := range order {
					if !slices.IsSorted(peers) || len(peers) != p.NRanks-1 || slices.Contains(peers, r) {
						t.Errorf("%v %s seg=%d: rank %d adds into out[%d] from ranks %v, want every other rank in order", tc.coll, tc.name, seg, r, off, peers)
					}
				}
				if tc.name == "twostep" && r != 0 && len(order) > 0 {
					t.Errorf("twostep: rank %d reduces", r)
				}
			}
		}
	}
}

// crossings returns the elements of p's schedule sent between ranks that
// the layout puts in different classes at least c apart, per sending rank.
func crossings(p sched.Params, progs []sched.Program, c cost.Class) []int {
	sent := make([]int, p.NRanks)
	for r, prog := range progs {
		for _, s := range prog.Steps {
			if s.Kind == sched.KindSend && cost.ClassOf(p.Layout, r, s.Peer) >= c {
				sent[r] += s.Src.Len
			}
		}
	}
	return sent
}

// TestHierAllreduceTraffic checks the hierarchical allreduce's division of
// labour on two hosts of four ranks: every rank owns a quarter of the
// vector and sends half of it across hosts in the ring's reduce-scatter
// and the other half in its allgather, so each host's network link carries
// the vector once each way; and within a host each rank sends 3/4 of the
// vector in the reduce-scatter and 3/4 in the allgather.
func TestHierAllreduceTraffic(t *testing.T) {
	a := mustLookup(t, sched.Allreduce, "hier")
	const count = 8000
	p := sched.Params{Coll: sched.Allreduce, NRanks: 8, Count: count,
		Layout: sched.NewLayout([]string{"a", "a", "a", "a", "b", "b", "b", "b"}, nil)}
	progs := Programs(a, p)
	for r, across := range crossings(p, progs, cost.Inter) {
		if across != count/4 {
			t.Errorf("rank %d sends %d elements to the other host, want %d", r, across, count/4)
		}
	}
	for r, prog := range progs {
		within := 0
		for _, s := range prog.Steps {
			if s.Kind == sched.KindSend && p.Layout.HostOf(s.Peer) == p.Layout.HostOf(r) {
				within += s.Src.Len
			}
		}
		if want := 2 * 3 * count / 4; within != want {
			t.Errorf("rank %d sends %d elements within its host, want %d", r, within, want)
		}
	}
	// Interleaved hosts: the same amounts, whatever the rank numbering.
	p.Layout = sched.NewLayout([]string{"a", "b", "a", "b", "a", "b", "a", "b"}, nil)
	for r, across := range crossings(p, Programs(a, p), cost.Inter) {
		if across != count/4 {
			t.Errorf("interleaved: rank %d sends %d elements to the other host, want %d", r, across, count/4)
		}
	}
}

// TestTopoChainOrder checks that the chain crosses every host boundary and
// every NUMA boundary of a host once, for every root of interleaved and
// uneven layouts, and starts at the root.
func TestTopoChainOrder(t *testing.T) {
	for _, lay := range layouts {
		for n := 1; n <= 9; n++ {
			l := lay.make(n)
			for root := range n {
				p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: 10, Root: root, Layout: l}
				order := topoOrder(p)
				sorted := slices.Sorted(slices.Values(order))
				if order[0] != root || !slices.Equal(sorted, allRanks(n)[0]) {
					t.Fatalf("%s n=%d root=%d: order %v", lay.name, n, root, order)
				}
				hostCross, numaCross := 0, 0
				for i := 1; i < n; i++ {
					switch cost.ClassOf(l, order[i-1], order[i]) {
					case cost.Inter:
						hostCross++
					case cost.Cross:
						numaCross++
					}
				}
				numaNodes := 0
				for _, g := range l.Groups(n) {
					seen := map[int]bool{}
					for _, r := range g {
						seen[l.NUMAOf(r)] = true
					}
					numaNodes += len(seen) - 1
				}
				if hostCross != l.NHosts()-1 || numaCross != numaNodes {
					t.Errorf("%s n=%d root=%d: order %v crosses hosts %d times and NUMA nodes %d times, want %d and %d",
						lay.name, n, root, order, hostCross, numaCross, l.NHosts()-1, numaNodes)
				}
			}
		}
	}
}

// TestHierBcastLeaders checks that in the hierarchical broadcast only one
// rank per host other than the root's receives across hosts, and that it
// receives the vector once, in both shapes.
func TestHierBcastLeaders(t *testing.T) {
	a := mustLookup(t, sched.Bcast, "hier")
	l := sched.NewLayout([]string{"a", "b", "c", "a", "b", "c", "a", "b", "a"}, nil)
	for _, seg := range []int{0, 7} {
		for root := range 9 {
			p := sched.Params{Coll: sched.Bcast, NRanks: 9, Count: 100, Root: root, Segment: seg, Layout: l}
			recvAcross := map[int]int{} // host -> elements received across hosts
			receivers := map[int]map[int]bool{}
			for r, prog := range Programs(a, p) {
				for _, s := range prog.Steps {
					if s.Kind == sched.KindRecv && l.HostOf(s.Peer) != l.HostOf(r) {
						h := l.HostOf(r)
						recvAcross[h] += s.Dst.Len
						if receivers[h] == nil {
							receivers[h] = map[int]bool{}
						}
						receivers[h][r] = true
					}
				}
			}
			for h := range 3 {
				want := 100
				if h == l.HostOf(root) {
					want = 0
				}
				if recvAcross[h] != want || want > 0 && len(receivers[h]) != 1 {
					t.Errorf("seg=%d root=%d: host %d receives %d elements across hosts on ranks %v, want %d on one rank",
						seg, root, h, recvAcross[h], receivers[h], want)
				}
			}
		}
	}
}

// TestCosters checks that every algorithm of this file states a cost, that
// it is 0 for nothing to move and grows with the count, and that the closed
// forms in the comments hold.
func TestCosters(t *testing.T) {
	m := cost.Default()
	m.Overhead = 0 // the closed forms below leave out the per-message overhead
	two := sched.NewLayout([]string{"a", "a", "a", "a", "b", "b", "b", "b"}, nil)
	for _, la := range layoutAlgos {
		a := mustLookup(t, la.coll, la.name)
		c, ok := a.(Coster)
		if !ok {
			t.Errorf("%v %s does not implement Coster", la.coll, la.name)
			continue
		}
		for _, l := range []*sched.Layout{nil, two} {
			p := sched.Params{Coll: la.coll, NRanks: 8, Layout: l}
			if got := c.Cost(p, 4, m); got != 0 {
				t.Errorf("%v %s: count 0 costs %g", la.coll, la.name, got)
			}
			prev := 0.0
			for _, count := range []int{1, 1000, 1 << 16, 1 << 22} {
				p.Count = count
				got := c.Cost(p, 4, m)
				if !(got > prev) || math.IsInf(got, 0) {
					t.Errorf("%v %s layout %v: count %d costs %g after %g", la.coll, la.name, l, count, got, prev)
				}
				prev = got
			}
		}
	}

	// Closed forms, one class of link: a pipeline of u rounds that move
	// data for c and then add it for r takes c + r + (u−1)·max(c, r).
	const n, count, es = 5, 1 << 20, 4
	mb := float64(count * es)
	l := m.Links[cost.Intra]
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*want {
			t.Errorf("%s: cost %g, want %g", what, got, want)
		}
	}
	pipe := func(u, c, r float64) float64 { return c + r + (u-1)*max(c, r) }
	// Where the ranks copy their own messages (cost.Model.SelfCopy, as
	// Default has it), the allreduces' exchanges within a host take turns
	// with their additions: u·(c + r).
	ser := func(u, c, r float64) float64 { return u * (c + r) }
	p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count}
	blk := float64(blockOff(count, n, 1) * es)
	s := math.Ceil(float64(blockOff(count, n, 1)) / DirectSegment)
	near("direct allreduce", mustLookup(t, sched.Allreduce, "direct").(Coster).Cost(p, es, m),
		ser(s, l.Alpha+(n-1)*blk/(s*l.Beta), (n-1)*blk*m.Gamma/s)+l.Alpha+(n-1)*blk/l.Beta)
	s = count / DirectSegment
	near("twostep", mustLookup(t, sched.Allreduce, "twostep").(Coster).Cost(p, es, m),
		ser(s, l.Alpha+(n-1)*mb/(s*l.Beta), (n-1)*mb*m.Gamma/s)+l.Alpha+(n-1)*mb/l.Beta)
	near("hier on one host is direct", mustLookup(t, sched.Allreduce, "hier").(Coster).Cost(p, es, m),
		mustLookup(t, sched.Allreduce, "direct").(Coster).Cost(p, es, m))
	p = sched.Params{Coll: sched.ReduceScatter, NRanks: n, Count: count}
	s = count / DirectSegment
	near("direct reducescatter", mustLookup(t, sched.ReduceScatter, "direct").(Coster).Cost(p, es, m),
		pipe(s, l.Alpha+(n-1)*mb/(s*l.Beta), (n-1)*mb*m.Gamma/s))
	p = sched.Params{Coll: sched.Allgather, NRanks: n, Count: count}
	near("direct allgather", mustLookup(t, sched.Allgather, "direct").(Coster).Cost(p, es, m),
		l.Alpha+(n-1)*mb/l.Beta)
	// With the per-message overhead, a rank that sends to its n−1 peers in
	// one step pays n−2 overheads beyond the step's first message.
	mo := m
	mo.Overhead = 0.5e-6
	near("direct allgather with overhead", mustLookup(t, sched.Allgather, "direct").(Coster).Cost(p, es, mo),
		l.Alpha+(n-1)*mb/l.Beta+(n-2)*mo.Overhead)
	// The chain: 1049 segments of 1000 elements, the last of 576; it queues
	// behind the one before it: (s + n − 3)(α + C/β) + α + C_s/β.
	p = sched.Params{Coll: sched.Bcast, NRanks: n, Count: count, Segment: 1000}
	near("topochain", mustLookup(t, sched.Bcast, "topochain").(Coster).Cost(p, es, m),
		(1049+n-3)*l.Time(1000*es)+l.Time(576*es))

	// Two hosts of four ranks, even: hier allreduce's three phases.
	p = sched.Params{Coll: sched.Allreduce, NRanks: 8, Count: count, Layout: two}
	b := mb / 4
	ln := m.Links[cost.Inter]
	ring := 2*ln.Alpha + mb/ln.Beta + b/2*m.Gamma // H = 2: ring and Rabenseifner agree
	s = count / 4 / DirectSegment
	near("hier allreduce on 2×4", mustLookup(t, sched.Allreduce, "hier").(Coster).Cost(p, es, m),
		ser(s, l.Alpha+3*b/(s*l.Beta), 3*b*m.Gamma/s)+ring+l.Alpha+3*b/l.Beta)
}

// TestTuneSegment checks that Tune finds the optimal segment of the chain
// of Xin, Xie and Li (Computer Systems & Applications 2020), within the
// search grid's factor √2, on one class of link, and that the tuned
// schedule is no slower, in the model, than the untuned one.
func TestTuneSegment(t *testing.T) {
	m := cost.Default()
	a := mustLookup(t, sched.Bcast, "topochain")
	tu := a.(Tuner)
	const n, count, es = 6, 1 << 22, 8
	p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: count}
	l := m.Links[cost.Intra]
	want := math.Sqrt(float64(count*es)*l.Alpha*l.Beta/(n-2)) / es
	got := tu.Tune(p, es, m).Segment
	if float64(got) < want/math.Sqrt2 || float64(got) > want*math.Sqrt2 {
		t.Errorf("topochain: tuned segment %d elements, want about %.0f", got, want)
	}
	for _, name := range []string{"topochain", "hier"} {
		a := mustLookup(t, sched.Bcast, name)
		for _, lay := range []*sched.Layout{nil, layouts[3].make(n), layouts[7].make(n)} {
			for _, c := range []int{10, 1 << 12, 1 << 20} {
				p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: c, Root: 1, Layout: lay}
				tp := a.(Tuner).Tune(p, es, m)
				if tp.Segment <= 0 {
					t.Errorf("%s count %d: tuned segment %d", name, c, tp.Segment)
				}
				if ct, c0 := a.(Coster).Cost(tp, es, m), a.(Coster).Cost(p, es, m); ct > c0*(1+1e-12) {
					t.Errorf("%s count %d: tuned cost %g above untuned %g", name, c, ct, c0)
				}
				if err := checkSched(t, tp, Programs(a, tp)); err != nil {
					t.Errorf("%s tuned: %v", name, err)
				}
			}
		}
	}
}

// TestHierSupports checks the error for layouts whose tags would overflow,
// and that every valid layout here is supported.
func TestHierSupports(t *testing.T) {
	a := mustLookup(t, sched.Allreduce, "hier")
	if err := a.Supports(sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: 1, Layout: &sched.Layout{Host: []int{0, 2, 1}}}); err == nil {
		t.Error("a layout with hosts out of order was accepted")
	}
	// One host of n/2 ranks and n/2 hosts of one rank: K·H tags.
	const n = 1 << 17
	hosts := make([]int, n)
	for r := n / 2; r < n; r++ {
		hosts[r] = r - n/2 + 1
	}
	if err := a.Supports(sched.Params{Coll: sched.Allreduce, NRanks: n, Count: 1, Layout: &sched.Layout{Host: hosts}}); err == nil {
		t.Error("a layout needing more than 2^30 tags was accepted")
	}
}

// TestHierInterChoice checks which inter-host allreduce hier picks, so that
// TestLayoutAlgorithms's "hostperrank" layouts run both: Rabenseifner's on
// a power-of-two number of hosts (fewer rounds, the same bytes), and on
// five hosts for small vectors (its fold costs less than the ring's extra
// rounds); the ring on three hosts, and on five for large vectors.
func TestHierInterChoice(t *testing.T) {
	hosts := func(h int) [][]int { return hostsLayout(h, func(r int) string { return fmt.Sprint(r) }, nil).Groups(h) }
	for _, tc := range []struct {
		hosts, count int
		ring         bool
	}{{2, 1000, true}, {4, 1000, false}, {4, 1 << 22, false}, {3, 10, true}, {5, 1000, false}, {5, 1 << 22, true}, {8, 7, false}} {
		if got := hierInterRing(tc.count, hosts(tc.hosts), 1); got != tc.ring {
			t.Errorf("%d hosts, count %d: ring %v, want %v", tc.hosts, tc.count, got, tc.ring)
		}
	}
}

// TestDirectSlots runs the direct reduce-scatters with a scratch budget
// below one segment per peer, so that receives wait for slots that the
// additions of other peers' segments free.
func TestDirectSlots(t *testing.T) {
	defer func(v int) { directSlots = v }(directSlots)
	for _, slots := range []int{1, 8, 12} {
		directSlots = slots
		for _, la := range layoutAlgos[:4] {
			a := mustLookup(t, la.coll, la.name)
			for _, n := range []int{2, 5, 8} {
				for _, lay := range []testLayout{layouts[0], layouts[4]} {
					p := sched.Params{Coll: la.coll, NRanks: n, Count: 77, Segment: 4, Layout: lay.make(n)}
					progs := Programs(a, p)
					for _, prog := range progs {
						if limit := max(4, slots); prog.TmpLen > limit {
							t.Errorf("%v %s n=%d: rank %d uses %d elements of scratch, budget %d", la.coll, la.name, n, prog.Rank, prog.TmpLen, limit)
						}
					}
					if err := schedtest.Check(p, progs); err != nil {
						t.Fatalf("%v %s n=%d slots=%d layout %s: %v", la.coll, la.name, n, slots, lay.name, err)
					}
				}
			}
		}
	}
}
