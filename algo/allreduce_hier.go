package algo

import (
	"fmt"
	"math"
	"slices"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(hierAllreduce{base{"hier", sched.Allreduce}}) }

// hierAllreduce is the three-phase hierarchical allreduce (Alizadeh et al.,
// EuroMPI/USA 2022, §5.3, Hierarchical-RSA) in the form of Ramesh et al.
// (HotI 2023), where every rank of a host takes part in the reduction
// instead of one leader doing it all:
//
//  1. Within each host, a direct reduce-scatter: the vector is cut into K
//     chunks, K the largest number of ranks on one host; chunk k belongs to
//     local rank k mod L on a host of L ranks, which receives chunk k of
//     every other local rank (single copy over shared memory for large
//     segments) and adds them in rank order.
//  2. Across hosts, for each chunk k, the owners of chunk k (one per host)
//     allreduce it with a ring or with Rabenseifner's algorithm, whichever
//     the model predicts faster (hierInterRing); a rank that owns several
//     chunks runs their allreduces in lockstep.
//  3. Within each host, a direct allgather: each owner sends its chunks to
//     the other local ranks.
//
// The simpler leader form (reduce to one leader per host, allreduce among
// leaders, broadcast from the leader) moves (L−1)·M bytes into the leader
// and makes it add (L−1)·M bytes, then sends (L−1)·M out again; here each
// rank moves and adds (L−1)·M/L, and the K chunk allreduces run side by
// side. For counts below K most chunks are empty and the schedule becomes
// the leader form (local rank 0 owns the one non-empty chunk), which is
// also the better one for such sizes. Hosts of different sizes are handled
// by the "mod L" ownership: a host with fewer ranks gives some ranks
// several chunks. Every sum is made by one rank and copied to the others,
// so every rank gets the same bits.
//
// Cost, for M bytes on H hosts, host h with L_h ranks; K = max L_h chunks
// of B = M/K bytes; c_h = ⌈K/L_h⌉ the most chunks a rank of host h owns;
// s the segments of a chunk (Params.Segment, default DirectSegment):
//
//	T = max_h [c + r + (c_h·s − 1)·max(c, r)]    reduce-scatter, u = c_h·s rounds:
//	      c = α_h + W_rs/u, r = c_h(L_h−1)·B·γ/u
//	  + J·A·α_n + V·M/β_n + c_max·R·B·γ          inter-host, c_max = max c_h
//	  + α_h + W_ag                               allgather
//
// W_rs and W_ag are the transfer times of the phases' messages, sent at
// once: the largest of a rank's bytes through its port at the model's best
// bandwidth β_p, of a pair's bytes over its link and of a host's bytes over
// its network link (exchangeTime, which also lets the messages of faster
// links start before the slower ones'); on hosts of L ranks in one NUMA
// node, W = (L−1)·B/β_intra. A round's reduction overlaps the next round's
// transfer. J is the most chunks whose owners on two hosts are the same
// two ranks (1 when every host has K ranks): their messages share one
// connection and pay α one after another. For the inter-host ring
// A = 2(H−1), V = 2(H−1)/H, R = (H−1)/H; for Rabenseifner (p2 the largest
// power of two ≤ H, e = 1 if H ≠ p2 else 0) A = 2·log2(p2) + 2e,
// V = 2(p2−1)/p2 + 2e, R = (p2−1)/p2 + e. The inter-host bandwidth term
// counts all M bytes because a host's K chunk allreduces share its network
// link. With hosts of L ranks, one segment and no NUMA boundary:
//
//	T = 2α + 2(L−1)·M/(Lβ) + (L−1)·M/L·γ + 2(H−1)α_n + 2(H−1)/H·M/β_n + (H−1)/H·M/L·γ
//
// against the leader form's 2α + 2(L−1)·M/β + (L−1)·M·γ + the same
// inter-host terms with M/L·γ → M·γ. Counts below K leave chunks empty;
// the formula then counts only the chunks that are not.
type hierAllreduce struct{ base }

func (a hierAllreduce) Supports(p sched.Params) error {
	if err := a.base.Supports(p); err != nil {
		return err
	}
	groups := p.Layout.Groups(p.NRanks)
	if t := hierTags(groups); t > math.MaxInt32/2 {
		return fmt.Errorf("algo: allreduce %q: %d hosts of up to %d ranks need %d tags, more than tags can number", a.name, len(groups), maxLen(groups), t)
	}
	return nil
}

func (hierAllreduce) Program(p sched.Params, r int) sched.Program {
	groups := p.Layout.Groups(p.NRanks)
	return rsagProgram(p, r, groups, maxLen(groups))
}

func (hierAllreduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	groups := p.Layout.Groups(p.NRanks)
	return rsagCost(p, es, m, groups, maxLen(groups))
}

// maxLen returns the length of the longest list.
func maxLen(groups [][]int) int {
	k := 0
	for _, g := range groups {
		k = max(k, len(g))
	}
	return k
}

// hierTags bounds the tags rsagProgram uses with chunks K = maxLen(groups).
func hierTags(groups [][]int) int {
	h, k := len(groups), maxLen(groups)
	return maxDirectTags + k*hierStride(h) + k
}

// hierStride is the tags one chunk's inter-host allreduce may use.
func hierStride(hosts int) int { return max(ringAllreduceTags(hosts), rabenseifnerTags(hosts)) }

// rsagProgram is rank r's program of an allreduce made of a direct
// reduce-scatter within each group of ranks (a host), an allreduce of each
// chunk among its owners on every group, and a direct allgather within each
// group; see hierAllreduce. The count is cut into k chunks, chunk i owned by
// the group's member i mod (group size). "direct" is one group of every
// rank with k = NRanks, "twostep" one group with k = 1.
func rsagProgram(p sched.Params, r int, groups [][]int, k int) sched.Program {
	g := newGen(p, r)
	c := p.Count
	if p.NRanks == 1 {
		g.copy(whole(sched.In, c), whole(sched.Out, c))
		return g.program()
	}
	h := 0
	for h < len(groups) && !slices.Contains(groups[h], r) {
		h++
	}
	grp := groups[h]
	owner := func(h, i int) int { return groups[h][i%len(groups[h])] }
	chunk := func(buf sched.Buf, i int) sched.Chunk { return blocks(buf, c, k, i, i+1) }
	parts := make([]part, k)
	for i := range parts {
		parts[i] = part{owner: owner(h, i), src: chunk(sched.In, i), dst: chunk(sched.Out, i)}
	}
	tag := directReduceScatter(g, grp, r, parts, p.Segment, 0)
	if hosts := len(groups); hosts > 1 {
		stride := hierStride(hosts)
		var jobs []groupJob
		for i, pt := range parts {
			if pt.owner != r {
				continue
			}
			owners := make([]int, hosts)
			for j := range owners {
				owners[j] = owner(j, i)
			}
			jobs = append(jobs, groupJob{group: owners, acc: pt.dst, tag: tag + i*stride})
		}
		if hierInterRing(p.Count, groups, k) {
			ringAllreduceGroups(g, r, jobs)
		} else {
			rabenseifnerGroups(g, r, jobs)
		}
		tag += k * stride
	}
	for i := range parts {
		parts[i].src = parts[i].dst
	}
	directAllgather(g, grp, r, parts, tag)
	return g.program()
}

// hierInterRing reports whether rsagProgram's inter-group allreduces use the
// ring (else Rabenseifner's algorithm): the one interCost predicts faster
// under cost.Default for float32 elements. Program has neither the
// element size nor the planner's model, so it decides with these, and
// Cost follows the same choice.
func hierInterRing(count int, groups [][]int, k int) bool {
	const es = 4
	m := cost.Default()
	sh := newHierShape(groups, min(k, count))
	mb := float64(count * es)
	b := float64(blockOff(count, k, 1) * es)
	return interCost(m, len(groups), sh, b, mb, true) <= interCost(m, len(groups), sh, b, mb, false)
}

// hierShape is how the non-empty chunks of rsagProgram fall on the ranks.
type hierShape struct {
	chunks int // the most chunks one rank owns: ⌈k/L⌉ for the smallest group
	shared int // the most chunks whose owners on two given hosts are the same two ranks
}

// newHierShape returns the shape of k chunks on groups. Chunk i's owners
// on hosts of L and L' ranks are the same two ranks for every i' ≡ i
// modulo lcm(L, L'), so shared is the largest ⌈k/lcm(L, L')⌉ over pairs of
// hosts (of distinct sizes, or two of one size).
func newHierShape(groups [][]int, k int) hierShape {
	sh := hierShape{chunks: 1, shared: 1}
	sizes := map[int]int{}
	for _, g := range groups {
		sh.chunks = max(sh.chunks, (k+len(g)-1)/len(g))
		sizes[len(g)]++
	}
	for a, na := range sizes {
		for b := range sizes {
			if a == b && na < 2 {
				continue
			}
			l := a / gcd(a, b) * b
			sh.shared = max(sh.shared, (k+l-1)/l)
		}
	}
	return sh
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// interCost is the inter-host phase of rsagCost: each rank runs up to
// sh.chunks allreduces of b bytes among the hosts in lockstep, so that
// their latencies overlap except where two of them join the same two ranks
// (sh.shared: their messages go one after another, each paying α) and
// their additions add up, while the hosts' network links carry every
// chunk's traffic, mb bytes in all.
func interCost(m cost.Model, hosts int, sh hierShape, b, mb float64, ring bool) float64 {
	if hosts < 2 {
		return 0
	}
	h := float64(hosts)
	var a, v, red float64
	if ring {
		a, v, red = 2*(h-1), 2*(h-1)/h, (h-1)/h
	} else {
		p2, log := pow2Below(hosts)
		q := float64(p2)
		a, v, red = 2*float64(log), 2*(q-1)/q, (q-1)/q
		if p2 != hosts {
			a, v, red = a+2, v+2, red+1
		}
	}
	l := m.Links[cost.Inter]
	return float64(sh.shared)*a*l.Alpha + v*mb/l.Beta + float64(sh.chunks)*red*b*m.Gamma
}

// flow is a message of a round: bytes from rank from to rank to.
type flow struct {
	from, to int
	bytes    float64
}

// exchangeTime returns the time of one round of messages sent at once,
// each of bytes·scale: the messages of each link pay its latency α, then
// share the bottlenecks: a rank's port, for what it sends and what it
// receives, at the model's best bandwidth (one memory system, one
// adapter); each pair's link; and each host's network link, which all its
// ranks share. It is the largest, over the latencies a of the links used,
// of a plus the busiest bottleneck's time for the bytes of the messages
// whose α ≥ a: the bottlenecks of sim's network of cost.Model with
// RankPorts and SharedNIC.
func exchangeTime(p sched.Params, m cost.Model, flows []flow, scale float64) float64 {
	t := 0.0
	for _, l := range exchangeRound(p, m, flows, scale) {
		t = max(t, l.alpha+l.w)
	}
	return t + float64(max(fanOut(p.NRanks, flows)-1, 0))*m.Overhead
}

// fanOut returns the most messages one rank sends or receives in flows.
func fanOut(n int, flows []flow) int {
	out, in := make([]int, n), make([]int, n)
	most := 0
	for _, f := range flows {
		out[f.from]++
		in[f.to]++
		most = max(most, out[f.from], in[f.to])
	}
	return most
}

// exchangeRound returns, for every latency α of a link class the round
// uses, α and the busiest bottleneck's time for the bytes (each flow's
// times scale) of the messages whose α' ≥ α; exchangeTime is the largest
// sum, and exchangeLines the same lines per byte.
func exchangeRound(p sched.Params, m cost.Model, flows []flow, scale float64) lines {
	n, hosts := p.NRanks, p.Layout.NHosts()
	port := 0.0
	for _, l := range m.Links {
		port = max(port, l.Beta)
	}
	inter := m.Links[cost.Inter].Beta
	out, in := make([]float64, n), make([]float64, n)
	nicOut, nicIn := make([]float64, hosts), make([]float64, hosts)
	var ls lines
	for _, a := range m.Links {
		clear(out)
		clear(in)
		clear(nicOut)
		clear(nicIn)
		w, used := 0.0, false
		for _, f := range flows {
			l := m.Between(p.Layout, f.from, f.to)
			if l.Alpha < a.Alpha {
				continue
			}
			used = true
			b := f.bytes * scale
			w = max(w, b/l.Beta)
			out[f.from] += b
			in[f.to] += b
			if hf, ht := p.Layout.HostOf(f.from), p.Layout.HostOf(f.to); hf != ht {
				nicOut[hf] += b
				nicIn[ht] += b
			}
		}
		if !used {
			continue
		}
		for r := range n {
			w = max(w, out[r]/port, in[r]/port)
		}
		for h := range hosts {
			w = max(w, nicOut[h]/inter, nicIn[h]/inter)
		}
		ls = append(ls, line{a.Alpha, w})
	}
	return ls
}

// pipelined returns the time of u rounds that each move data for c seconds
// and then reduce it for r seconds on the receiving rank, where a round's
// data moves while the previous round's is reduced: c + r + (u−1)·max(c, r).
func pipelined(u int, c, r float64) float64 {
	if u == 0 {
		return 0
	}
	return c + r + float64(u-1)*max(c, r)
}

// pipelinedOn is pipelined where the ranks' transfers can overlap their
// reductions, and u·(c + r) where they take turns on the rank's thread
// (serial: cost.Model.Serial, as for the segmented rings).
func pipelinedOn(serial bool, u int, c, r float64) float64 {
	if serial {
		return float64(u) * (c + r)
	}
	return pipelined(u, c, r)
}

// onOneHost reports whether every group of ranks of layout l lies on one
// host: their exchanges go over shared memory.
func onOneHost(l *sched.Layout, groups [][]int) bool {
	for _, g := range groups {
		for _, r := range g[1:] {
			if l.HostOf(r) != l.HostOf(g[0]) {
				return false
			}
		}
	}
	return true
}

// rsagCost is the cost of rsagProgram; see hierAllreduce for the formula.
func rsagCost(p sched.Params, es int, m cost.Model, groups [][]int, k int) float64 {
	if p.NRanks == 1 || p.Count == 0 {
		return 0
	}
	kk := min(k, p.Count) // the chunks that are not empty
	chunkLen := blockOff(p.Count, k, 1)
	b := float64(chunkLen * es)
	_, s := directSegments(k, chunkLen, p.Segment)
	var rs, ag []flow
	rounds, red := 0, 0.0
	for _, g := range groups {
		lh := len(g)
		if lh < 2 {
			continue
		}
		for i := range kk {
			o := g[i%lh]
			for _, q := range g {
				if q != o {
					rs = append(rs, flow{q, o, b})
					ag = append(ag, flow{o, q, b})
				}
			}
		}
		ch := (kk + lh - 1) / lh
		rounds = max(rounds, ch*s)
		red = max(red, float64(ch*(lh-1))*b*m.Gamma)
	}
	t := 0.0
	if rounds > 0 {
		u := float64(rounds)
		serial := m.SelfCopy && onOneHost(p.Layout, groups)
		t = pipelinedOn(serial, rounds, exchangeTime(p, m, rs, 1/u), red/u) + exchangeTime(p, m, ag, 1)
	}
	mb := float64(p.Count * es)
	return t + interCost(m, len(groups), newHierShape(groups, kk), b, mb, hierInterRing(p.Count, groups, k))
}
