package algo

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/braid-ccl/braid/sched"
)

// The tree-packing algorithms of Blink (MLSys 2020, §3-4): the data is
// split among the weighted spanning trees of Params.Trees, in proportion to
// their weights (contiguous ranges, sched.Trees.Split), and every tree
// carries its range at once with the others.
//
//   - Broadcast: each tree's range flows from the root down the tree; a
//     rank receives each piece from its parent and forwards it to its
//     children.
//   - Reduce: each tree's range is reduced up the tree toward the root; a
//     rank adds its children's pieces to its own, in increasing order of
//     the children's ranks, and sends the sum to its parent. Every tree is
//     rooted at Params.Root.
//   - Allreduce: each tree reduces its range toward its own root, as for
//     Reduce, and the root broadcasts the result back down the same edges
//     (Blink, MLSys 2020, §3.3). Every sum is computed once, at one rank,
//     so every rank gets the same bits.
//
// Each tree's range is cut into the same number s of pieces, so that a
// tree's pieces are in proportion to its weight and the trees, each going
// at its weight's rate, deliver their j-th pieces at about the same time:
// s = ⌈L/Params.Segment⌉ for L the longest range (Segment 0 means
// TreepackSegment). A rank's steps are ordered by the round in which they
// are expected (piece j reaches depth d in round j + d), with receives
// posted treepackWindow rounds ahead, so the executor, which issues steps
// in order, never waits on one tree while another has data to move.
// Pieces of children after the first are received into a ring of scratch
// slots and added in order.
//
// Every message goes on a channel (sched.Step.Channel) of the link it
// crosses: one per tree on that link, except that trees of unequal
// weights crossing a link at the same depth share a channel, whose
// messages then go in turn (Blink, MLSys 2020, §4.2.2, stream reuse; see
// assignChannels). A tree edge marked relayed (sched.Tree.Relayed) takes
// channels from sched.RelayedChannel up, which route it through switches
// and CPUs rather than over the direct link (Blink's PCIe trees, §3.4).
//
// Cost, with s pieces per tree, piece i of c_i bytes (tree i's range over
// s), the slowest link (α, β), reduction γ per byte, per round and rank v
// out(v) and in(v) the bytes v sends and receives (a piece per tree edge
// at v) and red(v) the bytes it adds:
//
//	τ = α + max_v max(out(v)/β, in(v)/β, red(v)·γ)
//	T = (s + D − 1)·τ
//
// with D the height of the highest tree (twice that for allreduce, whose
// pieces go up and back down): a pipeline of s rounds of τ, plus D − 1 to
// drain. A rank's messages of a round go to distinct ranks and overlap
// their latencies, but their bytes leave (and arrive) one after another
// through the rank's port, as package cost's model has it; additions
// overlap the next round's transfers (an executor that holds its issue
// while it adds, as the simulator's does, takes up to a fifth longer
// where γ is close to 1/β). Tune picks the s that minimises T.
//
// The packing's trees need not be shallow: a piece takes D rounds to
// cross the highest tree, so deep trees want more, smaller pieces.
//
// The three are registered as "treepack". They need Params.Trees, which
// only a planner that knows the topology fills in (the communicator does,
// from package pack, when it is given one); without trees Supports says
// so and Cost is +Inf, so a planner never picks them.
var (
	TreepackBcast     Algorithm = treepack{base{"treepack", sched.Bcast}}
	TreepackReduce    Algorithm = treepack{base{"treepack", sched.Reduce}}
	TreepackAllreduce Algorithm = treepack{base{"treepack", sched.Allreduce}}
)

func init() {
	Register(TreepackBcast)
	Register(TreepackReduce)
	Register(TreepackAllreduce)
}

// Treepack returns the tree-packing algorithm of collective c, or nil if
// there is none (only Bcast, Reduce and Allreduce have one).
func Treepack(c sched.Collective) Algorithm {
	switch c {
	case sched.Bcast:
		return TreepackBcast
	case sched.Reduce:
		return TreepackReduce
	case sched.Allreduce:
		return TreepackAllreduce
	}
	return nil
}

// TreepackSegment is the most elements of one piece when Params.Segment is
// 0: as for the chain broadcast.
const TreepackSegment = 64 << 10

// treepackWindow is how many rounds ahead a rank posts its receives.
const treepackWindow = 4

// treepackSlots is how many rounds of pieces the scratch ring of each
// extra child holds: a slot is posted treepackWindow rounds before its
// piece is added, and reused once that addition is done.
const treepackSlots = treepackWindow + 3

// maxTreepackRounds bounds the pieces per tree (and so the steps).
const maxTreepackRounds = 1 << 16

// maxTreepackMessages bounds trees × rounds × 2, the tags one schedule
// numbers.
const maxTreepackMessages = 1 << 30

type treepack struct{ base }

func (a treepack) Supports(p sched.Params) error {
	if err := a.base.Supports(p); err != nil {
		return err
	}
	if p.Trees == nil {
		return fmt.Errorf("algo: %v %q needs Params.Trees, the spanning trees of a packing of the topology; none given", a.coll, a.name)
	}
	if err := p.Trees.Validate(p.NRanks); err != nil {
		return fmt.Errorf("algo: %v %q: %w", a.coll, a.name, err)
	}
	if a.coll != sched.Allreduce {
		for i, t := range p.Trees.Tree {
			if t.Root != p.Root {
				return fmt.Errorf("algo: %v %q: tree %d is rooted at rank %d, not at the root %d", a.coll, a.name, i, t.Root, p.Root)
			}
		}
	}
	if len(p.Trees.Tree) > maxTreepackMessages/(2*maxTreepackRounds) {
		return fmt.Errorf("algo: %v %q: %d trees are more than tags can number", a.coll, a.name, len(p.Trees.Tree))
	}
	return nil
}

// tpShape is what every rank computes alike from p: the trees' ranges,
// the pieces, and each tree's shape.
type tpShape struct {
	ranges [][2]int
	rounds int // pieces per tree
	trees  []tpTree
	// chans maps a tree and a directed link it crosses (tree, from, to)
	// to a channel.
	chans map[[3]int]uint8
}

type tpTree struct {
	t      *sched.Tree
	kids   [][]int // children of each rank, increasing
	depth  []int   // distance from the root
	height []int   // longest distance down to a leaf of the rank's subtree
	top    int     // the tree's height: height[root]
}

// treepackRounds returns the pieces per tree for ranges whose longest has
// maxLen elements when asked for segment (0: TreepackSegment).
func treepackRounds(maxLen, segment, ntrees int) int {
	seg := segment
	if seg <= 0 {
		seg = TreepackSegment
	}
	limit := min(maxTreepackRounds, maxTreepackMessages/(2*max(ntrees, 1)))
	return min(max(1, ceilDiv(maxLen, seg)), limit)
}

func newTPShape(p sched.Params) *tpShape {
	ts := p.Trees.Tree
	sh := &tpShape{ranges: p.Trees.Split(p.Count)}
	maxLen := 0
	for _, r := range sh.ranges {
		maxLen = max(maxLen, r[1]-r[0])
	}
	sh.rounds = treepackRounds(maxLen, p.Segment, len(ts))
	n := p.NRanks
	for i := range ts {
		t := &ts[i]
		tt := tpTree{t: t, kids: make([][]int, n), depth: make([]int, n), height: make([]int, n)}
		for v, u := range t.Parent {
			if v != t.Root {
				tt.kids[u] = append(tt.kids[u], v)
			}
		}
		order := []int{t.Root}
		for k := 0; k < len(order); k++ {
			for _, c := range tt.kids[order[k]] {
				tt.depth[c] = tt.depth[order[k]] + 1
				order = append(order, c)
			}
		}
		for k := len(order) - 1; k > 0; k-- {
			v := order[k]
			tt.height[t.Parent[v]] = max(tt.height[t.Parent[v]], tt.height[v]+1)
		}
		tt.top = tt.height[t.Root]
		sh.trees = append(sh.trees, tt)
	}
	sh.assignChannels(p.Coll)
	return sh
}

// assignChannels gives every tree's crossing of a link a channel
// (sched.Step.Channel), numbered per directed link in order of first use
// over the trees, relayed edges from sched.RelayedChannel up (so that
// they take the relayed route), direct ones below it:
//
//   - trees of equal weights each get a channel of their own on the
//     link: their pieces, equal in size, move at once, sharing the link
//     evenly as concurrent streams do, and each pays its latency while
//     the others move data;
//   - where trees of unequal weights cross the link, those that cross it
//     at the same depth share a channel, whose messages go in turn (Blink,
//     MLSys 2020, §4.2.2, stream reuse): the link's time then goes to each
//     in proportion to its pieces, where concurrent streams would share it
//     evenly and hold the heavier trees back.
func (sh *tpShape) assignChannels(coll sched.Collective) {
	type link struct{ from, to, relayed int }
	type crossing struct{ tree, depth int }
	var order []link
	uses := map[link][]crossing{}
	cross := func(i, from, to, depth int, relayed bool) {
		l := link{from, to, 0}
		if relayed {
			l.relayed = 1
		}
		if _, ok := uses[l]; !ok {
			order = append(order, l)
		}
		uses[l] = append(uses[l], crossing{i, depth})
	}
	for i, tt := range sh.trees {
		for v, u := range tt.t.Parent {
			if v == tt.t.Root {
				continue
			}
			if coll != sched.Reduce {
				cross(i, u, v, tt.depth[v], tt.t.IsRelayed(v))
			}
			if coll != sched.Bcast {
				cross(i, v, u, tt.depth[v], tt.t.IsRelayed(v))
			}
		}
	}
	sh.chans = map[[3]int]uint8{}
	for _, l := range order {
		cs := uses[l]
		equal := !slices.ContainsFunc(cs, func(c crossing) bool { return sh.trees[c.tree].t.Weight != sh.trees[cs[0].tree].t.Weight })
		base, limit := 0, int(sched.RelayedChannel)-1
		if l.relayed == 1 {
			base, limit = int(sched.RelayedChannel), 255
		}
		byDepth := map[int]int{}
		next := base
		for _, c := range cs {
			ch, ok := byDepth[c.depth]
			if equal || !ok {
				ch, next = min(next, limit), next+1
				byDepth[c.depth] = ch
			}
			sh.chans[[3]int{c.tree, l.from, l.to}] = uint8(ch)
		}
	}
}

// piece returns the elements of tree i's piece j.
func (sh *tpShape) piece(i, j int) (off, n int) {
	lo, hi := sh.ranges[i][0], sh.ranges[i][1]
	a, b := blockOff(hi-lo, sh.rounds, j), blockOff(hi-lo, sh.rounds, j+1)
	return lo + a, b - a
}

// pieceMax returns the longest piece of tree i.
func (sh *tpShape) pieceMax(i int) int {
	return ceilDiv(sh.ranges[i][1]-sh.ranges[i][0], sh.rounds)
}

// tag numbers tree i's piece j on the way up (phase 0) or down (phase 1).
func (sh *tpShape) tag(phase, i, j int) int {
	return (phase*sh.rounds+j)*len(sh.trees) + i
}

// keyed is a step with the round in which it is expected and an order
// among the steps of one round: posts of receives and copies first, then
// additions, then sends up, then sends down.
type keyed struct {
	round, kind, tree, seq int
	s                      sched.Step
}

const (
	kindPost = iota
	kindAdd
	kindUp
	kindDown
)

func (a treepack) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	if p.NRanks == 1 || p.Count == 0 {
		if p.OutLen(r) > 0 {
			g.copy(whole(sched.In, p.Count), whole(sched.Out, p.Count))
		}
		return g.program()
	}
	sh := newTPShape(p)
	var steps []keyed
	add := func(round, kind, tree int, s sched.Step) {
		steps = append(steps, keyed{round, kind, tree, len(steps), s})
	}
	switch p.Coll {
	case sched.Bcast:
		a.bcastSteps(p, sh, r, add)
	default:
		a.reduceSteps(p, sh, r, add)
	}
	slices.SortStableFunc(steps, func(x, y keyed) int {
		return cmp.Or(cmp.Compare(x.round, y.round), cmp.Compare(x.kind, y.kind), cmp.Compare(x.tree, y.tree), cmp.Compare(x.seq, y.seq))
	})
	for _, k := range steps {
		g.add(k.s)
	}
	if p.Coll == sched.Bcast && r == p.Root {
		g.copy(whole(sched.In, p.Count), whole(sched.Out, p.Count))
	}
	return g.program()
}

// bcastSteps adds rank r's steps of a broadcast: piece j of tree i leaves
// the root in round j and reaches depth d in round j + d.
func (treepack) bcastSteps(p sched.Params, sh *tpShape, r int, add func(round, kind, tree int, s sched.Step)) {
	for i, tt := range sh.trees {
		d := tt.depth[r]
		src := sched.Out
		if r == tt.t.Root {
			src = sched.In
		}
		for j := range sh.rounds {
			off, n := sh.piece(i, j)
			if r != tt.t.Root {
				u := tt.t.Parent[r]
				add(j+d-1-treepackWindow, kindPost, i, sched.Step{Kind: sched.KindRecv, Peer: u, Tag: int32(sh.tag(1, i, j)),
					Dst: span(sched.Out, off, n), Channel: sh.chans[[3]int{i, u, r}]})
			}
			for _, c := range tt.kids[r] {
				add(j+d, kindDown, i, sched.Step{Kind: sched.KindSend, Peer: c, Tag: int32(sh.tag(1, i, j)),
					Src: span(src, off, n), Channel: sh.chans[[3]int{i, r, c}]})
			}
		}
	}
}

// reduceSteps adds rank r's steps of a reduce or an allreduce. Piece j of
// tree i leaves a rank whose subtree has height h in round j + h, so the
// root has it summed in round j + H (H the tree's height); for allreduce
// the sum then reaches depth d in round j + H + d.
func (treepack) reduceSteps(p sched.Params, sh *tpShape, r int, add func(round, kind, tree int, s sched.Step)) {
	all := p.Coll == sched.Allreduce
	// acc is where rank r builds its partial sums: Out where it has one,
	// else the first Count elements of Tmp.
	acc := sched.Out
	tmpBase := 0
	if p.OutLen(r) == 0 {
		acc = sched.Tmp
		tmpBase = p.Count
	}
	for i, tt := range sh.trees {
		root, kids := tt.t.Root, tt.kids[r]
		h, d := tt.height[r], tt.depth[r]
		pm := sh.pieceMax(i)
		slots := min(treepackSlots, sh.rounds)
		slotBase := tmpBase
		if len(kids) > 1 {
			tmpBase += (len(kids) - 1) * slots * pm
		}
		for j := range sh.rounds {
			off, n := sh.piece(i, j)
			mine := span(acc, off, n)
			post := j + h - 1 - treepackWindow
			if len(kids) == 0 {
				mine = span(sched.In, off, n)
			} else {
				add(post, kindPost, i, sched.Step{Kind: sched.KindCopy, Src: span(sched.In, off, n), Dst: mine})
				for k, c := range kids {
					st := sched.Step{Peer: c, Tag: int32(sh.tag(0, i, j)), Channel: sh.chans[[3]int{i, c, r}]}
					if k == 0 {
						st.Kind, st.Dst = sched.KindRecvReduce, mine
						add(post, kindPost, i, st)
						continue
					}
					slot := span(sched.Tmp, slotBase+((k-1)*slots+j%slots)*pm, n)
					st.Kind, st.Dst = sched.KindRecv, slot
					add(post, kindPost, i, st)
					add(j+h, kindAdd, i, sched.Step{Kind: sched.KindReduce, Src: slot, Dst: mine})
				}
			}
			if r != root {
				u := tt.t.Parent[r]
				add(j+h, kindUp, i, sched.Step{Kind: sched.KindSend, Peer: u, Tag: int32(sh.tag(0, i, j)),
					Src: mine, Channel: sh.chans[[3]int{i, r, u}]})
			}
			if !all {
				continue
			}
			// The way back down: the root sends its sum; the others
			// receive the sum into Out, once their own piece has gone
			// up (their parent has it summed by round j + height of the
			// parent), and forward it.
			if r != root {
				u := tt.t.Parent[r]
				at := max(j+tt.top+d-1-treepackWindow, j+tt.height[u]+1)
				add(at, kindPost, i, sched.Step{Kind: sched.KindRecv, Peer: u, Tag: int32(sh.tag(1, i, j)),
					Dst: span(sched.Out, off, n), Channel: sh.chans[[3]int{i, u, r}]})
			}
			for _, c := range kids {
				add(j+tt.top+d, kindDown, i, sched.Step{Kind: sched.KindSend, Peer: c, Tag: int32(sh.tag(1, i, j)),
					Src: span(sched.Out, off, n), Channel: sh.chans[[3]int{i, r, c}]})
			}
		}
	}
}
