package sched

import (
	"errors"
	"fmt"
	"slices"
)

// CheckParams returns an error if p does not describe a valid call: a known
// collective, NRanks ≥ 1, Count ≥ 0 (0 for Barrier) and, for rooted
// collectives, 0 ≤ Root < NRanks.
func CheckParams(p Params) error {
	switch {
	case p.Coll == InvalidCollective || p.Coll >= numCollectives:
		return fmt.Errorf("sched: invalid collective %v", p.Coll)
	case p.NRanks < 1:
		return fmt.Errorf("sched: %v on %d ranks: need at least 1", p.Coll, p.NRanks)
	case p.Count < 0:
		return fmt.Errorf("sched: %v with count %d: count must not be negative", p.Coll, p.Count)
	case p.Coll == Barrier && p.Count != 0:
		return fmt.Errorf("sched: barrier with count %d: count must be 0", p.Count)
	case p.Coll.Rooted() && (p.Root < 0 || p.Root >= p.NRanks):
		return fmt.Errorf("sched: %v with root %d on %d ranks: root out of range", p.Coll, p.Root, p.NRanks)
	case p.Segment < 0:
		return fmt.Errorf("sched: %v with segment %d: segment must not be negative", p.Coll, p.Segment)
	case p.Radix < 0 || p.Radix == 1:
		return fmt.Errorf("sched: %v with radix %d: radix must be 0 (choose) or at least 2", p.Coll, p.Radix)
	}
	return p.Layout.Check(p.NRanks)
}

// InPlaceAlias reports how rank's In and Out share memory in an in-place call
// of p, as the package documentation defines: the buffer inner (In or Out)
// lies inside the other one, starting at element off. ok is false when the
// two never share memory (Barrier, and ranks other than the root of a rooted
// collective whose in-place form concerns the root only).
func (p Params) InPlaceAlias(rank int) (inner Buf, off int, ok bool) {
	switch p.Coll {
	case Allreduce, Alltoall:
		return In, 0, true
	case Reduce, Bcast:
		return In, 0, rank == p.Root
	case Allgather:
		return In, rank * p.Count, true
	case Gather:
		return In, rank * p.Count, rank == p.Root
	case ReduceScatter:
		return Out, rank * p.Count, true
	case Scatter:
		return Out, rank * p.Count, rank == p.Root
	}
	return In, 0, false
}

// ValidationError is one problem that Validate or ValidateProgram found.
type ValidationError struct {
	Rank int    // the rank whose program is at fault; -1 for the schedule as a whole
	Step int    // the index of the step at fault; -1 for the program as a whole
	Op   string // the step as Step.String prints it; empty when Step is -1
	Msg  string // what is wrong
}

// Error formats e as "sched: rank R step S (STEP): MSG", leaving out what
// does not apply.
func (e *ValidationError) Error() string {
	switch {
	case e.Rank < 0:
		return "sched: " + e.Msg
	case e.Step < 0:
		return fmt.Sprintf("sched: rank %d: %s", e.Rank, e.Msg)
	}
	return fmt.Sprintf("sched: rank %d step %d (%s): %s", e.Rank, e.Step, e.Op, e.Msg)
}

// maxErrors bounds the number of problems one call reports.
const maxErrors = 10

// errList collects ValidationErrors up to maxErrors.
type errList struct {
	errs    []error
	dropped int
}

func (l *errList) add(e error) {
	if e == nil {
		return
	}
	if len(l.errs) < maxErrors {
		l.errs = append(l.errs, e)
	} else {
		l.dropped++
	}
}

// addAll adds the parts of an error built by errList.err.
func (l *errList) addAll(err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			l.add(e)
		}
		return
	}
	l.add(err)
}

func (l *errList) stepf(rank, step int, s *Step, format string, args ...any) {
	l.add(&ValidationError{Rank: rank, Step: step, Op: s.String(), Msg: fmt.Sprintf(format, args...)})
}

func (l *errList) progf(rank int, format string, args ...any) {
	l.add(&ValidationError{Rank: rank, Step: -1, Msg: fmt.Sprintf(format, args...)})
}

func (l *errList) err() error {
	switch {
	case len(l.errs) == 0:
		return nil
	case len(l.errs) == 1 && l.dropped == 0:
		return l.errs[0]
	}
	errs := l.errs
	if l.dropped > 0 {
		errs = append(slices.Clip(errs), fmt.Errorf("sched: and %d more problems", l.dropped))
	}
	return errors.Join(errs...)
}

// Validate checks a whole schedule: progs[i] is rank i's program for p.
//
// It runs ValidateProgram on every program; then it checks that every Send
// has exactly one matching Recv or RecvReduce (same sender, receiver and tag,
// same length) and the other way round; then it runs the schedule abstractly
// to prove it cannot deadlock. The abstract run is the strictest an executor
// may be: each rank starts its steps in program order, a step starts only
// when the steps it depends on have completed, a Send completes only when its
// matching receive has started (rendezvous) and a receive only when its
// matching Send has started; Copy and Reduce complete when they start.
//
// Validate returns nil or an error made of *ValidationError values (joined
// with errors.Join when there are several, at most ten), each naming the
// rank, the step and what is wrong; a deadlock is reported as the cycle of
// ranks waiting for each other.
func Validate(p Params, progs []Program) error {
	if err := CheckParams(p); err != nil {
		return err
	}
	var l errList
	if len(progs) != p.NRanks {
		l.add(&ValidationError{Rank: -1, Step: -1, Msg: fmt.Sprintf("%d programs for %d ranks", len(progs), p.NRanks)})
		return l.err()
	}
	for i := range progs {
		if progs[i].Rank != i {
			l.progf(i, "program at index %d is for rank %d", i, progs[i].Rank)
			continue
		}
		l.addAll(ValidateProgram(p, progs[i]))
	}
	if err := l.err(); err != nil {
		return err
	}
	partner, err := matchMessages(progs)
	if err != nil {
		return err
	}
	return simulate(progs, partner)
}

// ValidateProgram checks one rank's program on its own: p is valid; every
// step has a known kind, a peer in range other than the rank itself (for
// Send, Recv and RecvReduce) and chunks inside their buffers (In: p.InLen,
// Out: p.OutLen, Tmp: prog.TmpLen); nothing writes In; Copy and Reduce move
// equal lengths, a Copy's source and destination are the same memory or
// disjoint and a Reduce's are disjoint, with and without the in-place
// aliasing of In and Out; Deps name only earlier steps; tags are unique per
// peer and direction; every step that touches memory an earlier step wrote
// (or, when it writes, read) depends on that step directly or through a chain
// of Deps, with and without the aliasing; with In and Out apart, no step
// reads Out or Tmp before a step wrote it and every element of Out is
// written; and Final lists chunks of Out that
// cover exactly the reduced results (all of Out for Allreduce and
// ReduceScatter and for the root of Reduce, nothing otherwise), each element
// once.
func ValidateProgram(p Params, prog Program) error {
	if err := CheckParams(p); err != nil {
		return err
	}
	var l errList
	r := prog.Rank
	if r < 0 || r >= p.NRanks {
		l.progf(r, "rank out of range [0, %d)", p.NRanks)
		return l.err()
	}
	if prog.TmpLen < 0 {
		l.progf(r, "negative TmpLen %d", prog.TmpLen)
		return l.err()
	}
	lens := [3]int{In: p.InLen(r), Out: p.OutLen(r), Tmp: prog.TmpLen}
	models := memModels(p, r)
	type dir struct {
		send bool
		peer int
		tag  int32
	}
	tags := map[dir]int{}
	depsOK := true
	for i := range prog.Steps {
		s := &prog.Steps[i]
		for _, d := range s.Deps {
			if d < 0 || int(d) >= i {
				l.stepf(r, i, s, "depends on step %d, which is not an earlier step", d)
				depsOK = false
			}
		}
		checkChunk := func(what string, c Chunk) bool {
			if c.Buf > Tmp {
				l.stepf(r, i, s, "%s names unknown buffer %v", what, c.Buf)
				return false
			}
			if c.Off < 0 || c.Len < 0 || c.Off > lens[c.Buf]-c.Len {
				l.stepf(r, i, s, "%s %v out of range: %v has %d elements", what, c, c.Buf, lens[c.Buf])
				return false
			}
			return true
		}
		switch s.Kind {
		case KindSend, KindRecv, KindRecvReduce:
			if s.Peer < 0 || s.Peer >= p.NRanks || s.Peer == r {
				l.stepf(r, i, s, "peer %d is not another rank of [0, %d)", s.Peer, p.NRanks)
				continue
			}
			k := dir{send: s.Kind == KindSend, peer: s.Peer, tag: s.Tag}
			if j, dup := tags[k]; dup {
				l.stepf(r, i, s, "tag %d with rank %d already used in the same direction by step %d", s.Tag, s.Peer, j)
			} else {
				tags[k] = i
			}
			if s.Kind == KindSend {
				checkChunk("source", s.Src)
			} else if checkChunk("destination", s.Dst) && s.Dst.Buf == In {
				l.stepf(r, i, s, "writes the input buffer, which is read-only")
			}
		case KindCopy, KindReduce:
			okS, okD := checkChunk("source", s.Src), checkChunk("destination", s.Dst)
			if !okS || !okD {
				continue
			}
			if s.Dst.Buf == In {
				l.stepf(r, i, s, "writes the input buffer, which is read-only")
				continue
			}
			if s.Src.Len != s.Dst.Len {
				l.stepf(r, i, s, "source has %d elements, destination %d", s.Src.Len, s.Dst.Len)
				continue
			}
			for _, m := range models {
				rs, ls := m.place(s.Src)
				rd, ld := m.place(s.Dst)
				if s.Src.Len == 0 || rs != rd || ls+s.Src.Len <= ld || ld+s.Dst.Len <= ls {
					continue
				}
				if s.Kind == KindCopy && ls == ld {
					continue
				}
				what := "partially overlap"
				if s.Kind == KindReduce {
					what = "overlap"
				}
				l.stepf(r, i, s, "source and destination %s%s", what, m.suffix())
				break
			}
		default:
			l.stepf(r, i, s, "unknown step kind %v", s.Kind)
		}
	}
	checkFinal(&l, p, prog)
	if err := l.err(); err != nil || !depsOK {
		return err
	}
	for _, m := range models {
		checkHazards(&l, prog, m, p.OutLen(r))
	}
	return l.err()
}

// checkFinal checks prog.Final against the collective's definition.
func checkFinal(l *errList, p Params, prog Program) {
	r := prog.Rank
	want := 0
	if p.Coll.Reduces() {
		want = p.OutLen(r)
	}
	var cs []Chunk
	for _, c := range prog.Final {
		if c.Buf != Out || c.Off < 0 || c.Len < 0 || c.End() > p.OutLen(r) {
			l.progf(r, "final chunk %v is not inside out[0:%d]", c, p.OutLen(r))
			return
		}
		if c.Len > 0 {
			cs = append(cs, c)
		}
	}
	slices.SortFunc(cs, func(a, b Chunk) int { return a.Off - b.Off })
	end := 0
	for _, c := range cs {
		if c.Off < end {
			l.progf(r, "final chunk %v overlaps another final chunk", c)
			return
		}
		if c.Off > end {
			break
		}
		end = c.End()
	}
	total := 0
	for _, c := range cs {
		total += c.Len
	}
	if end != want || total != want {
		if want == 0 {
			l.progf(r, "final chunks %v given, but %v leaves no reduced result on this rank", prog.Final, p.Coll)
		} else {
			l.progf(r, "final chunks %v do not cover out[0:%d] exactly", prog.Final, want)
		}
	}
}
