package pack

import (
	"errors"
	"math"
)

// errLPLimit is returned when the simplex method does not finish within
// its pivot budget (it should not happen: Bland's rule cannot cycle).
var errLPLimit = errors.New("pack: simplex pivot limit reached")

// errUnbounded is returned for an unbounded LP.
var errUnbounded = errors.New("pack: LP is unbounded")

// lpTol is the tolerance of the simplex method on normalised data.
const lpTol = 1e-9

// lpMax solves the packing LP
//
//	maximise c·x subject to A x ≤ b, x ≥ 0,  with b ≥ 0,
//
// by the dense tableau simplex method started at the origin (feasible
// because b ≥ 0), with Dantzig's rule and Bland's rule after a run of
// degenerate pivots, so it cannot cycle. A is row-major, len(b) rows of
// len(c) columns. It returns an optimal x, its value, and the dual
// solution y ≥ 0 (y·b equals the value; yᵀA ≥ c).
func lpMax(A [][]float64, b, c []float64) (x []float64, val float64, y []float64, err error) {
	m, n := len(b), len(c)
	w := n + m + 1 // columns: x, slacks, right-hand side
	T := make([]float64, (m+1)*w)
	row := func(i int) []float64 { return T[i*w : (i+1)*w] }
	basis := make([]int, m)
	for i := range m {
		r := row(i)
		copy(r, A[i])
		r[n+i] = 1
		r[w-1] = b[i]
		basis[i] = n + i
	}
	obj := row(m)
	for j := range n {
		obj[j] = -c[j]
	}
	degenerate := 0
	for iter := 0; ; iter++ {
		if iter > 50*(m+n)+1000 {
			return nil, 0, nil, errLPLimit
		}
		bland := degenerate > m+10
		enter := -1
		for j := range n + m {
			if obj[j] < -lpTol && (enter < 0 || !bland && obj[j] < obj[enter]) {
				enter = j
				if bland {
					break
				}
			}
		}
		if enter < 0 {
			break
		}
		leave := -1
		ratio := math.Inf(1)
		for i := range m {
			a := row(i)[enter]
			if a <= lpTol {
				continue
			}
			q := row(i)[w-1] / a
			if q < ratio-lpTol || q <= ratio+lpTol && leave >= 0 && basis[i] < basis[leave] {
				ratio, leave = q, i
			}
		}
		if leave < 0 {
			return nil, 0, nil, errUnbounded
		}
		if ratio <= lpTol {
			degenerate++
		} else {
			degenerate = 0
		}
		pr := row(leave)
		inv := 1 / pr[enter]
		for j := range pr {
			pr[j] *= inv
		}
		pr[enter] = 1
		for i := 0; i <= m; i++ {
			if i == leave {
				continue
			}
			r := row(i)
			f := r[enter]
			if f == 0 {
				continue
			}
			for j := range r {
				r[j] -= f * pr[j]
			}
			r[enter] = 0
		}
		basis[leave] = enter
	}
	x = make([]float64, n)
	for i, v := range basis {
		if v < n {
			x[v] = max(row(i)[w-1], 0)
		}
	}
	y = make([]float64, m)
	for i := range m {
		y[i] = max(obj[n+i], 0)
	}
	return x, obj[w-1], y, nil
}
