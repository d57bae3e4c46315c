package sched

import (
	"fmt"
	"strings"
)

// Collective names a collective operation.
type Collective uint8

// The collectives. Count conventions (Params.Count, always in elements):
//
//	Allreduce, Reduce, Bcast: Count is the length of the buffer on every rank.
//	Allgather, Gather:        Count is each rank's contribution; Out holds NRanks*Count.
//	ReduceScatter:            Count is each rank's result; In holds NRanks*Count.
//	Scatter:                  Count is each rank's result; the root's In holds NRanks*Count.
//	Alltoall:                 Count is one block; In and Out hold NRanks*Count.
//	Barrier:                  Count is 0.
const (
	InvalidCollective Collective = iota
	Allreduce
	Reduce
	Bcast
	Allgather
	ReduceScatter
	Gather
	Scatter
	Alltoall
	Barrier
	numCollectives
)

var collNames = [...]string{"invalid", "allreduce", "reduce", "bcast", "allgather", "reducescatter", "gather", "scatter", "alltoall", "barrier"}

// Collectives lists every valid Collective.
func Collectives() []Collective {
	var out []Collective
	for c := Allreduce; c < numCollectives; c++ {
		out = append(out, c)
	}
	return out
}

// String returns the lower-case name ("allreduce").
func (c Collective) String() string {
	if c < numCollectives {
		return collNames[c]
	}
	return fmt.Sprintf("collective(%d)", uint8(c))
}

// ParseCollective returns the collective named s; it accepts "broadcast" and
// "reduce_scatter" / "reduce-scatter" as well.
func ParseCollective(s string) (Collective, error) {
	s = strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(strings.TrimSpace(s)))
	if s == "broadcast" {
		return Bcast, nil
	}
	for c := Allreduce; c < numCollectives; c++ {
		if collNames[c] == s {
			return c, nil
		}
	}
	return InvalidCollective, fmt.Errorf("unknown collective %q (want one of %s)", s, strings.Join(collNames[1:], ", "))
}

// Rooted reports whether the collective has a root rank.
func (c Collective) Rooted() bool { return c == Reduce || c == Bcast || c == Gather || c == Scatter }

// Reduces reports whether the collective combines values with an Op.
func (c Collective) Reduces() bool { return c == Allreduce || c == Reduce || c == ReduceScatter }

// Params describes one instance of a collective, identical on every rank.
//
// Segment, Radix and Layout are tuning knobs and facts that only some
// algorithms use; generators that do not need them ignore them.
//
// Segment is the most elements one message of a pipelined algorithm
// (algo's "segring", "chain") carries, so that the next segment is in
// flight while the previous one is reduced or forwarded. 0 lets the
// algorithm choose.
//
// Radix is the degree k of k-nomial trees; 0 lets the algorithm choose.
//
// Layout says where the ranks run, for hierarchical and topology-aware
// algorithms; nil means every rank on one host and one NUMA node.
//
// Trees is the weighted spanning trees the tree-packing algorithms (algo's
// "treepack") split the data among; nil for every other algorithm.
type Params struct {
	Coll    Collective
	NRanks  int
	Count   int // elements; see the Collective constants for what it counts
	Root    int // for rooted collectives
	Segment int // elements per message for pipelined algorithms; 0 lets the algorithm choose
	Radix   int // tree degree for k-nomial algorithms; 0 lets the algorithm choose
	Layout  *Layout
	Trees   *Trees // spanning trees for tree-packing algorithms; nil for the others
}

// Layout is where each rank of a communicator runs. It is shared and must
// not be modified once a Params refers to it.
type Layout struct {
	// Host[r] numbers rank r's host, 0 to NHosts()-1, in order of first
	// appearance among the ranks.
	Host []int
	// NUMA[r] numbers rank r's NUMA node (socket) on its host; ranks of
	// different hosts may share a number. Nil means one NUMA node per host.
	NUMA []int
}

// NewLayout returns the layout of ranks whose hosts are named hosts[r] and
// NUMA nodes numa[r] (nil if unknown). Host numbers follow the order of
// first appearance.
func NewLayout(hosts []string, numa []int) *Layout {
	l := &Layout{Host: make([]int, len(hosts))}
	ids := map[string]int{}
	for r, h := range hosts {
		id, ok := ids[h]
		if !ok {
			id = len(ids)
			ids[h] = id
		}
		l.Host[r] = id
	}
	if numa != nil {
		l.NUMA = append([]int(nil), numa...)
	}
	return l
}

// NHosts returns the number of distinct hosts; a nil layout has one.
func (l *Layout) NHosts() int {
	if l == nil {
		return 1
	}
	m := 0
	for _, h := range l.Host {
		m = max(m, h+1)
	}
	return m
}

// HostOf returns rank r's host number; 0 for a nil layout.
func (l *Layout) HostOf(r int) int {
	if l == nil {
		return 0
	}
	return l.Host[r]
}

// NUMAOf returns rank r's NUMA node number; 0 when unknown.
func (l *Layout) NUMAOf(r int) int {
	if l == nil || l.NUMA == nil {
		return 0
	}
	return l.NUMA[r]
}

// Groups returns the ranks of each host, in host order, each list in rank
// order. A nil layout on n ranks gives one group of all n.
func (l *Layout) Groups(n int) [][]int {
	g := make([][]int, l.NHosts())
	for r := range n {
		h := l.HostOf(r)
		g[h] = append(g[h], r)
	}
	return g
}

// Check returns an error unless l describes n ranks with host numbers
// 0..NHosts()-1 in order of first appearance.
func (l *Layout) Check(n int) error {
	if l == nil {
		return nil
	}
	if len(l.Host) != n {
		return fmt.Errorf("sched: layout of %d ranks for %d ranks", len(l.Host), n)
	}
	if l.NUMA != nil && len(l.NUMA) != n {
		return fmt.Errorf("sched: layout has %d NUMA entries for %d ranks", len(l.NUMA), n)
	}
	next := 0
	for r, h := range l.Host {
		switch {
		case h == next:
			next++
		case h < 0 || h > next:
			return fmt.Errorf("sched: layout gives rank %d host %d; hosts must be numbered in order of first appearance", r, h)
		}
	}
	for r, u := range l.NUMA {
		if u < 0 {
			return fmt.Errorf("sched: layout gives rank %d NUMA node %d", r, u)
		}
	}
	return nil
}

// InLen returns the number of elements of rank's input buffer.
func (p Params) InLen(rank int) int {
	switch p.Coll {
	case ReduceScatter, Alltoall:
		return p.NRanks * p.Count
	case Scatter:
		if rank == p.Root {
			return p.NRanks * p.Count
		}
		return 0
	case Bcast:
		if rank == p.Root {
			return p.Count
		}
		return 0
	case Barrier:
		return 0
	}
	return p.Count
}

// OutLen returns the number of elements of rank's output buffer.
func (p Params) OutLen(rank int) int {
	switch p.Coll {
	case Allgather, Alltoall:
		return p.NRanks * p.Count
	case Gather:
		if rank == p.Root {
			return p.NRanks * p.Count
		}
		return 0
	case Reduce:
		if rank == p.Root {
			return p.Count
		}
		return 0
	case Barrier:
		return 0
	}
	return p.Count
}

// Buf names one of a rank's buffers.
type Buf uint8

// The buffers a program can address. In and Out are the caller's; Tmp is
// scratch of Program.TmpLen elements that the executor provides. In and Out
// may alias (in-place calls): see Program.
const (
	In Buf = iota
	Out
	Tmp
)

func (b Buf) String() string {
	switch b {
	case In:
		return "in"
	case Out:
		return "out"
	case Tmp:
		return "tmp"
	}
	return fmt.Sprintf("buf(%d)", uint8(b))
}

// Chunk is a range of elements of one buffer.
type Chunk struct {
	Buf Buf
	Off int // elements
	Len int // elements
}

func (c Chunk) String() string { return fmt.Sprintf("%s[%d:%d]", c.Buf, c.Off, c.Off+c.Len) }

// End returns Off+Len.
func (c Chunk) End() int { return c.Off + c.Len }

// Kind is what a step does.
type Kind uint8

// The step kinds. A Send's data is Src; a Recv writes Dst; a RecvReduce
// combines the incoming data into Dst (Dst = Dst op incoming); Copy writes Src
// to Dst; Reduce combines Src into Dst (Dst = Dst op Src).
const (
	KindSend Kind = iota + 1
	KindRecv
	KindRecvReduce
	KindCopy
	KindReduce
)

var kindNames = [...]string{"?", "send", "recv", "recvreduce", "copy", "reduce"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Step is one operation of a rank's program.
//
// A Send on rank a with Peer b and Tag t is matched by exactly one Recv or
// RecvReduce on rank b with Peer a and the same Tag; the two chunks have the
// same Len. Tags are unique per (sender, receiver) pair within a schedule.
//
// Deps lists indices of earlier steps of the same program that must have
// completed before this step starts. The executor issues steps in program
// order and lets sends and receives complete out of order, so a step that
// reads or writes memory touched by an earlier step must name it (directly or
// through a chain of Deps).
type Step struct {
	Kind    Kind
	Peer    int   // Send, Recv, RecvReduce: the peer's rank in the communicator
	Tag     int32 // Send, Recv, RecvReduce: the message tag within the schedule
	Src     Chunk // Send, Copy, Reduce
	Dst     Chunk // Recv, RecvReduce, Copy, Reduce
	Channel uint8 // which of the transport's channels to use; 0 when in doubt
	Deps    []int32
}

// Len returns the number of elements the step moves or combines.
func (s *Step) Len() int {
	if s.Kind == KindSend {
		return s.Src.Len
	}
	return s.Dst.Len
}

func (s Step) String() string {
	var b strings.Builder
	switch s.Kind {
	case KindSend:
		fmt.Fprintf(&b, "send %v -> r%d tag %d", s.Src, s.Peer, s.Tag)
	case KindRecv, KindRecvReduce:
		fmt.Fprintf(&b, "%s r%d tag %d -> %v", s.Kind, s.Peer, s.Tag, s.Dst)
	default:
		fmt.Fprintf(&b, "%s %v -> %v", s.Kind, s.Src, s.Dst)
	}
	if s.Channel != 0 {
		fmt.Fprintf(&b, " ch%d", s.Channel)
	}
	if len(s.Deps) > 0 {
		fmt.Fprintf(&b, " after %v", s.Deps)
	}
	return b.String()
}

// Program is one rank's part of a schedule.
//
// A program must give the collective's result whether or not In and Out
// alias in the way the collective's in-place call defines (see the package
// documentation): the usual way is to copy In to Out first (the executor skips
// a Copy whose source and destination are the same memory) and to work on Out
// and Tmp afterwards.
type Program struct {
	Rank   int
	Steps  []Step
	TmpLen int // elements of scratch the program needs

	// Final lists the chunks of Out that hold reduced results when the
	// program ends; the executor divides them by NRanks for Op avg.
	Final []Chunk
}

func (p *Program) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d (tmp %d):\n", p.Rank, p.TmpLen)
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "  %3d %v\n", i, s)
	}
	return b.String()
}

// Builder helps generators append steps and track dependencies.
type Builder struct {
	P Program
}

// NewBuilder starts a program for rank.
func NewBuilder(rank int) *Builder { return &Builder{P: Program{Rank: rank}} }

// Add appends s and returns its index.
func (b *Builder) Add(s Step) int32 {
	b.P.Steps = append(b.P.Steps, s)
	return int32(len(b.P.Steps) - 1)
}

// Send appends a send of src to peer with tag after deps.
func (b *Builder) Send(peer int, tag int32, src Chunk, deps ...int32) int32 {
	return b.Add(Step{Kind: KindSend, Peer: peer, Tag: tag, Src: src, Deps: cleanDeps(deps)})
}

// Recv appends a receive from peer into dst after deps.
func (b *Builder) Recv(peer int, tag int32, dst Chunk, deps ...int32) int32 {
	return b.Add(Step{Kind: KindRecv, Peer: peer, Tag: tag, Dst: dst, Deps: cleanDeps(deps)})
}

// RecvReduce appends a receive from peer combined into dst after deps.
func (b *Builder) RecvReduce(peer int, tag int32, dst Chunk, deps ...int32) int32 {
	return b.Add(Step{Kind: KindRecvReduce, Peer: peer, Tag: tag, Dst: dst, Deps: cleanDeps(deps)})
}

// Copy appends a local copy after deps.
func (b *Builder) Copy(src, dst Chunk, deps ...int32) int32 {
	return b.Add(Step{Kind: KindCopy, Src: src, Dst: dst, Deps: cleanDeps(deps)})
}

// Reduce appends a local reduction dst = dst op src after deps.
func (b *Builder) Reduce(src, dst Chunk, deps ...int32) int32 {
	return b.Add(Step{Kind: KindReduce, Src: src, Dst: dst, Deps: cleanDeps(deps)})
}

// cleanDeps drops negative indices (a convenient "no dependency" marker) and
// returns nil for an empty list.
func cleanDeps(deps []int32) []int32 {
	var out []int32
	for _, d := range deps {
		if d >= 0 {
			out = append(out, d)
		}
	}
	return out
}

// None is a dependency index that Builder ignores.
const None int32 = -1
