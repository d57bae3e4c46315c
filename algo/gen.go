package algo

import (
	"slices"
	"sort"

	"github.com/braid-ccl/braid/sched"
)

// gen builds one rank's program and derives every step's Deps from the
// memory it touches: a step depends on the last step that wrote memory it
// reads or writes and, when it writes, on the steps that read that memory
// since. It does so both with In and Out apart and with them aliased as the
// collective's in-place call defines, so that one program is right for both.
// Steps on zero-length chunks are left out (both ends of a message compute
// the same length, so both leave it out).
type gen struct {
	p      sched.Params
	b      *sched.Builder
	models []*memTracker
	tmpLen int
	deps   []int32 // scratch
}

func newGen(p sched.Params, rank int) *gen {
	g := &gen{p: p, b: sched.NewBuilder(rank)}
	g.models = append(g.models, newMemTracker(sched.In, 0, false))
	if inner, off, ok := p.InPlaceAlias(rank); ok {
		g.models = append(g.models, newMemTracker(inner, off, true))
	}
	return g
}

func (g *gen) send(peer int, tag int, src sched.Chunk) int32 {
	return g.add(sched.Step{Kind: sched.KindSend, Peer: peer, Tag: int32(tag), Src: src})
}

func (g *gen) recv(peer int, tag int, dst sched.Chunk) int32 {
	return g.add(sched.Step{Kind: sched.KindRecv, Peer: peer, Tag: int32(tag), Dst: dst})
}

func (g *gen) recvReduce(peer int, tag int, dst sched.Chunk) int32 {
	return g.add(sched.Step{Kind: sched.KindRecvReduce, Peer: peer, Tag: int32(tag), Dst: dst})
}

func (g *gen) copy(src, dst sched.Chunk) int32 {
	return g.add(sched.Step{Kind: sched.KindCopy, Src: src, Dst: dst})
}

func (g *gen) reduce(src, dst sched.Chunk) int32 {
	return g.add(sched.Step{Kind: sched.KindReduce, Src: src, Dst: dst})
}

// add appends s with the dependencies its memory accesses need, unless it
// moves nothing; it returns the step's index or sched.None.
func (g *gen) add(s sched.Step) int32 {
	if s.Len() == 0 {
		return sched.None
	}
	for _, c := range []sched.Chunk{s.Src, s.Dst} {
		if c.Buf == sched.Tmp && c.End() > g.tmpLen {
			g.tmpLen = c.End()
		}
	}
	idx := int32(len(g.b.P.Steps))
	g.deps = g.deps[:0]
	for _, m := range g.models {
		g.deps = m.conflicts(&s, g.deps)
	}
	s.Deps = g.trim(g.deps)
	for _, m := range g.models {
		m.record(&s, idx)
	}
	return g.b.Add(s)
}

// trim sorts and deduplicates deps and drops those that another of them
// already names, so printed programs stay readable.
func (g *gen) trim(deps []int32) []int32 {
	if len(deps) == 0 {
		return nil
	}
	slices.Sort(deps)
	deps = slices.Compact(deps)
	var out []int32
	for _, d := range deps {
		implied := false
		for _, e := range deps {
			if e > d && slices.Contains(g.b.P.Steps[e].Deps, d) {
				implied = true
				break
			}
		}
		if !implied {
			out = append(out, d)
		}
	}
	return out
}

// program returns the program built, with TmpLen the scratch its steps use
// and, for reducing collectives, Final covering all of Out.
func (g *gen) program() sched.Program {
	prog := g.b.P
	prog.TmpLen = g.tmpLen
	if n := g.p.OutLen(prog.Rank); g.p.Coll.Reduces() && n > 0 {
		prog.Final = []sched.Chunk{{Buf: sched.Out, Len: n}}
	}
	return prog
}

// memTracker records, per element of memory, the last step that wrote it
// and the steps that read it since, under one placement of the buffers.
type memTracker struct {
	aliased bool
	inner   sched.Buf
	off     int
	regions [3][]seg
	scratch []access
}

type seg struct {
	lo int     // the segment runs to the next one's lo
	w  int32   // last writer or -1
	rs []int32 // readers since
}

type access struct {
	region sched.Buf
	lo, hi int
	write  bool
}

func newMemTracker(inner sched.Buf, off int, aliased bool) *memTracker {
	m := &memTracker{aliased: aliased, inner: inner, off: off}
	for i := range m.regions {
		m.regions[i] = []seg{{lo: 0, w: -1}}
	}
	return m
}

func (m *memTracker) place(c sched.Chunk) (sched.Buf, int) {
	if m.aliased && c.Buf == m.inner {
		if m.inner == sched.In {
			return sched.Out, c.Off + m.off
		}
		return sched.In, c.Off + m.off
	}
	return c.Buf, c.Off
}

// accesses lists what s touches; a Copy between the same memory touches
// nothing, as the executor skips it.
func (m *memTracker) accesses(s *sched.Step) []access {
	m.scratch = m.scratch[:0]
	add := func(c sched.Chunk, write bool) {
		if c.Len > 0 {
			r, lo := m.place(c)
			m.scratch = append(m.scratch, access{r, lo, lo + c.Len, write})
		}
	}
	switch s.Kind {
	case sched.KindSend:
		add(s.Src, false)
	case sched.KindRecv, sched.KindRecvReduce:
		add(s.Dst, true)
	case sched.KindCopy, sched.KindReduce:
		rs, ls := m.place(s.Src)
		rd, ld := m.place(s.Dst)
		if s.Kind == sched.KindCopy && rs == rd && ls == ld {
			break
		}
		add(s.Src, false)
		add(s.Dst, true)
	}
	return m.scratch
}

func find(segs []seg, x int) int {
	return sort.Search(len(segs), func(i int) bool { return segs[i].lo > x }) - 1
}

// conflicts appends to deps the steps s must wait for.
func (m *memTracker) conflicts(s *sched.Step, deps []int32) []int32 {
	for _, a := range m.accesses(s) {
		segs := m.regions[a.region]
		for i := find(segs, a.lo); i < len(segs) && segs[i].lo < a.hi; i++ {
			if segs[i].w >= 0 {
				deps = append(deps, segs[i].w)
			}
			if a.write {
				deps = append(deps, segs[i].rs...)
			}
		}
	}
	return deps
}

// record notes what step idx (which is s) touches: reads first, then
// writes, so that a step reading and writing the same memory ends as its
// last writer.
func (m *memTracker) record(s *sched.Step, idx int32) {
	acc := m.accesses(s)
	for _, write := range []bool{false, true} {
		for _, a := range acc {
			if a.write != write {
				continue
			}
			segs := m.regions[a.region]
			segs, i := split(segs, a.lo)
			segs, j := split(segs, a.hi)
			for ; i < j; i++ {
				if write {
					segs[i].w, segs[i].rs = idx, nil
				} else {
					segs[i].rs = append(segs[i].rs, idx)
				}
			}
			m.regions[a.region] = segs
		}
	}
}

// split makes a segment start at x and returns its index.
func split(segs []seg, x int) ([]seg, int) {
	i := find(segs, x)
	if segs[i].lo == x {
		return segs, i
	}
	n := seg{lo: x, w: segs[i].w, rs: slices.Clone(segs[i].rs)}
	return slices.Insert(segs, i+1, n), i + 1
}

// span returns the elements [off, off+n) of buf as a chunk.
func span(buf sched.Buf, off, n int) sched.Chunk { return sched.Chunk{Buf: buf, Off: off, Len: n} }

// whole returns the first n elements of buf.
func whole(buf sched.Buf, n int) sched.Chunk { return sched.Chunk{Buf: buf, Len: n} }

// blockOff returns where block i starts when count elements are split into
// parts blocks as evenly as possible (the first count%parts blocks have one
// more element); i may be parts, giving count.
func blockOff(count, parts, i int) int {
	q, rem := count/parts, count%parts
	return i*q + min(i, rem)
}

// blocks returns the elements of blocks [lo, hi) of buf split that way.
func blocks(buf sched.Buf, count, parts, lo, hi int) sched.Chunk {
	a, b := blockOff(count, parts, lo), blockOff(count, parts, hi)
	return span(buf, a, b-a)
}

// mod returns i mod n in [0, n).
func mod(i, n int) int { return ((i % n) + n) % n }

// pow2Below returns the largest power of two ≤ n (n ≥ 1) and its log.
func pow2Below(n int) (p2, log int) {
	for p2 = 1; 2*p2 <= n; p2 *= 2 {
		log++
	}
	return p2, log
}
