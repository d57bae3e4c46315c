package algo

import (
	"math"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(knomialBcast{base{"knomial", sched.Bcast}}) }

// knomialBcast broadcasts along a k-nomial tree rooted at the root (Xin,
// Xie and Li, Computer Systems & Applications 2020, §3.1), k = Params.Radix
// (KnomialRadix when 0). With v the rank's distance from the root written
// in base k, v receives from v with its lowest non-zero digit cleared and
// sends to v + j·k^i for every k^i below that digit's place and j = 1 … k−1
// (while below n), largest k^i first. k = 2 is the binomial tree
// ("binomial"), k ≥ n the flat one ("linear").
//
// Cost, for M bytes on n ranks, with L = ⌈log_k n⌉ the tree's levels and D
// the root's children (k−1 on every level but the top one, which has
// min(k−1, ⌈n/k^(L−1)⌉−1)):
//
//	T = L·α + D·M/β
//
// A rank's sends go to distinct ranks and wait for nothing, so their
// latencies overlap, but their bytes leave one after another; each subtree
// is done by the time the root's last send is, so the root's D sends and
// one α per level make the time. When n is a power of k, D = (k−1)·L and
// T = L·(α + (k−1)·M/β). (Xin, Xie and Li, Computer Systems & Applications
// 2020, eq. 3 gives ⌈log_k n⌉(α + M/β), as if a rank sent to its k−1
// children of a level in the time of one; by that, k = n, a flat tree,
// would always be best, against its own eq. 1.) Small messages favour a
// large k (fewer levels of α), large ones k = 2 (fewer copies of M through
// the root); Tune picks the k that minimises T.
type knomialBcast struct{ base }

// KnomialRadix is the degree of the k-nomial trees when Params.Radix is 0
// (a call the planner has not tuned): 4, which halves the levels of the
// binomial tree.
const KnomialRadix = 4

func (knomialBcast) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, k := p.NRanks, knomialRadix(p)
	v := mod(r-p.Root, n)
	in, out := whole(sched.In, p.Count), whole(sched.Out, p.Count)
	src := in
	parent, mask := knomialUp(n, k, v)
	if parent >= 0 {
		g.recv(mod(parent+p.Root, n), 0, out)
		src = out
	}
	for m := mask / k; m >= 1; m /= k {
		for j := 1; j < k && v+j*m < n; j++ {
			g.send(mod(v+j*m+p.Root, n), 0, src)
		}
	}
	if parent < 0 {
		g.copy(in, out)
	}
	return g.program()
}

func (knomialBcast) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	l := m.Flat(p)
	levels, children := knomialShape(p.NRanks, knomialRadix(p))
	return float64(levels)*l.Alpha + float64(children)*(bytesOf(p.Count, es)/l.Beta+m.Overhead)
}

// Tune sets Params.Radix, if 0, to the k that minimises Cost.
func (knomialBcast) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	if p.Radix != 0 {
		return p
	}
	l := m.Flat(p)
	p.Radix = tuneRadix(p.NRanks, l.Alpha, bytesOf(p.Count, es)/l.Beta+m.Overhead)
	return p
}

// knomialRadix returns the degree of p's k-nomial tree: Params.Radix or
// KnomialRadix, at most n (a degree of n or more is the flat tree).
func knomialRadix(p sched.Params) int {
	k := p.Radix
	if k == 0 {
		k = KnomialRadix
	}
	return max(2, min(k, p.NRanks))
}

// knomialUp returns the parent of v (a distance from the root) in the
// k-nomial tree on n ranks, and the place m (a power of k) of v's lowest
// non-zero base-k digit: v's children are v + j·m' for m' = m/k, m/k², …, 1
// and j = 1 … k−1, while below n. For v = 0 the parent is −1 and m is the
// least power of k not below n.
func knomialUp(n, k, v int) (parent, m int) {
	for m = 1; m < n; m *= k {
		if d := v / m % k; d != 0 {
			return v - d*m, m
		}
	}
	return -1, m
}

// knomialShape returns the levels L = ⌈log_k n⌉ of the k-nomial tree on n
// ranks and the number of the root's children: on the level of k^i, the
// j = 1 … k−1 with j·k^i < n.
func knomialShape(n, k int) (levels, children int) {
	for m := 1; m < n; m *= k {
		levels++
		children += min(k-1, ceilDiv(n, m)-1)
	}
	return levels, children
}

// tuneRadix returns the k in [2, max(2, n)] that minimises L·α + D·x (see
// knomialShape), the smallest on ties. For each number of levels L it
// scans the k that give L upwards from the least, while the bound
// L·α + ((L−1)(k−1)+1)·x (every level but the top one is full) is below
// the best so far.
func tuneRadix(n int, alpha, x float64) int {
	best, arg := math.Inf(1), 2
	for levels := ceilLog2(n); levels >= 1; levels-- {
		for k := max(2, rootCeil(n, levels)); k <= n; k++ {
			lv, d := knomialShape(n, k)
			if lv != levels || float64(levels)*alpha+float64((levels-1)*(k-1)+1)*x >= best {
				break
			}
			if t := float64(lv)*alpha + float64(d)*x; t < best {
				best, arg = t, k
			}
		}
	}
	return arg
}

// rootCeil returns the least k ≥ 1 with k^e ≥ n, for n ≥ 1 and e ≥ 1.
func rootCeil(n, e int) int {
	k := max(1, int(math.Ceil(math.Pow(float64(n), 1/float64(e)))))
	for k > 1 && powAtLeast(k-1, e, n) {
		k--
	}
	for !powAtLeast(k, e, n) {
		k++
	}
	return k
}

// powAtLeast reports whether k^e ≥ n, without overflow.
func powAtLeast(k, e, n int) bool {
	x := 1
	for range e {
		if x >= n {
			return true
		}
		x *= k
	}
	return x >= n
}
