package algo_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// flatModel returns a model whose every link is l, with reduction cost
// gamma, so that a cost does not depend on which link Flat picks.
func flatModel(l cost.Link, gamma float64) cost.Model {
	var m cost.Model
	for _, c := range cost.Classes() {
		m.Links[c] = l
	}
	m.Gamma = gamma
	return m
}

// models are the (α, β, γ) the closed forms are checked at: shared memory,
// a network, a latency-free link and one where reduction dominates.
var models = []cost.Model{
	flatModel(cost.Link{Alpha: 1e-6, Beta: 8e9}, 1e-10),
	flatModel(cost.Link{Alpha: 25e-6, Beta: 1.25e9}, 1e-10),
	flatModel(cost.Link{Alpha: 0, Beta: 1e9}, 5e-10),
	flatModel(cost.Link{Alpha: 3e-6, Beta: 20e9}, 2e-9),
}

func costerOf(t *testing.T, c sched.Collective, name string) algo.Coster {
	t.Helper()
	a, err := algo.Lookup(c, name)
	if err != nil {
		t.Fatal(err)
	}
	k, ok := a.(algo.Coster)
	if !ok {
		t.Fatalf("%v %s has no Cost", c, name)
	}
	return k
}

func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Max(math.Abs(want), 1e-12)
}

// TestEveryAlgorithmHasCost checks that every registered algorithm has a
// cost model, so that the planner can weigh it, and that its figures are
// finite, not negative, and 0 where nothing moves.
func TestEveryAlgorithmHasCost(t *testing.T) {
	for _, a := range algo.All() {
		k, ok := a.(algo.Coster)
		if !ok {
			t.Errorf("%v %s does not implement algo.Coster", a.Collective(), a.Name())
			continue
		}
		for _, m := range models {
			for n := 1; n <= 9; n++ {
				for _, p := range params(a, n, 0, 1, 7, 1000, 1<<20+3) {
					c := k.Cost(p, 4, m)
					if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 {
						t.Errorf("%v %s: Cost(%+v) = %g", a.Collective(), a.Name(), p, c)
					}
					if n == 1 && c != 0 && a.Collective() != sched.Barrier {
						t.Errorf("%v %s: Cost on one rank = %g, want 0", a.Collective(), a.Name(), c)
					}
				}
			}
		}
	}
}

// The closed forms below are written out from the papers (and from each
// algorithm's comment) independently of the code under test.

func log2c(n int) float64 { return math.Ceil(math.Log2(float64(n))) }

func pow2below(n int) (p2 int, lg float64) {
	p2 = 1
	for 2*p2 <= n {
		p2 *= 2
	}
	return p2, math.Log2(float64(p2))
}

// knomialTree returns the levels (⌈log_k n⌉, the least L with k^L ≥ n)
// and the root's children of the k-nomial tree on n ranks, by building the
// tree: the parent of v clears v's lowest non-zero base-k digit.
func knomialTree(n, k int) (levels, rootChildren int) {
	for pow := 1; pow < n; pow *= k {
		levels++
	}
	for v := 1; v < n; v++ {
		digits, x := 0, v
		for x > 0 {
			if x%k != 0 {
				digits++
			}
			x /= k
		}
		if digits == 1 { // clearing its only digit leaves 0
			rootChildren++
		}
	}
	return levels, rootChildren
}

// window returns the receives a segmented ring with segments of seg
// elements, q of them to a block, posts ahead: SegWindow elements' worth,
// at least one and at most q.
func window(seg, q int) int { return min(max(1, (algo.SegWindow+seg-1)/seg), q) }

// pacedTime is the time of k segments over a link, c each, each received
// only once the one w before it has been received and added (r): every w
// of them take c + r, and the last group c a segment.
func pacedTime(k, w int, c, r float64) float64 {
	groups, rest := (k-1)/w, (k-1)%w+1
	return float64(groups)*(c+r) + float64(rest)*c
}

type costCase struct {
	coll    sched.Collective
	name    string
	segment func(n, count int) int // Params.Segment; nil: 0
	radix   int
	// want is the closed form for n ranks, count elements of es bytes,
	// link (a, b), reduction cost g and the params' segment.
	want func(n, count, es, seg int, a, b, g float64) float64
}

var costCases = []costCase{
	{coll: sched.Allreduce, name: "ring", want: func(n, count, es, _ int, a, b, g float64) float64 {
		M, N := float64(count*es), float64(n)
		return 2*(N-1)*(a+M/(N*b)) + (N-1)*M/N*g
	}},
	{coll: sched.Allreduce, name: "recdouble", want: func(n, count, es, _ int, a, b, g float64) float64 {
		M := float64(count * es)
		p2, lg := pow2below(n)
		t := lg * (a + M/b + M*g)
		if p2 != n {
			t += 2*(a+M/b) + M*g
		}
		return t
	}},
	{coll: sched.Allreduce, name: "rabenseifner", want: func(n, count, es, _ int, a, b, g float64) float64 {
		M := float64(count * es)
		p2, lg := pow2below(n)
		P := float64(p2)
		t := 2*lg*a + 2*(P-1)/P*M/b + (P-1)/P*M*g
		if p2 != n {
			t += 2*(a+M/b) + M*g
		}
		return t
	}},
	{coll: sched.Allreduce, name: "reducebcast", want: func(n, count, es, _ int, a, b, g float64) float64 {
		M := float64(count * es)
		return float64(n-1)*(a+M/b+M*g) + log2c(n)*(a+M/b)
	}},
	// The segmented ring with q segments of S bytes per block, c = α + S/β,
	// N = (n−1)q, w the receives posted ahead: the largest of the link's,
	// the processor's and the window's times. Counts are n·q·S/es exactly.
	{coll: sched.Allreduce, name: "segring", segment: func(n, count int) int { return count / n / 4 },
		want: func(n, count, es, seg int, a, b, g float64) float64 {
			q := count / n / seg
			w := window(seg, q)
			S := float64(seg * es)
			c, r, N := a+S/b, S*g, float64((n-1)*q)
			return max(2*N*c, c+N*r+float64((n-2)*q+1)*c, pacedTime((n-1)*q+w, w, c, r)+(N-float64(w))*c)
		}},
	{coll: sched.Allreduce, name: "segring", segment: func(n, count int) int { return count / n },
		want: func(n, count, es, _ int, a, b, g float64) float64 { // one segment: the ring
			M, N := float64(count*es), float64(n)
			return 2*(N-1)*(a+M/(N*b)) + (N-1)*M/N*g
		}},
	{coll: sched.Reduce, name: "linear", want: func(n, count, es, _ int, a, b, g float64) float64 {
		M := float64(count * es)
		return float64(n-1) * (a + M/b + M*g)
	}},
	{coll: sched.Reduce, name: "binomial", want: func(n, count, es, _ int, a, b, g float64) float64 {
		M := float64(count * es)
		return log2c(n) * (a + M/b + M*g)
	}},
	{coll: sched.Bcast, name: "linear", want: func(n, count, es, _ int, a, b, _ float64) float64 {
		return a + float64(n-1)*float64(count*es)/b
	}},
	{coll: sched.Bcast, name: "binomial", want: func(n, count, es, _ int, a, b, _ float64) float64 {
		return log2c(n) * (a + float64(count*es)/b)
	}},
	// Eq. 5 of Xin, Xie and Li (Computer Systems & Applications 2020):
	// T = (M/C + n − 2)(α + C/β), with C dividing M.
	{coll: sched.Bcast, name: "chain", segment: func(n, count int) int { return count / 16 },
		want: func(n, count, es, seg int, a, b, _ float64) float64 {
			M, C := float64(count*es), float64(seg*es)
			return (M/C + float64(n) - 2) * (a + C/b)
		}},
	// The same with a last, shorter segment: ⌈M/C⌉ segments.
	{coll: sched.Bcast, name: "chain", segment: func(n, count int) int { return count/16 + 1 },
		want: func(n, count, es, seg int, a, b, _ float64) float64 {
			C := float64(seg * es)
			s := math.Ceil(float64(count) / float64(seg))
			return (s + float64(n) - 2) * (a + C/b)
		}},
	// Eq. 4 of Xin, Xie and Li (Computer Systems & Applications 2020).
	{coll: sched.Bcast, name: "scatterallgather", want: func(n, count, es, _ int, a, b, _ float64) float64 {
		M, N := float64(count*es), float64(n)
		return (log2c(n)+N-1)*a + 2*(N-1)/N*M/b
	}},
	{coll: sched.Allgather, name: "ring", want: func(n, count, es, _ int, a, b, _ float64) float64 {
		M, N := float64(n*count*es), float64(n)
		return (N - 1) * (a + M/(N*b))
	}},
	{coll: sched.Allgather, name: "segring", segment: func(n, count int) int { return count / 8 },
		want: func(n, count, es, seg int, a, b, _ float64) float64 {
			q := float64(count / seg)
			return float64(n-1) * q * (a + float64(seg*es)/b)
		}},
	{coll: sched.Allgather, name: "recdouble", want: func(n, count, es, _ int, a, b, _ float64) float64 {
		M, N := float64(n*count*es), float64(n)
		return log2c(n)*a + (N-1)/N*M/b
	}},
	{coll: sched.Allgather, name: "bruck", want: func(n, count, es, _ int, a, b, _ float64) float64 {
		M, N := float64(n*count*es), float64(n)
		return log2c(n)*a + (N-1)/N*M/b
	}},
	{coll: sched.ReduceScatter, name: "ring", want: func(n, count, es, _ int, a, b, g float64) float64 {
		M := float64(count * es)
		return float64(n-1) * (a + M/b + M*g)
	}},
	{coll: sched.ReduceScatter, name: "segring", segment: func(n, count int) int { return count / 8 },
		want: func(n, count, es, seg int, a, b, g float64) float64 {
			q := count / seg
			w := window(seg, q)
			S := float64(seg * es)
			c, r, N := a+S/b, S*g, float64((n-1)*q)
			return max(N*c+r, c+N*r, pacedTime((n-1)*q, w, c, r)+r)
		}},
	{coll: sched.ReduceScatter, name: "segring", segment: func(n, count int) int { return count },
		want: func(n, count, es, _ int, a, b, g float64) float64 { // one segment: the ring
			M := float64(count * es)
			return float64(n-1) * (a + M/b + M*g)
		}},
	{coll: sched.Gather, name: "linear", want: func(n, count, es, _ int, a, b, _ float64) float64 {
		M, N := float64(n*count*es), float64(n)
		return a + (N-1)*M/(N*b)
	}},
	{coll: sched.Scatter, name: "linear", want: func(n, count, es, _ int, a, b, _ float64) float64 {
		M, N := float64(n*count*es), float64(n)
		return a + (N-1)*M/(N*b)
	}},
	{coll: sched.Alltoall, name: "pairwise", want: func(n, count, es, _ int, a, b, _ float64) float64 {
		M, N := float64(n*count*es), float64(n)
		return (N - 1) * (a + M/(N*b))
	}},
}

func init() {
	// k-nomial trees: L·α + D·M/β (bcast) and L·α + D·(M/β + Mγ) (reduce),
	// L the levels and D the root's children.
	for _, k := range []int{2, 3, 4, 5, 8} {
		costCases = append(costCases,
			costCase{coll: sched.Bcast, name: "knomial", radix: k,
				want: func(n, count, es, _ int, a, b, _ float64) float64 {
					L, D := knomialTree(n, min(k, n))
					return float64(L)*a + float64(D)*float64(count*es)/b
				}},
			costCase{coll: sched.Reduce, name: "knomial", radix: k,
				want: func(n, count, es, _ int, a, b, g float64) float64 {
					L, D := knomialTree(n, min(k, n))
					M := float64(count * es)
					return float64(L)*a + float64(D)*(M/b+M*g)
				}})
	}
}

// TestCostFormulas checks each algorithm's Cost against its closed form,
// for rank counts that are and are not powers of two, several sizes and
// element sizes, and the models above. Counts are multiples of 16·n·4 so
// that the segmented cases cut evenly.
func TestCostFormulas(t *testing.T) {
	for _, tc := range costCases {
		k := costerOf(t, tc.coll, tc.name)
		for _, m := range models {
			l := m.Links[cost.Intra]
			for n := 2; n <= 9; n++ {
				for _, blocks := range []int{1, 3, 1000, 1 << 14} {
					count := 16 * 4 * n * blocks
					for _, es := range []int{1, 4, 8} {
						p := sched.Params{Coll: tc.coll, NRanks: n, Count: count, Root: n / 2, Radix: tc.radix}
						if tc.segment != nil {
							p.Segment = tc.segment(n, count)
						}
						got := k.Cost(p, es, m)
						want := tc.want(n, count, es, p.Segment, l.Alpha, l.Beta, m.Gamma)
						if !near(got, want) {
							t.Errorf("%v %s k=%d seg=%d, n=%d count=%d es=%d α=%g β=%g γ=%g: Cost %.9g, closed form %.9g",
								tc.coll, tc.name, tc.radix, p.Segment, n, count, es, l.Alpha, l.Beta, m.Gamma, got, want)
						}
					}
				}
			}
		}
	}
}

// TestCostNothingToMove checks that a call with no elements, or on one
// rank, costs nothing.
func TestCostNothingToMove(t *testing.T) {
	m := cost.Default()
	for _, a := range algo.All() {
		k, ok := a.(algo.Coster)
		if !ok || a.Collective() == sched.Barrier {
			continue
		}
		for _, p := range append(params(a, 5, 0), params(a, 1, 1000)...) {
			if c := k.Cost(p, 4, m); c != 0 {
				t.Errorf("%v %s: Cost(%+v) = %g, want 0", a.Collective(), a.Name(), p, c)
			}
		}
	}
}

// TestCostBarrier checks the dissemination barrier: ⌈log2 n⌉ rounds of α.
func TestCostBarrier(t *testing.T) {
	k := costerOf(t, sched.Barrier, "dissemination")
	for _, m := range models {
		for n := 1; n <= 17; n++ {
			got := k.Cost(sched.Params{Coll: sched.Barrier, NRanks: n}, 4, m)
			if want := log2c(n) * m.Links[cost.Intra].Alpha; !near(got, want) {
				t.Errorf("n=%d: %g, want %g", n, got, want)
			}
		}
	}
}

// TestCostFlatLink checks that a flat algorithm is costed over the slowest
// link between two of its ranks: the network when the ranks span hosts.
func TestCostFlatLink(t *testing.T) {
	m := cost.Default()
	k := costerOf(t, sched.Allreduce, "ring")
	for _, tc := range []struct {
		hosts []string
		numa  []int
		class cost.Class
	}{
		{[]string{"a", "a", "a", "a"}, nil, cost.Intra},
		{[]string{"a", "a", "a", "a"}, []int{0, 0, 1, 1}, cost.Cross},
		{[]string{"a", "a", "b", "b"}, nil, cost.Inter},
	} {
		p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 1 << 20, Layout: sched.NewLayout(tc.hosts, tc.numa)}
		l := m.Links[tc.class]
		M := float64(4 << 20)
		want := 2*3*(l.Alpha+M/(4*l.Beta)) + 3*M/4*m.Gamma
		if got := k.Cost(p, 4, m); !near(got, want) {
			t.Errorf("%v: %g, want %g with the %v link", tc.hosts, got, want, tc.class)
		}
	}
}

func tunerOf(t *testing.T, c sched.Collective, name string) (algo.Algorithm, algo.Tuner, algo.Coster) {
	t.Helper()
	a, err := algo.Lookup(c, name)
	if err != nil {
		t.Fatal(err)
	}
	tu, ok := a.(algo.Tuner)
	if !ok {
		t.Fatalf("%v %s has no Tune", c, name)
	}
	return a, tu, a.(algo.Coster)
}

// TestChainTune checks the pipelined chain's segment: Tune's is the whole
// number of elements that minimises T = (⌈M/C⌉ + n − 2)(α + C/β) (against
// every segment for small counts, against its neighbours for large ones),
// it lies next to the paper's C* = sqrt(M·α·β/(n−2)), and with two ranks it
// is the whole vector.
func TestChainTune(t *testing.T) {
	a, tu, k := tunerOf(t, sched.Bcast, "chain")
	for _, m := range models {
		l := m.Links[cost.Intra]
		for _, n := range []int{2, 3, 4, 8, 9, 64} {
			for _, count := range []int{1, 5, 100, 3000, 1 << 20, 1<<26 + 7} {
				for _, es := range []int{1, 4} {
					p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: count}
					q := tu.Tune(p, es, m)
					if err := a.Supports(q); err != nil || q.Segment < 1 || q.Segment > count {
						t.Fatalf("n=%d count=%d: Tune gave segment %d (%v)", n, count, q.Segment, err)
					}
					best := k.Cost(q, es, m)
					costAt := func(seg int) float64 {
						r := p
						r.Segment = seg
						return k.Cost(r, es, m)
					}
					lo, hi := q.Segment-64, q.Segment+64
					if count <= 3000 {
						lo, hi = 1, count+1
					}
					for seg := max(1, lo); seg <= hi; seg++ {
						if c := costAt(seg); c < best*(1-1e-12) {
							t.Errorf("n=%d count=%d es=%d α=%g: segment %d costs %g, less than Tune's %d at %g",
								n, count, es, l.Alpha, seg, c, q.Segment, best)
							break
						}
					}
					switch {
					case n == 2:
						if q.Segment != count {
							t.Errorf("n=2 count=%d: segment %d, want the whole vector", count, q.Segment)
						}
					case count >= 1<<20 && l.Alpha > 0:
						M := float64(count * es)
						cstar := math.Sqrt(M * l.Alpha * l.Beta / float64(n-2))
						if got := float64(q.Segment * es); cstar < M/2 && math.Abs(got-cstar) > 0.05*cstar {
							t.Errorf("n=%d count=%d es=%d α=%g: segment %g B, C* = %g B", n, count, es, l.Alpha, got, cstar)
						}
					}
				}
			}
		}
	}
	// A segment set by the caller stays.
	p := sched.Params{Coll: sched.Bcast, NRanks: 5, Count: 1 << 20, Segment: 77}
	if q := tu.Tune(p, 4, cost.Default()); q != p {
		t.Errorf("Tune changed a set segment: %+v", q)
	}
}

// TestSegringTune checks the segmented rings' segments against every
// segment, for blocks small enough to try them all, and that the
// reduce-scatter halves cut blocks when reduction is slow against the
// link and the allgather never does.
func TestSegringTune(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Allreduce, sched.ReduceScatter, sched.Allgather} {
		a, tu, k := tunerOf(t, coll, "segring")
		for _, m := range models {
			for _, n := range []int{2, 3, 5, 8} {
				for _, count := range []int{1, 10, 777, 4000} {
					p := sched.Params{Coll: coll, NRanks: n, Count: count}
					q := tu.Tune(p, 4, m)
					if err := a.Supports(q); err != nil || q.Segment < 1 {
						t.Fatalf("%v n=%d count=%d: Tune gave segment %d (%v)", coll, n, count, q.Segment, err)
					}
					best := k.Cost(q, 4, m)
					for seg := 1; seg <= count+1; seg++ {
						r := p
						r.Segment = seg
						if c := k.Cost(r, 4, m); c < best*(1-1e-12) {
							t.Errorf("%v n=%d count=%d: segment %d costs %g, less than Tune's %d at %g", coll, n, count, seg, c, q.Segment, best)
							break
						}
					}
				}
			}
		}
		// Reduction at 1/10 of the link's speed: hiding it behind the
		// transfer of other segments pays, for the reducing rings.
		m := flatModel(cost.Link{Alpha: 1e-6, Beta: 10e9}, 1e-9)
		p := sched.Params{Coll: coll, NRanks: 4, Count: 1 << 22}
		seg := tu.Tune(p, 4, m).Segment
		block := p.Count
		if coll == sched.Allreduce {
			block /= 4
		}
		if coll == sched.Allgather && seg != block {
			t.Errorf("allgather segring: segment %d, want the whole block %d", seg, block)
		}
		if coll != sched.Allgather && seg >= block {
			t.Errorf("%v segring with slow reduction: segment %d, want less than the block %d", coll, seg, block)
		}
	}
}

// TestSegringSelfCopy checks the segmented rings' cost where ranks copy
// their own messages over shared memory (cost.Model.SelfCopy): on one host
// the transfers and the additions take turns, so that the cost is at least
// 2N·c + N·S·γ (allreduce) or N·(c + S·γ) (reduce-scatter), and Tune
// cuts the fewest segments of at most DefaultSegment (one, the ring, for
// a block of at most that) where messages have a latency; across hosts the
// network overlaps them, as without SelfCopy.
func TestSegringSelfCopy(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Allreduce, sched.ReduceScatter} {
		_, tu, k := tunerOf(t, coll, "segring")
		for _, base := range models {
			m := base
			m.SelfCopy = true
			l := m.Links[cost.Intra]
			for n := 2; n <= 9; n++ {
				count := 16 * 4 * n * 1000
				block := count
				if coll == sched.Allreduce {
					block /= n
				}
				p := sched.Params{Coll: coll, NRanks: n, Count: count, Segment: block / 4}
				S := float64(p.Segment * 4)
				c, r, N := l.Time(S), S*m.Gamma, float64((n-1)*4)
				serial := N * (c + r)
				if coll == sched.Allreduce {
					serial = 2*N*c + N*r
				}
				if got, want := k.Cost(p, 4, m), max(k.Cost(p, 4, base), serial); !near(got, want) {
					t.Errorf("%v n=%d α=%g β=%g γ=%g, one host: Cost %.9g, want %.9g", coll, n, l.Alpha, l.Beta, m.Gamma, got, want)
				}
				names := make([]string, n)
				for i := range names {
					names[i] = fmt.Sprint(i)
				}
				p.Layout = sched.NewLayout(names, nil)
				if got, want := k.Cost(p, 4, m), k.Cost(p, 4, base); got != want {
					t.Errorf("%v n=%d α=%g β=%g γ=%g, one rank a host: Cost %.9g, want %.9g as without SelfCopy", coll, n, l.Alpha, l.Beta, m.Gamma, got, want)
				}
				// Tune: the fewest segments of at most DefaultSegment.
				p.Layout, p.Segment = nil, 0
				want := (block + (block+algo.DefaultSegment-1)/algo.DefaultSegment - 1) / ((block + algo.DefaultSegment - 1) / algo.DefaultSegment)
				if seg := tu.Tune(p, 4, m).Segment; l.Alpha > 0 && seg != want {
					t.Errorf("%v n=%d α=%g β=%g γ=%g, one host: Tune's segment %d, want %d (block %d)", coll, n, l.Alpha, l.Beta, m.Gamma, seg, want, block)
				}
			}
		}
	}
}

// TestDirectSelfCopy checks the direct allreduce's cost (and hier's, which
// shares it) and hierpipe's where ranks copy their own messages over shared
// memory (cost.Model.SelfCopy): on one host their segments' transfers and
// additions take turns, so that they cost more than with them overlapped
// once the vector is cut into several segments, and across hosts they
// cost what they do without SelfCopy.
func TestDirectSelfCopy(t *testing.T) {
	for _, name := range []string{"direct", "hierpipe"} {
		testSelfCopy(t, name)
	}
}

func testSelfCopy(t *testing.T, name string) {
	k := costerOf(t, sched.Allreduce, name)
	for _, base := range models {
		m := base
		m.SelfCopy = true
		for _, n := range []int{2, 3, 4, 8} {
			p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: 1 << 22}
			over, serial := k.Cost(p, 4, base), k.Cost(p, 4, m)
			if base.Gamma > 0 && !(serial > over) {
				t.Errorf("%s n=%d α=%g β=%g γ=%g, one host: Cost %.9g with SelfCopy, %.9g without; want more", name, n, base.Links[0].Alpha, base.Links[0].Beta, base.Gamma, serial, over)
			}
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprint(i)
			}
			p.Layout = sched.NewLayout(names, nil)
			if a, b := k.Cost(p, 4, m), k.Cost(p, 4, base); a != b {
				t.Errorf("%s n=%d, one rank a host: Cost %.9g with SelfCopy, %.9g without; want the same", name, n, a, b)
			}
		}
	}
}

// TestKnomialTune checks the k-nomial radix: Tune's k has the least cost
// of every k from 2 to past n, small messages take the flat tree (fewest
// levels of α) and large ones a tree with as few copies of M through the
// root as the binomial tree.
func TestKnomialTune(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Bcast, sched.Reduce} {
		a, tu, k := tunerOf(t, coll, "knomial")
		for _, m := range models {
			for n := 1; n <= 40; n++ {
				for _, count := range []int{1, 64, 4096, 1 << 20} {
					p := sched.Params{Coll: coll, NRanks: n, Count: count}
					q := tu.Tune(p, 4, m)
					if err := a.Supports(q); err != nil || q.Radix < 2 || q.Radix > max(2, n) {
						t.Fatalf("%v n=%d count=%d: Tune gave radix %d (%v)", coll, n, count, q.Radix, err)
					}
					best := k.Cost(q, 4, m)
					for r := 2; r <= n+3; r++ {
						x := p
						x.Radix = r
						if c := k.Cost(x, 4, m); c < best*(1-1e-12) {
							t.Errorf("%v n=%d count=%d: radix %d costs %g, less than Tune's %d at %g", coll, n, count, r, c, q.Radix, best)
						}
					}
				}
			}
		}
		m := cost.Default()
		for _, n := range []int{5, 9, 16} {
			// Without per-message overhead, small messages take the flat
			// tree (fewest levels of α); with it, a root that posts a
			// message per child takes fewer children at 16 ranks.
			flat := m
			flat.Overhead = 0
			if r := tu.Tune(sched.Params{Coll: coll, NRanks: n, Count: 1}, 4, flat).Radix; r != n {
				t.Errorf("%v n=%d, 4 bytes, no overhead: radix %d, want the flat tree %d", coll, n, r, n)
			}
			if r := tu.Tune(sched.Params{Coll: coll, NRanks: 16, Count: 1}, 4, m).Radix; r >= 16 || r < 2 {
				t.Errorf("%v n=16, 4 bytes, overhead %g s: radix %d, want a tree of several levels", coll, m.Overhead, r)
			}
			// Large messages: no more copies through the root than the
			// binomial tree's ⌈log2 n⌉ (the least any tree can have).
			r := tu.Tune(sched.Params{Coll: coll, NRanks: n, Count: 1 << 24}, 4, m).Radix
			if _, d := knomialTree(n, r); float64(d) != log2c(n) {
				t.Errorf("%v n=%d, 64 MiB: radix %d, whose root has %d children, more than ⌈log2 n⌉", coll, n, r, d)
			}
		}
	}
}

// TestTuners checks every Tuner: it keeps parameters the caller set, the
// params it returns are supported, and they cost no more than the
// defaults it replaces (which it must have considered).
func TestTuners(t *testing.T) {
	m := cost.Default()
	for _, a := range algo.All() {
		tu, ok := a.(algo.Tuner)
		if !ok {
			continue
		}
		k := a.(algo.Coster)
		for _, n := range []int{1, 2, 3, 7} {
			for _, p := range params(a, n, 0, 1, 1000, 1<<20) {
				q := tu.Tune(p, 4, m)
				if err := a.Supports(q); err != nil {
					t.Errorf("%v %s: Tune(%+v) = %+v: %v", a.Collective(), a.Name(), p, q, err)
					continue
				}
				if tc, dc := k.Cost(q, 4, m), k.Cost(p, 4, m); tc > dc*(1+1e-12) {
					t.Errorf("%v %s: Tune(%+v) costs %g, more than the defaults' %g", a.Collective(), a.Name(), p, tc, dc)
				}
				set := p
				set.Segment, set.Radix = 3, 3
				if q := tu.Tune(set, 4, m); q.Segment != 3 || q.Radix != 3 {
					t.Errorf("%v %s: Tune changed set parameters: %+v", a.Collective(), a.Name(), q)
				}
			}
		}
	}
}

func ExampleTuner() {
	a, _ := algo.Lookup(sched.Bcast, "chain")
	m := cost.Default()
	p := sched.Params{Coll: sched.Bcast, NRanks: 8, Count: 16 << 20} // 64 MiB of float32
	p = a.(algo.Tuner).Tune(p, 4, m)
	fmt.Printf("segment %d KiB, %.2f ms\n", p.Segment*4>>10, a.(algo.Coster).Cost(p, 4, m)*1e3)
	// Output:
	// segment 291 KiB, 8.84 ms
}
