package sched

import "sort"

// memModel places a rank's chunks in memory, either with In and Out apart or
// with them aliased as an in-place call of the collective defines.
type memModel struct {
	aliased bool
	inner   Buf // the buffer that lies inside the other when aliased
	off     int // where it starts there
}

// memModels returns the placements a program of rank must be correct under.
func memModels(p Params, rank int) []memModel {
	ms := []memModel{{}}
	if inner, off, ok := p.InPlaceAlias(rank); ok {
		ms = append(ms, memModel{aliased: true, inner: inner, off: off})
	}
	return ms
}

// place returns the memory region (named by the buffer that owns it) and the
// offset in it of chunk c.
func (m memModel) place(c Chunk) (Buf, int) {
	if m.aliased && c.Buf == m.inner {
		if m.inner == In {
			return Out, c.Off + m.off
		}
		return In, c.Off + m.off
	}
	return c.Buf, c.Off
}

func (m memModel) suffix() string {
	if m.aliased {
		return " when the call is in place"
	}
	return ""
}

// access is one range of memory that a step reads or writes.
type access struct {
	region Buf
	lo, hi int
	write  bool
}

// accesses returns the memory step s touches under m. Zero-length chunks
// touch nothing, and neither does a Copy whose source and destination are the
// same memory (the executor skips it).
func (m memModel) accesses(s *Step, buf []access) []access {
	buf = buf[:0]
	add := func(c Chunk, write bool) {
		if c.Len > 0 {
			r, lo := m.place(c)
			buf = append(buf, access{region: r, lo: lo, hi: lo + c.Len, write: write})
		}
	}
	switch s.Kind {
	case KindSend:
		add(s.Src, false)
	case KindRecv, KindRecvReduce:
		add(s.Dst, true)
	case KindCopy, KindReduce:
		rs, ls := m.place(s.Src)
		rd, ld := m.place(s.Dst)
		if s.Kind == KindCopy && rs == rd && ls == ld {
			break
		}
		add(s.Src, false)
		add(s.Dst, true)
	}
	return buf
}

// memSeg is a range of memory that the same steps touched last: the range
// runs from lo to the next segment's lo.
type memSeg struct {
	lo int
	w  int32   // the last step that wrote it, or -1
	rs []int32 // the steps that read it since
}

// segMap tracks, for every element of one region, the last writer and the
// readers since. Its segments are sorted by lo and cover [0, ∞).
type segMap struct{ segs []memSeg }

func newSegMap() *segMap { return &segMap{segs: []memSeg{{lo: 0, w: -1}}} }

// find returns the index of the segment holding element x.
func (m *segMap) find(x int) int {
	return sort.Search(len(m.segs), func(i int) bool { return m.segs[i].lo > x }) - 1
}

// split makes a segment start at x and returns its index.
func (m *segMap) split(x int) int {
	i := m.find(x)
	if m.segs[i].lo == x {
		return i
	}
	s := m.segs[i]
	n := memSeg{lo: x, w: s.w, rs: append([]int32(nil), s.rs...)}
	m.segs = append(m.segs, memSeg{})
	copy(m.segs[i+2:], m.segs[i+1:])
	m.segs[i+1] = n
	return i + 1
}

// visit calls f for every segment overlapping [lo, hi).
func (m *segMap) visit(lo, hi int, f func(*memSeg)) {
	for i := m.find(lo); i < len(m.segs) && m.segs[i].lo < hi; i++ {
		f(&m.segs[i])
	}
}

// record notes that step reads or writes [lo, hi).
func (m *segMap) record(lo, hi int, step int32, write bool) {
	i, j := m.split(lo), m.split(hi)
	for ; i < j; i++ {
		s := &m.segs[i]
		if write {
			s.w, s.rs = step, s.rs[:0]
		} else {
			s.rs = append(s.rs, step)
		}
	}
}

// checkHazards reports every step that touches memory an earlier step wrote,
// or writes memory an earlier step read, without depending on that step. It
// checks only against the last writer and the readers since, which is enough:
// those were themselves checked against everything before them.
//
// With In and Out apart (where Out and Tmp start undefined), it also reports
// reads of Out or Tmp before any write, and elements of Out[0:outLen] that no
// step writes.
func checkHazards(l *errList, prog Program, m memModel, outLen int) {
	regions := [3]*segMap{newSegMap(), newSegMap(), newSegMap()}
	reach := newReacher(prog.Steps)
	var buf []access
	for i := range prog.Steps {
		s := &prog.Steps[i]
		buf = m.accesses(s, buf)
		bad := false
		if !m.aliased {
			bad = checkDefined(l, prog.Rank, i, s, regions)
		}
		for _, a := range buf {
			regions[a.region].visit(a.lo, a.hi, func(seg *memSeg) {
				if bad {
					return
				}
				if seg.w >= 0 && !reach.dependsOn(int32(i), seg.w) {
					bad = true
					l.stepf(prog.Rank, i, s, "%s %v[%d:%d] that step %d (%v) writes, without depending on it%s",
						verb(a.write), a.region, a.lo, a.hi, seg.w, prog.Steps[seg.w], m.suffix())
					return
				}
				if !a.write {
					return
				}
				for _, rd := range seg.rs {
					if rd != int32(i) && !reach.dependsOn(int32(i), rd) {
						bad = true
						l.stepf(prog.Rank, i, s, "writes %v[%d:%d] that step %d (%v) reads, without depending on it%s",
							a.region, a.lo, a.hi, rd, prog.Steps[rd], m.suffix())
						return
					}
				}
			})
		}
		for _, a := range buf {
			if !a.write {
				regions[a.region].record(a.lo, a.hi, int32(i), false)
			}
		}
		for _, a := range buf {
			if a.write {
				regions[a.region].record(a.lo, a.hi, int32(i), true)
			}
		}
	}
	if m.aliased {
		return
	}
	segs := regions[Out].segs
	for i, seg := range segs {
		if seg.lo >= outLen {
			break
		}
		if seg.w < 0 {
			end := outLen
			if i+1 < len(segs) {
				end = min(end, segs[i+1].lo)
			}
			l.progf(prog.Rank, "no step writes out[%d:%d]", seg.lo, end)
			break
		}
	}
}

// checkDefined reports whether step i (s) reads memory of Out or Tmp that no
// step has written yet, and reports that to l, with In and Out apart.
// A RecvReduce or Reduce reads its destination too.
func checkDefined(l *errList, rank, i int, s *Step, regions [3]*segMap) bool {
	var reads []Chunk
	switch s.Kind {
	case KindSend:
		reads = []Chunk{s.Src}
	case KindCopy:
		reads = []Chunk{s.Src}
	case KindReduce:
		reads = []Chunk{s.Src, s.Dst}
	case KindRecvReduce:
		reads = []Chunk{s.Dst}
	}
	for _, c := range reads {
		if c.Buf == In || c.Len == 0 {
			continue
		}
		undefined := false
		regions[c.Buf].visit(c.Off, c.End(), func(seg *memSeg) { undefined = undefined || seg.w < 0 })
		if undefined {
			l.stepf(rank, i, s, "reads %v before any step writes it", c)
			return true
		}
	}
	return false
}

func verb(write bool) string {
	if write {
		return "writes"
	}
	return "reads"
}

// reacher answers whether one step depends on another through Deps.
type reacher struct {
	steps []Step
	seen  []uint32
	stamp uint32
	stack []int32
}

func newReacher(steps []Step) *reacher {
	return &reacher{steps: steps, seen: make([]uint32, len(steps))}
}

// dependsOn reports whether step from depends on step to (to < from),
// directly or through a chain of Deps.
func (r *reacher) dependsOn(from, to int32) bool {
	for _, d := range r.steps[from].Deps {
		if d == to {
			return true
		}
	}
	r.stamp++
	r.stack = append(r.stack[:0], from)
	for len(r.stack) > 0 {
		x := r.stack[len(r.stack)-1]
		r.stack = r.stack[:len(r.stack)-1]
		for _, d := range r.steps[x].Deps {
			if d == to {
				return true
			}
			if d > to && r.seen[d] != r.stamp {
				r.seen[d] = r.stamp
				r.stack = append(r.stack, d)
			}
		}
	}
	return false
}
