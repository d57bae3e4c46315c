package algo

import (
	"cmp"
	"math"
	"slices"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// Sub-schedules over a group of ranks (a host, the owners of one chunk on
// every host, a chain in topology order), shared by the direct,
// hierarchical and topology-aware algorithms. Each one appends the calling
// rank's steps to g; every member of the group calls it with the same
// arguments (group, parts, tags) and its own rank. Tags run from the tag
// passed in; the functions that take one tag return how many they use, so
// that phases that follow one another stay apart.

// part is one piece of a reduce-scatter or allgather over a group.
//
// In a reduce-scatter the owner ends with the sum, over the group, of every
// member's src, in its dst. In an allgather every member ends with the
// owner's src in its dst.
type part struct {
	owner int         // the rank that holds the sum, or whose data is spread
	src   sched.Chunk // the contribution, on every member (reduce-scatter) or on the owner (allgather)
	dst   sched.Chunk // where the result goes, on the owner (reduce-scatter) or on every member (allgather)
}

// DirectSegment is the segment, in elements, of the direct reduce-scatter
// (used by "direct", "twostep" and "hier") when Params.Segment is 0: 32 Ki
// elements, 128 KiB of float32. It is above the shared-memory transport's
// eager limit, so every segment goes by single copy, and small enough that
// the owner adds a segment while it is still in cache.
const DirectSegment = 32 << 10

// directWindow is how many segments per peer a direct reduce-scatter owner
// has posted ahead of the one it is adding, at most.
const directWindow = 2

// directSlots bounds, in elements, the scratch a direct reduce-scatter owner
// receives into (4 MiB of float32): with many peers it posts fewer
// segments ahead rather than hold a copy of the whole vector. A variable
// only so that tests can make it small.
var directSlots = 1 << 20

// maxDirectSegments bounds the segments of one part (and so the program's
// length): larger parts get larger segments.
const maxDirectSegments = 1 << 10

// maxDirectTags bounds parts × segments, the tags of a direct
// reduce-scatter, far below 2^31.
const maxDirectTags = 1 << 24

// directSegments returns the segment size and the most segments of any part
// when nparts parts of at most maxLen elements are cut into segments of at
// most seg elements (0: DirectSegment). The segment is never longer than
// the longest part, so that scratch stays small for small counts.
func directSegments(nparts, maxLen, seg int) (size, nseg int) {
	if seg <= 0 {
		seg = DirectSegment
	}
	if maxLen <= 0 {
		return 1, 0
	}
	seg = min(seg, maxLen)
	nseg = (maxLen-1)/seg + 1
	if limit := max(1, min(maxDirectSegments, maxDirectTags/max(1, nparts))); nseg > limit {
		seg = (maxLen-1)/limit + 1
		nseg = (maxLen-1)/seg + 1
	}
	return seg, nseg
}

// subChunk returns elements [lo, hi) of c, clipped to c.
func subChunk(c sched.Chunk, lo, hi int) sched.Chunk {
	lo, hi = min(lo, c.Len), min(hi, c.Len)
	return sched.Chunk{Buf: c.Buf, Off: c.Off + lo, Len: max(0, hi-lo)}
}

// directReduceScatter appends rank me's part of a one-step reduce-scatter
// over group (ranks in group order): every member sends its src of each part
// it does not own straight to the part's owner, cut into segments of at
// most seg elements; each owner copies its own src to dst and adds the
// others' segments to it, always in rank order whatever order they arrive
// in, so the sum has the same bits on every run. An owner receives into a
// ring of slots in Tmp (directWindow segments per peer, at most
// directSlots elements, at least one segment), posts each receive as soon
// as its slot is free and adds each segment as soon as it is in. It
// returns the tags used.
func directReduceScatter(g *gen, group []int, me int, parts []part, seg, tag int) int {
	maxLen := 0
	for _, pt := range parts {
		maxLen = max(maxLen, pt.src.Len)
	}
	seg, nseg := directSegments(len(parts), maxLen, seg)
	tags := len(parts) * nseg
	if len(group) < 2 {
		for _, pt := range parts {
			g.copy(pt.src, pt.dst)
		}
		return tags
	}
	index := make(map[int]int, len(group))
	for i, q := range group {
		index[q] = i
	}
	pos := func(r int) int { return mod(index[r]-index[me], len(group)) }
	segOf := func(c sched.Chunk, j int) sched.Chunk { return subChunk(c, j*seg, (j+1)*seg) }

	// Sends: segment j of every part before segment j+1 of any, each round
	// starting with the owner after me, so that the senders do not all
	// start with the same owner.
	order := make([]int, len(parts))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(a, b int) int { return pos(parts[a].owner) - pos(parts[b].owner) })
	for j := range nseg {
		for _, k := range order {
			if pt := parts[k]; pt.owner != me {
				g.send(pt.owner, tag+k*nseg+j, segOf(pt.src, j))
			}
		}
	}

	// Receives: the owned parts' segments in order, u = 0, 1, ..., and for
	// each the peers in rank order: receive t = u·P + qi (P peers) lands in
	// slot t mod S of Tmp.
	type useg struct{ k, j int }
	var mine []useg
	for k, pt := range parts {
		if pt.owner == me {
			for j := range (pt.src.Len + seg - 1) / seg {
				mine = append(mine, useg{k, j})
			}
		}
	}
	var peers []int
	for _, q := range group {
		if q != me {
			peers = append(peers, q)
		}
	}
	slices.Sort(peers)
	np := len(peers)
	total := len(mine) * np
	nslots := max(1, min(total, np*directWindow, directSlots/seg))
	slot := func(t int) sched.Chunk {
		u := mine[t/np]
		return span(sched.Tmp, t%nslots*seg, segOf(parts[u.k].src, u.j).Len)
	}
	post := func(t int) {
		if t < total {
			u := mine[t/np]
			g.recv(peers[t%np], tag+u.k*nseg+u.j, slot(t))
		}
	}
	for t := range nslots {
		post(t)
	}
	for _, pt := range parts {
		if pt.owner == me {
			g.copy(pt.src, pt.dst)
		}
	}
	for t := range total {
		u := mine[t/np]
		g.reduce(slot(t), segOf(parts[u.k].dst, u.j))
		post(t + nslots)
	}
	return tags
}

// directAllgather appends rank me's part of a one-step allgather over
// group: each part's owner sends its src to every other member (starting
// with the member after it) and copies it to its own dst; the others
// receive it into dst. It returns the tags used.
func directAllgather(g *gen, group []int, me int, parts []part, tag int) int {
	mi := slices.Index(group, me)
	for k, pt := range parts {
		if pt.owner != me {
			continue
		}
		for i := 1; i < len(group); i++ {
			g.send(group[(mi+i)%len(group)], tag+k, pt.src)
		}
		if pt.src != pt.dst {
			g.copy(pt.src, pt.dst)
		}
	}
	for k, pt := range parts {
		if pt.owner != me {
			g.recv(pt.owner, tag+k, pt.dst)
		}
	}
	return len(parts)
}

// groupJob is one allreduce over a group of ranks: acc, in Out, holds the
// member's operand and ends with the sum; its messages use tags from tag on.
// Jobs run together are over groups of the same size in which the rank
// has the same index.
type groupJob struct {
	group []int
	acc   sched.Chunk
	tag   int
}

// ringAllreduceTags is the number of tags ringAllreduceGroups uses per job
// on m ranks.
func ringAllreduceTags(m int) int { return 2 * (m - 1) }

// ringAllreduceGroups appends rank me's part of ring allreduces, each over
// its job's group in group order: a ring reduce-scatter of the m blocks of
// acc, then a ring allgather. The jobs go in lockstep, step s of every job
// before step s+1 of any, so that their latencies overlap. Each block's sum
// is made by one member, so all get its bits.
func ringAllreduceGroups(g *gen, me int, jobs []groupJob) {
	if len(jobs) == 0 || len(jobs[0].group) < 2 {
		return
	}
	m := len(jobs[0].group)
	mi := slices.Index(jobs[0].group, me)
	blk := func(acc sched.Chunk, i int) sched.Chunk {
		i = mod(i, m)
		return subChunk(acc, blockOff(acc.Len, m, i), blockOff(acc.Len, m, i+1))
	}
	for s := range m - 1 {
		for _, j := range jobs {
			g.send(j.group[mod(mi+1, m)], j.tag+s, blk(j.acc, mi-s))
			g.recvReduce(j.group[mod(mi-1, m)], j.tag+s, blk(j.acc, mi-s-1))
		}
	}
	for s := range m - 1 {
		for _, j := range jobs {
			g.send(j.group[mod(mi+1, m)], j.tag+m-1+s, blk(j.acc, mi+1-s))
			g.recv(j.group[mod(mi-1, m)], j.tag+m-1+s, blk(j.acc, mi-s))
		}
	}
}

// rabenseifnerTags is the number of tags rabenseifnerGroups uses per job on
// m ranks.
func rabenseifnerTags(m int) int {
	_, log := pow2Below(m)
	return 2*log + 2
}

// rabenseifnerGroups appends rank me's part of Rabenseifner's allreduces
// (recursive-halving reduce-scatter, recursive-doubling allgather), each
// over its job's group, in lockstep as in ringAllreduceGroups. With p2 the
// largest power of two ≤ m and rem = m − p2, the members at group indices
// 2i+1 < 2·rem first add their operand into index 2i's and take the result
// back from it at the end. Each block's sum is made by one member.
func rabenseifnerGroups(g *gen, me int, jobs []groupJob) {
	if len(jobs) == 0 || len(jobs[0].group) < 2 {
		return
	}
	m := len(jobs[0].group)
	mi := slices.Index(jobs[0].group, me)
	p2, log := pow2Below(m)
	rem := m - p2
	last := 2*log + 1
	if mi < 2*rem && mi%2 == 1 {
		for _, j := range jobs {
			g.send(j.group[mi-1], j.tag, j.acc)
		}
		for _, j := range jobs {
			g.recv(j.group[mi-1], j.tag+last, j.acc)
		}
		return
	}
	nr := mi - rem
	if mi < 2*rem {
		nr = mi / 2
		for _, j := range jobs {
			g.recvReduce(j.group[mi+1], j.tag, j.acc)
		}
	}
	member := func(j groupJob, v int) int {
		if v < rem {
			return j.group[2*v]
		}
		return j.group[v+rem]
	}
	piece := func(acc sched.Chunk, lo, hi int) sched.Chunk {
		return subChunk(acc, blockOff(acc.Len, p2, lo), blockOff(acc.Len, p2, hi))
	}
	t := 1
	lo, hi := 0, p2
	for d := p2 / 2; d >= 1; d /= 2 {
		mid := (lo + hi) / 2
		keepLo, keepHi, sendLo, sendHi := lo, mid, mid, hi
		if nr&d != 0 {
			keepLo, keepHi, sendLo, sendHi = mid, hi, lo, mid
		}
		for _, j := range jobs {
			peer := member(j, nr^d)
			g.send(peer, j.tag+t, piece(j.acc, sendLo, sendHi))
			g.recvReduce(peer, j.tag+t, piece(j.acc, keepLo, keepHi))
		}
		lo, hi = keepLo, keepHi
		t++
	}
	for d := 1; d < p2; d *= 2 {
		mine, theirs := nr&^(d-1), (nr^d)&^(d-1)
		for _, j := range jobs {
			peer := member(j, nr^d)
			g.send(peer, j.tag+t, piece(j.acc, mine, mine+d))
			g.recv(peer, j.tag+t, piece(j.acc, theirs, theirs+d))
		}
		t++
	}
	if mi < 2*rem {
		for _, j := range jobs {
			g.send(j.group[mi+1], j.tag+last, j.acc)
		}
	}
}

// treeChildren returns the children of the member at index v of a binomial
// tree over m members rooted at index 0 (v + 2^k for each 2^k below v's
// lowest set bit, all of them for the root), largest subtree first.
func treeChildren(m, v int) []int {
	mask := 1
	for mask < m && v&mask == 0 {
		mask <<= 1
	}
	var children []int
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < m {
			children = append(children, v+mask)
		}
	}
	return children
}

// pipeBcast appends a rank's part of a broadcast down a tree, pipelined in
// segments of seg elements: the root (parent −1) sends segment j of In to
// each of its children and then copies In to Out; every other rank keeps
// two receives from its parent posted and forwards each segment to its
// children as soon as it is in. It returns the tags used (one per segment;
// every message goes between a parent and a child, so tags repeat across
// pairs).
func pipeBcast(g *gen, parent int, children []int, count, seg, tag int) int {
	nseg := 0
	if count > 0 {
		nseg = (count-1)/seg + 1
	}
	piece := func(buf sched.Buf, j int) sched.Chunk { return subChunk(whole(buf, count), j*seg, (j+1)*seg) }
	if parent < 0 {
		for j := range nseg {
			for _, c := range children {
				g.send(c, tag+j, piece(sched.In, j))
			}
		}
		g.copy(whole(sched.In, count), whole(sched.Out, count))
		return nseg
	}
	if nseg > 0 {
		g.recv(parent, tag, piece(sched.Out, 0))
	}
	for j := range nseg {
		if j+1 < nseg {
			g.recv(parent, tag+j+1, piece(sched.Out, j+1))
		}
		for _, c := range children {
			g.send(c, tag+j, piece(sched.Out, j))
		}
	}
	return nseg
}

// bcastTree is the shape of a broadcast: every rank's parent (−1 for the
// root) and children, in the order the parent sends to them.
type bcastTree struct {
	parent   []int
	children [][]int
}

func newBcastTree(n int) bcastTree {
	t := bcastTree{parent: make([]int, n), children: make([][]int, n)}
	for r := range t.parent {
		t.parent[r] = -1
	}
	return t
}

// link makes child a child of parent, after the children it has.
func (t bcastTree) link(parent, child int) {
	t.parent[child] = parent
	t.children[parent] = append(t.children[parent], child)
}

// chain links the ranks of order one after another.
func (t bcastTree) chain(order []int) {
	for i := 1; i < len(order); i++ {
		t.link(order[i-1], order[i])
	}
}

// binomial links the ranks of order as a binomial tree rooted at order[0].
func (t bcastTree) binomial(order []int) {
	for v := range order {
		for _, c := range treeChildren(len(order), v) {
			t.link(order[v], order[c])
		}
	}
}

// maxTreeSegments bounds the segments of a pipelined tree broadcast (and so
// its tags and program length).
const maxTreeSegments = 1 << 16

// treeSegments returns the segment a pipelined tree broadcast of count
// elements uses for a requested segment seg (≥ 1), within maxTreeSegments.
func treeSegments(count, seg int) int {
	if count > seg*maxTreeSegments {
		seg = (count + maxTreeSegments - 1) / maxTreeSegments
	}
	return max(1, min(seg, count))
}

// treeTime is the α-β time of a broadcast of count elements of es bytes
// down t, pipelined in s = ⌈count/seg⌉ segments of seg elements (C bytes;
// the last one, C_s, may be shorter). A rank sends each segment to all its
// children at once; they share its port (at the model's best bandwidth β_p)
// fairly, each within its link's bandwidth and those on other hosts within
// an equal share of its host's network link (β_n), which gives child c a
// rate ρ_c ≤ β_c (water-filling). So a segment of C bytes reaches child c
// α_c + C/ρ_c after it reached the parent, one message at a time per link,
// and the slowest sender forwards a segment every P = max_c (α_c + C/ρ_c).
// With R(C) the time a lone segment of C bytes takes to reach the last
// rank (the deepest path's Σ (α_c + C/ρ_c)), the last segment either
// leaves the root after the s − 1 others and travels alone, or queues
// behind the one before it:
//
//	T = max((s − 1)·P + R(C_s), (s − 2)·P + R(C) + max_c (α_c + C_s/ρ_c))
//
// For a chain on one class of link (ρ = β) and C_s = C this is the
// (M/C + n − 2)(α + C/β) of Xin, Xie and Li (Computer Systems &
// Applications 2020). These are the bottlenecks of sim's network of
// cost.Model with RankPorts and SharedNIC.
func treeTime(p sched.Params, t bcastTree, es, seg int, m cost.Model) float64 {
	if p.NRanks == 1 || p.Count == 0 {
		return 0
	}
	seg = treeSegments(p.Count, seg)
	s := (p.Count + seg - 1) / seg
	full, last := float64(seg*es), float64((p.Count-(s-1)*seg)*es)
	port := 0.0
	for _, l := range m.Links {
		port = max(port, l.Beta)
	}
	inter := m.Links[cost.Inter].Beta
	arrive := make([]float64, p.NRanks)  // of a full segment
	arriveS := make([]float64, p.NRanks) // of a last segment alone
	var reach, reachS, pace, hopS float64
	var caps, rates []float64
	// Visit parents before children: walk down from the root.
	stack := []int{p.Root}
	for len(stack) > 0 {
		r := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		kids := t.children[r]
		across := 0
		for _, ch := range kids {
			if cost.ClassOf(p.Layout, r, ch) == cost.Inter {
				across++
			}
		}
		caps = caps[:0]
		for _, ch := range kids {
			c := m.Between(p.Layout, r, ch).Beta
			if cost.ClassOf(p.Layout, r, ch) == cost.Inter {
				c = min(c, inter/float64(across))
			}
			caps = append(caps, c)
		}
		rates = waterFill(port, caps, rates)
		for i, ch := range kids {
			a := m.Between(p.Layout, r, ch).Alpha
			arrive[ch] = arrive[r] + a + full/rates[i]
			arriveS[ch] = arriveS[r] + a + last/rates[i]
			reach, reachS = max(reach, arrive[ch]), max(reachS, arriveS[ch])
			pace, hopS = max(pace, a+full/rates[i]), max(hopS, a+last/rates[i])
			stack = append(stack, ch)
		}
	}
	if s == 1 {
		return reachS
	}
	return max(float64(s-1)*pace+reachS, float64(s-2)*pace+reach+hopS)
}

// waterFill shares capacity among flows capped at caps max-min fairly and
// returns their rates in rates' storage.
func waterFill(capacity float64, caps, rates []float64) []float64 {
	rates = append(rates[:0], caps...)
	if len(caps) == 1 {
		rates[0] = min(caps[0], capacity)
		return rates
	}
	order := make([]int, len(caps))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(caps[a], caps[b]) })
	left := capacity
	for k, i := range order {
		share := left / float64(len(order)-k)
		if caps[i] <= share {
			left -= caps[i]
			continue
		}
		for _, j := range order[k:] {
			rates[j] = share
		}
		break
	}
	return rates
}

// bestSegment returns the segment, in elements of es bytes, that minimises
// treeTime for t under m, searched over powers of √2 up to the count: the
// chain's optimum, which for one class of link is near the
// C* = √(M·α·β/(n−2)) of Xin, Xie and Li (Computer Systems & Applications
// 2020).
func bestSegment(p sched.Params, t bcastTree, es int, m cost.Model) int {
	best, bestT := max(1, p.Count), treeTime(p, t, es, p.Count, m)
	for x := 1.0; x < float64(p.Count); x *= math.Sqrt2 {
		seg := int(x)
		if tt := treeTime(p, t, es, seg, m); tt < bestT {
			best, bestT = seg, tt
		}
	}
	return best
}

// localOrder returns group's ranks starting with first (which must be in
// group, or −1 for none), then the rest of first's NUMA node, then the
// other NUMA nodes in ascending order, ranks in rank order within each: an
// order that crosses each NUMA boundary once.
func localOrder(l *sched.Layout, group []int, first int) []int {
	out := make([]int, 0, len(group))
	start := 0
	if first >= 0 {
		out, start = append(out, first), 1
	}
	for _, r := range group {
		if r != first {
			out = append(out, r)
		}
	}
	rest := out[start:]
	key := func(r int) int {
		if first >= 0 && l.NUMAOf(r) == l.NUMAOf(first) {
			return -1
		}
		return l.NUMAOf(r)
	}
	slices.SortStableFunc(rest, func(a, b int) int { return key(a) - key(b) })
	return out
}
