package pack

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// packer holds one tree-packing problem: the graph, the kind of trees
// (arborescences rooted at root, or undirected spanning trees), the
// capacities normalised to a largest of 1, and the candidate trees
// (columns) found so far.
type packer struct {
	g          *Graph
	root       int
	undirected bool
	scale      float64   // the largest capacity: cap = g.Cap/scale
	cap        []float64 // normalised capacities
	items      []int     // edges a tree may use (undirected: one of each usable pair)
	arcs       []arc     // the oracle's scratch space, one arc per item
	cols       []column
	keys       map[string]int
	stats      Stats
}

// column is a candidate tree: the items it uses and the resources they
// load, each with its multiplicity.
type column struct {
	items []int
	use   []load
}

type load struct {
	r int
	k float64
}

func newPacker(g *Graph, root int, undirected bool) (*packer, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	p := &packer{g: g, root: root, undirected: undirected, keys: map[string]int{}}
	for _, c := range g.Cap {
		p.scale = max(p.scale, c)
	}
	if p.scale == 0 {
		p.scale = 1
	}
	p.cap = make([]float64, len(g.Cap))
	for r, c := range g.Cap {
		p.cap[r] = c / p.scale
	}
	for i, e := range g.Edges {
		switch {
		case !g.usable(i):
		case !undirected && e.To != root:
			p.items = append(p.items, i)
		case undirected && e.Rev > i && g.usable(e.Rev):
			p.items = append(p.items, i)
		}
	}
	p.arcs = make([]arc, len(p.items))
	for k, i := range p.items {
		p.arcs[k] = arc{from: g.Edges[i].From, to: g.Edges[i].To, id: i}
	}
	return p, nil
}

// resources calls f for each resource that item i loads when a tree
// uses it.
func (p *packer) resources(i int, f func(r int)) {
	for _, r := range p.g.Edges[i].Use {
		f(r)
	}
	if p.undirected {
		for _, r := range p.g.Edges[p.g.Edges[i].Rev].Use {
			f(r)
		}
	}
}

// oracle returns the cheapest tree under the given price of each resource,
// as items, and its cost; nil if the graph has no spanning tree.
func (p *packer) oracle(price []float64) ([]int, float64) {
	for k, i := range p.items {
		w := 0.0
		p.resources(i, func(r int) { w += price[r] })
		p.arcs[k].w = w
	}
	var sel []int
	if p.undirected {
		sel = minSpanningTree(p.g.N, p.arcs)
	} else {
		sel = minArborescence(p.g.N, p.root, p.arcs)
	}
	if sel == nil {
		return nil, 0
	}
	var items []int
	cost := 0.0
	for _, s := range sel {
		if s >= 0 {
			items = append(items, p.arcs[s].id)
			cost += p.arcs[s].w
		}
	}
	slices.Sort(items)
	return items, cost
}

// add returns the index of the column of the given items, adding it if
// it is new.
func (p *packer) add(items []int) int {
	key := key(items)
	if j, ok := p.keys[key]; ok {
		return j
	}
	m := map[int]float64{}
	p.loads(items, func(r int) { m[r]++ })
	var use []load
	for r, k := range m {
		use = append(use, load{r, k})
	}
	slices.SortFunc(use, func(a, b load) int { return a.r - b.r })
	p.cols = append(p.cols, column{items: items, use: use})
	p.keys[key] = len(p.cols) - 1
	return len(p.cols) - 1
}

// key names a set of items.
func key(items []int) string {
	var b strings.Builder
	for _, i := range items {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte(',')
	}
	return b.String()
}

// loads calls f for each resource load of a tree of the given items.
func (p *packer) loads(items []int, f func(r int)) {
	for _, i := range items {
		p.resources(i, f)
	}
}

// mwu runs the multiplicative-weight-update packing of Blink §3.2 (the
// Garg-Könemann scheme): every resource carries a price, initially the
// inverse of its capacity; each step routes the bottleneck amount on the
// cheapest tree and raises the price of each resource it loads by the
// factor 1 + step·(load/capacity). It stops when the packing it has
// built, scaled down to fit, is within eps of the dual bound that the
// prices give (capacity·price / cheapest tree cost ≥ optimum), or after
// maxIter steps. It returns the feasible packing's weights by column
// (normalised units), its rate and the best dual bound.
func (p *packer) mwu(eps float64, maxIter int) (x []float64, rate, bound float64) {
	price := make([]float64, len(p.cap))
	for r, c := range p.cap {
		if c > 0 {
			price[r] = 1 / c
		}
	}
	load := make([]float64, len(p.cap))
	bound = math.Inf(1)
	step := eps / 2
	for p.stats.MWUIterations < maxIter {
		p.stats.MWUIterations++
		items, cost := p.oracle(price)
		if items == nil {
			return nil, 0, 0
		}
		d := 0.0
		for r, c := range p.cap {
			d += c * price[r]
		}
		bound = min(bound, d/cost)
		j := p.add(items)
		if len(x) < len(p.cols) {
			x = append(x, make([]float64, len(p.cols)-len(x))...)
		}
		f := math.Inf(1)
		for _, u := range p.cols[j].use {
			f = min(f, p.cap[u.r]/u.k)
		}
		x[j] += f
		top := 0.0
		for _, u := range p.cols[j].use {
			load[u.r] += f * u.k
			price[u.r] *= 1 + step*f*u.k/p.cap[u.r]
			top = max(top, price[u.r])
		}
		if top > 1e100 {
			for r := range price {
				price[r] /= top
			}
		}
		cong, sum := 0.0, 0.0
		for r, l := range load {
			if l > 0 {
				cong = max(cong, l/p.cap[r])
			}
		}
		for _, v := range x {
			sum += v
		}
		rate = sum / cong
		if rate >= (1-eps)*bound {
			break
		}
	}
	cong := 0.0
	for r, l := range load {
		if l > 0 {
			cong = max(cong, l/p.cap[r])
		}
	}
	for j := range x {
		x[j] /= cong
	}
	return x, rate, bound
}

// master builds the LP over the columns: one row per resource some column
// loads. It returns the matrix, the right-hand side and each row's
// resource.
func (p *packer) master() ([][]float64, []float64, []int) {
	row := map[int]int{}
	var rows []int
	for _, c := range p.cols {
		for _, u := range c.use {
			if _, ok := row[u.r]; !ok {
				row[u.r] = len(rows)
				rows = append(rows, u.r)
			}
		}
	}
	A := make([][]float64, len(rows))
	b := make([]float64, len(rows))
	for i, r := range rows {
		A[i] = make([]float64, len(p.cols))
		b[i] = p.cap[r]
	}
	for j, c := range p.cols {
		for _, u := range c.use {
			A[row[u.r]][j] = u.k
		}
	}
	return A, b, rows
}

// colgen solves the packing LP exactly by column generation: it solves the
// LP over the columns so far, prices resources with its dual solution and
// asks the oracle for a tree that costs less than 1 (a column that would
// raise the rate), until there is none. It returns the optimal weights by
// column, the optimum (normalised units) and the optimal dual prices by
// resource.
func (p *packer) colgen(maxRounds int) ([]float64, float64, []float64, error) {
	price := make([]float64, len(p.cap))
	for round := 0; ; round++ {
		A, b, rows := p.master()
		ones := make([]float64, len(p.cols))
		for j := range ones {
			ones[j] = 1
		}
		x, val, y, err := lpMax(A, b, ones)
		if err != nil {
			return nil, 0, nil, err
		}
		clear(price)
		for i, r := range rows {
			price[r] = y[i]
		}
		// Resources no column loads yet have no row and price 0: they
		// have slack, so a tree through them is worth adding.
		items, cost := p.oracle(price)
		p.stats.LPRounds = round + 1
		if items == nil || cost >= 1-1e-7 || round >= maxRounds {
			return x, val, price, nil
		}
		n := len(p.cols)
		p.add(items)
		if len(p.cols) == n {
			return x, val, price, nil // the oracle's tree is known: numerically optimal
		}
	}
}

// keep reduces the columns to those listed, in that order.
func (p *packer) keep(js []int) {
	cols := make([]column, len(js))
	clear(p.keys)
	for k, j := range js {
		cols[k] = p.cols[j]
		p.keys[key(cols[k].items)] = k
	}
	p.cols = cols
}

// Stats says how a plan was found.
type Stats struct {
	MWUIterations int     // steps of the multiplicative-weight update
	MWUTrees      int     // distinct trees it produced
	MWURate       float64 // the rate of its packing, scaled to fit
	Columns       int     // trees the LP saw: MWU's and column generation's
	LPRounds      int     // LP solves of the column generation
	Quantum       float64 // the weight unit of the integer program; 0 if the LP's packing was kept
	Nodes         int     // branch-and-bound nodes over all quanta tried
}

func (s Stats) String() string {
	return fmt.Sprintf("mwu %d steps %d trees rate %.4g; lp %d rounds %d columns; quantum %.4g, %d nodes",
		s.MWUIterations, s.MWUTrees, s.MWURate, s.LPRounds, s.Columns, s.Quantum, s.Nodes)
}
