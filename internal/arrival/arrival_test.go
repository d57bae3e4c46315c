package arrival

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func eq(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("%s = %g, want %g", what, got, want)
	}
}

// TestMeasure: a = (0, 1, 2, 5): ā = 2, Ω = 5 − 0 = 5, Δ_i = (2, 1, 0,
// 3), Δ̄ = 6/4 = 1.5; with α = 0.5 the factors are 10 and 3.
func TestMeasure(t *testing.T) {
	m, err := Measure([]float64{1, 5, 0, 2})
	if err != nil {
		t.Fatal(err)
	}
	want := Imbalance{N: 4, First: 0, Last: 5, Mean: 2, Worst: 5, Average: 1.5}
	if m != want {
		t.Errorf("Measure = %+v, want %+v", m, want)
	}
	f, err := m.Factors(0.5)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "worst factor", f.Worst, 10)
	eq(t, "average factor", f.Average, 3)

	// Balanced: no imbalance, at any common time.
	m, _ = Measure([]float64{3, 3, 3})
	if m.Worst != 0 || m.Average != 0 || m.Mean != 3 {
		t.Errorf("balanced pattern: %+v", m)
	}
	// One late rank of n: Ω = d, ā = d/n, Δ̄ = 2d(n−1)/n².
	m, _ = Measure([]float64{0, 0, 0, 4})
	eq(t, "one late Ω", m.Worst, 4)
	eq(t, "one late Δ̄", m.Average, (3*1+3)/4.0)
}

func TestMeasureErrors(t *testing.T) {
	for _, c := range []struct {
		a    []float64
		want string
	}{
		{nil, "no arrival times"},
		{[]float64{0, math.NaN()}, "rank 1"},
		{[]float64{math.Inf(-1)}, "rank 0"},
	} {
		if _, err := Measure(c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Measure(%v): %v, want an error containing %q", c.a, err, c.want)
		}
	}
	m, _ := Measure([]float64{0, 1})
	for _, alpha := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := m.Factors(alpha); err == nil {
			t.Errorf("Factors(%g) did not fail", alpha)
		}
	}
}

// TestNodeWide: a = (0, 1, 2, 5) on hosts (0, 0, 1, 1): node 0 has Ω = 1,
// Δ̄ = 0.5, node 1 Ω = 3, Δ̄ = 1.5; their means are 2 and 1. A rank alone
// on its node counts as a node with no imbalance.
func TestNodeWide(t *testing.T) {
	m, err := NodeWide([]float64{0, 1, 2, 5}, []int{0, 0, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "node-wide Ω", m.Worst, 2)
	eq(t, "node-wide Δ̄", m.Average, 1)
	eq(t, "mean", m.Mean, 2)
	m, _ = NodeWide([]float64{7, 0, 4}, []int{5, 1, 1})
	eq(t, "node-wide Ω with a lone rank", m.Worst, 2)
	eq(t, "node-wide Δ̄ with a lone rank", m.Average, 1)
	if _, err := NodeWide([]float64{0, 1}, []int{0}); err == nil {
		t.Error("NodeWide with too few hosts did not fail")
	}
}

func TestMeanFactors(t *testing.T) {
	got := MeanFactors([]Factors{{10, 3}, {2, 1}})
	if got != (Factors{6, 2}) {
		t.Errorf("MeanFactors = %+v, want {6 2}", got)
	}
	if MeanFactors(nil) != (Factors{}) {
		t.Error("MeanFactors(nil) is not zero")
	}
}

// TestDraw: offsets lie in [0, MIF × α], fill the range, repeat for one
// seed and differ for another; MIF 0 is balanced.
func TestDraw(t *testing.T) {
	const n, mif, alpha = 4096, 20, 1e-5
	a, err := Draw(rand.New(rand.NewPCG(1, 0)), n, mif, alpha)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := Measure(a)
	if m.First < 0 || m.Last > mif*alpha {
		t.Errorf("offsets in [%g, %g], want within [0, %g]", m.First, m.Last, mif*alpha)
	}
	if f, _ := m.Factors(alpha); f.Worst < 0.99*mif || math.Abs(f.Average-mif/4) > 0.05*mif/4 {
		// Uniform on [0, M]: Ω → M, Δ̄ → M/4.
		t.Errorf("factors %+v of %d uniform offsets, want Ω/α near %d and Δ̄/α near %g", f, n, mif, mif/4.0)
	}
	b, _ := Draw(rand.New(rand.NewPCG(1, 0)), n, mif, alpha)
	c, _ := Draw(rand.New(rand.NewPCG(2, 0)), n, mif, alpha)
	if !reflect.DeepEqual(a, b) || reflect.DeepEqual(a, c) {
		t.Error("Draw is not a function of its seed")
	}
	z, _ := Draw(rand.New(rand.NewPCG(1, 0)), 3, 0, alpha)
	if !reflect.DeepEqual(z, []float64{0, 0, 0}) {
		t.Errorf("MIF 0 gives %v", z)
	}
	for _, bad := range []struct {
		n          int
		mif, alpha float64
	}{{0, 1, 1}, {2, -1, 1}, {2, math.NaN(), 1}, {2, 1, -1}, {2, 1, math.Inf(1)}} {
		if _, err := Draw(rand.New(rand.NewPCG(1, 0)), bad.n, bad.mif, bad.alpha); err == nil {
			t.Errorf("Draw(%d, %g, %g) did not fail", bad.n, bad.mif, bad.alpha)
		}
	}
}

// TestDrawNodes: a node's ranks share its offset, so the node-wide
// imbalance is that of the ranks' own part and the cluster-wide one that
// of both; the factors approach their limits on many nodes; the draw
// repeats for a seed; nodeMIF 0 puts a node's ranks together.
func TestDrawNodes(t *testing.T) {
	const nodes, k, mif, nodeMIF, alpha = 2048, 4, 30, 5, 1e-5
	host := make([]int, nodes*k)
	for r := range host {
		host[r] = r / k
	}
	a, err := DrawNodes(rand.New(rand.NewPCG(1, 0)), host, mif, nodeMIF, alpha)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := Measure(a)
	nw, _ := NodeWide(a, host)
	if all.First < 0 || all.Last > (mif+nodeMIF)*alpha {
		t.Errorf("offsets in [%g, %g], want within [0, %g]", all.First, all.Last, (mif+nodeMIF)*alpha)
	}
	fc, _ := all.Factors(alpha)
	fn, _ := nw.Factors(alpha)
	// k uniform offsets on [0, B] span B(k−1)/(k+1) on average.
	if want := nodeMIF * float64(k-1) / float64(k+1); math.Abs(fn.Worst-want) > 0.05*want {
		t.Errorf("node-wide Ω/α %.3f, want near %.3f", fn.Worst, want)
	}
	if fc.Worst < 0.98*(mif+nodeMIF) {
		t.Errorf("cluster-wide Ω/α %.3f, want near %d", fc.Worst, mif+nodeMIF)
	}
	for r := range host {
		if r%k == 0 {
			continue
		}
		if d := math.Abs(a[r] - a[r-1]); d > nodeMIF*alpha {
			t.Fatalf("ranks %d and %d of node %d are %g s apart, more than nodeMIF × α", r-1, r, host[r], d)
		}
	}
	b, _ := DrawNodes(rand.New(rand.NewPCG(1, 0)), host, mif, nodeMIF, alpha)
	if !reflect.DeepEqual(a, b) {
		t.Error("DrawNodes is not a function of its seed")
	}
	z, _ := DrawNodes(rand.New(rand.NewPCG(3, 0)), []int{7, 7, 9, 7}, mif, 0, alpha)
	if z[0] != z[1] || z[1] != z[3] || z[2] == z[0] {
		t.Errorf("nodeMIF 0 gives %v, want hosts 7's ranks together and host 9 apart", z)
	}
	for _, bad := range []struct{ mif, nodeMIF, alpha float64 }{{-1, 1, 1}, {1, math.NaN(), 1}, {1, 1, math.Inf(1)}} {
		if _, err := DrawNodes(rand.New(rand.NewPCG(1, 0)), host[:4], bad.mif, bad.nodeMIF, bad.alpha); err == nil {
			t.Errorf("DrawNodes(%g, %g, %g) did not fail", bad.mif, bad.nodeMIF, bad.alpha)
		}
	}
	if _, err := DrawNodes(rand.New(rand.NewPCG(1, 0)), nil, 1, 1, 1); err == nil {
		t.Error("DrawNodes of no ranks did not fail")
	}
}
