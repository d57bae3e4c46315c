package algo

import "github.com/braid-ccl/braid/sched"

// The host phases of the leader-based allreduce through aggregation
// daemons ("Designing In-network Computing Aware Reduction Collectives in
// MPI", Ramesh et al., HotI 2023, §IV): within each host, local rank i
// reduces chunk i of every local rank by single copy (a direct
// reduce-scatter, as hier's first phase); the owners of chunk i, one per
// host, sum it through the daemons (package agg, run by the root package
// between the two programs); then each owner sends its chunk to the other
// local ranks (a direct allgather, as hier's last phase). The chunks and
// their owners are hier's: K chunks, K the most ranks on one host, chunk i
// owned by local rank i mod L on a host of L ranks.

// AggChunk is a chunk that a rank owns: elements [Off, Off+Len) of the
// vector, summed with its owners on the other hosts, Hosts in all, of which
// this rank's host is Host.
type AggChunk struct {
	Index       int
	Off, Len    int
	Host, Hosts int
}

// AggOwned returns the chunks rank r owns under p's layout.
func AggOwned(p sched.Params, r int) []AggChunk {
	groups := p.Layout.Groups(p.NRanks)
	k := maxLen(groups)
	h := hostIndex(groups, r)
	var out []AggChunk
	for i := range k {
		if groups[h][i%len(groups[h])] != r {
			continue
		}
		lo, hi := blockOff(p.Count, k, i), blockOff(p.Count, k, i+1)
		out = append(out, AggChunk{Index: i, Off: lo, Len: hi - lo, Host: h, Hosts: len(groups)})
	}
	return out
}

// AggChunks returns K, the number of chunks under p's layout.
func AggChunks(p sched.Params) int { return maxLen(p.Layout.Groups(p.NRanks)) }

// AggPrograms returns rank r's two host programs: rs leaves, in Out, the
// host's sum of every chunk the rank owns (chunks it does not own are left
// as they were); ag copies every owner's chunk of Out to the other ranks of
// its host. On a host of one rank rs copies In to Out and ag does nothing.
func AggPrograms(p sched.Params, r int) (rs, ag sched.Program) {
	groups := p.Layout.Groups(p.NRanks)
	k := maxLen(groups)
	h := hostIndex(groups, r)
	grp := groups[h]
	parts := make([]part, k)
	for i := range parts {
		parts[i] = part{owner: grp[i%len(grp)], src: blocks(sched.In, p.Count, k, i, i+1), dst: blocks(sched.Out, p.Count, k, i, i+1)}
	}
	g := newGen(p, r)
	directReduceScatter(g, grp, r, parts, p.Segment, 0)
	rs = g.program()
	for i := range parts {
		parts[i].src = parts[i].dst
	}
	g = newGen(p, r)
	if len(grp) > 1 {
		directAllgather(g, grp, r, parts, 0)
	}
	ag = g.program()
	return rs, ag
}

func hostIndex(groups [][]int, r int) int {
	for h, g := range groups {
		for _, q := range g {
			if q == r {
				return h
			}
		}
	}
	return -1
}
