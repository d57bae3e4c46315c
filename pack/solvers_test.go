package pack

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// randomArcs returns m random arcs on n vertices with integer costs 0-9
// (parallel arcs and loops included).
func randomArcs(rng *rand.Rand, n, m int) []arc {
	arcs := make([]arc, m)
	for i := range arcs {
		arcs[i] = arc{from: rng.IntN(n), to: rng.IntN(n), w: float64(rng.IntN(10)), id: i}
	}
	return arcs
}

// bruteArborescence returns the cost of the cheapest arborescence rooted at
// root by trying every choice of one incoming arc per vertex; +Inf if none.
func bruteArborescence(n, root int, arcs []arc) float64 {
	in := make([][]int, n)
	for i, a := range arcs {
		if a.from != a.to && a.to != root {
			in[a.to] = append(in[a.to], i)
		}
	}
	best := math.Inf(1)
	choice := make([]int, n)
	var rec func(v int, cost float64)
	rec = func(v int, cost float64) {
		if v == n {
			// Every vertex must reach the root through its parents.
			for s := range n {
				u, steps := s, 0
				for u != root && steps <= n {
					u = arcs[choice[u]].from
					steps++
				}
				if u != root {
					return
				}
			}
			best = min(best, cost)
			return
		}
		if v == root {
			rec(v+1, cost)
			return
		}
		for _, i := range in[v] {
			choice[v] = i
			rec(v+1, cost+arcs[i].w)
		}
	}
	rec(0, 0)
	return best
}

// TestMinArborescence compares Chu-Liu/Edmonds with exhaustive search.
func TestMinArborescence(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 3000 {
		n := 2 + rng.IntN(5)
		arcs := randomArcs(rng, n, rng.IntN(4*n))
		root := rng.IntN(n)
		want := bruteArborescence(n, root, arcs)
		sel := minArborescence(n, root, arcs)
		if sel == nil {
			if !math.IsInf(want, 1) {
				t.Fatalf("trial %d: no arborescence found, brute force has one of cost %g", trial, want)
			}
			continue
		}
		cost := 0.0
		for v, s := range sel {
			if v == root {
				if s != -1 {
					t.Fatalf("trial %d: root has an incoming arc", trial)
				}
				continue
			}
			if arcs[s].to != v {
				t.Fatalf("trial %d: arc %d chosen for %d goes to %d", trial, s, v, arcs[s].to)
			}
			cost += arcs[s].w
		}
		if cost != want {
			t.Fatalf("trial %d: n=%d root %d: cost %g, brute force %g (arcs %v)", trial, n, root, cost, want, arcs)
		}
	}
}

// TestMinSpanningTree compares Prim with exhaustive search over edge
// subsets.
func TestMinSpanningTree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 1000 {
		n := 1 + rng.IntN(5)
		arcs := randomArcs(rng, n, rng.IntN(3*n+1))
		want := math.Inf(1)
		for mask := 0; mask < 1<<len(arcs); mask++ {
			parent := make([]int, n)
			for i := range parent {
				parent[i] = i
			}
			find := func(x int) int {
				for parent[x] != x {
					x = parent[x]
				}
				return x
			}
			cost, k, ok := 0.0, 0, true
			for i, a := range arcs {
				if mask>>i&1 == 0 {
					continue
				}
				x, y := find(a.from), find(a.to)
				if x == y {
					ok = false
					break
				}
				parent[x] = y
				cost += a.w
				k++
			}
			if ok && k == n-1 {
				want = min(want, cost)
			}
		}
		sel := minSpanningTree(n, arcs)
		if sel == nil {
			if !math.IsInf(want, 1) {
				t.Fatalf("trial %d: no tree found, brute force has one of cost %g", trial, want)
			}
			continue
		}
		cost := 0.0
		for _, s := range sel {
			cost += arcs[s].w
		}
		if len(sel) != n-1 || cost != want {
			t.Fatalf("trial %d: %d edges of cost %g, brute force %g", trial, len(sel), cost, want)
		}
	}
}

// TestMaxFlow compares Dinic's algorithm with the minimum cut found by
// trying every vertex set.
func TestMaxFlow(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 1000 {
		n := 2 + rng.IntN(6)
		arcs := randomArcs(rng, n, rng.IntN(4*n))
		s, d := 0, n-1
		cut := math.Inf(1)
		for mask := 0; mask < 1<<n; mask++ {
			if mask&1 == 0 || mask>>d&1 == 1 {
				continue
			}
			c := 0.0
			for _, a := range arcs {
				if mask>>a.from&1 == 1 && mask>>a.to&1 == 0 {
					c += a.w
				}
			}
			cut = min(cut, c)
		}
		if f := maxFlow(n, s, d, arcs); math.Abs(f-cut) > 1e-9 {
			t.Fatalf("trial %d: flow %g, min cut %g", trial, f, cut)
		}
	}
}

// TestLPMax compares the simplex method with gonum's on random packing
// LPs, and checks its dual solution.
func TestLPMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 300 {
		m, n := 1+rng.IntN(8), 1+rng.IntN(12)
		A := make([][]float64, m)
		b := make([]float64, m)
		c := make([]float64, n)
		for j := range c {
			c[j] = float64(rng.IntN(4))
		}
		for i := range A {
			A[i] = make([]float64, n)
			for j := range A[i] {
				if rng.IntN(3) > 0 {
					A[i][j] = float64(rng.IntN(3))
				}
			}
			b[i] = float64(rng.IntN(5))
		}
		// Every column needs a positive entry, else the LP is unbounded.
		for j := range n {
			A[rng.IntN(m)][j] += 1
		}
		x, val, y, err := lpMax(A, b, c)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		// Primal feasibility and value.
		got := 0.0
		for j := range n {
			if x[j] < -1e-9 {
				t.Fatalf("trial %d: x[%d] = %g", trial, j, x[j])
			}
			got += c[j] * x[j]
		}
		for i := range m {
			s := 0.0
			for j := range n {
				s += A[i][j] * x[j]
			}
			if s > b[i]+1e-7 {
				t.Fatalf("trial %d: row %d: %g > %g", trial, i, s, b[i])
			}
		}
		// Dual feasibility and strong duality.
		dual := 0.0
		for i := range m {
			dual += y[i] * b[i]
		}
		for j := range n {
			s := 0.0
			for i := range m {
				s += y[i] * A[i][j]
			}
			if s < c[j]-1e-7 {
				t.Fatalf("trial %d: dual constraint %d: %g < %g", trial, j, s, c[j])
			}
		}
		if math.Abs(got-val) > 1e-7 || math.Abs(dual-val) > 1e-7 {
			t.Fatalf("trial %d: value %g, c·x %g, y·b %g", trial, val, got, dual)
		}
		// gonum: minimise -c·x subject to [A I][x s] = b.
		G := mat.NewDense(m, n+m, nil)
		for i := range m {
			for j := range n {
				G.Set(i, j, A[i][j])
			}
			G.Set(i, n+i, 1)
		}
		cc := make([]float64, n+m)
		for j := range n {
			cc[j] = -c[j]
		}
		ref, _, err := lp.Simplex(cc, G, b, 1e-10, nil)
		if err != nil {
			t.Fatalf("trial %d: gonum: %v", trial, err)
		}
		if math.Abs(-ref-val) > 1e-7 {
			t.Fatalf("trial %d: value %g, gonum %g", trial, val, -ref)
		}
	}
}

// TestBranchAndBound compares the integer program's optimum with
// exhaustive search on small packing problems.
func TestBranchAndBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := range 300 {
		m, n := 1+rng.IntN(4), 1+rng.IntN(5)
		A := make([][]float64, m)
		b := make([]float64, m)
		for i := range A {
			A[i] = make([]float64, n)
			for j := range A[i] {
				A[i][j] = float64(rng.IntN(3))
			}
			b[i] = float64(rng.IntN(6))
		}
		for j := range n {
			A[rng.IntN(m)][j]++
		}
		// Exhaustive search: each variable at most max(b).
		best := 0
		x := make([]int, n)
		var rec func(j int)
		rec = func(j int) {
			if j == n {
				for i := range m {
					s := 0.0
					for k := range n {
						s += A[i][k] * float64(x[k])
					}
					if s > b[i] {
						return
					}
				}
				best = max(best, sum(x))
				return
			}
			for v := 0; v <= 5; v++ {
				x[j] = v
				rec(j + 1)
			}
		}
		rec(0)
		bb := branchAndBound{A: A, b: b, budget: 1 << 20, target: math.MaxInt}
		got := bb.solve()
		if sum(got) != best {
			t.Fatalf("trial %d: branch and bound %v (%d), exhaustive %d; A %v b %v", trial, got, sum(got), best, A, b)
		}
		for i := range m {
			s := 0.0
			for k := range n {
				s += A[i][k] * float64(got[k])
			}
			if s > b[i]+1e-9 {
				t.Fatalf("trial %d: row %d over capacity", trial, i)
			}
		}
	}
}

// TestBranchAndBoundRandomCapacities compares the integer program with
// exhaustive search on packing problems whose capacities are random reals
// of up to 40 (TestBranchAndBound's are integers up to 5, too small for a
// solution to exceed one by a fraction of it): the solution must fit every
// row and be optimal.
func TestBranchAndBoundRandomCapacities(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 400 {
		m, n := 1+rng.IntN(4), 1+rng.IntN(3)
		A := make([][]float64, m)
		b := make([]float64, m)
		for i := range A {
			A[i] = make([]float64, n)
			for j := range A[i] {
				A[i][j] = float64(rng.IntN(4))
			}
			b[i] = 40 * rng.Float64()
		}
		for j := range n {
			A[rng.IntN(m)][j]++
		}
		fits := func(x []int) bool {
			for i := range m {
				s := 0.0
				for k := range n {
					s += A[i][k] * float64(x[k])
				}
				if s > b[i]+1e-9 {
					return false
				}
			}
			return true
		}
		// Exhaustive search: every variable uses some row at least once,
		// so it is at most 40.
		best := 0
		x := make([]int, n)
		var rec func(j int)
		rec = func(j int) {
			if j == n {
				if fits(x) {
					best = max(best, sum(x))
				}
				return
			}
			for v := 0; v <= 40; v++ {
				x[j] = v
				if !fits(x) {
					break
				}
				rec(j + 1)
			}
			x[j] = 0
		}
		rec(0)
		bb := branchAndBound{A: A, b: b, budget: 1 << 20, target: math.MaxInt}
		got := bb.solve()
		if !fits(got) {
			t.Fatalf("trial %d: branch and bound %v exceeds a capacity; A %v b %v", trial, got, A, b)
		}
		if sum(got) != best {
			t.Fatalf("trial %d: branch and bound %v (%d), exhaustive %d; A %v b %v", trial, got, sum(got), best, A, b)
		}
	}
}
