package sched

import (
	"fmt"
	"slices"
	"strings"
)

// stepRef names one step of one rank's program.
type stepRef struct{ rank, step int }

var noRef = stepRef{-1, -1}

// peerTag identifies a message from one rank's side: the other rank and
// the tag.
type peerTag struct {
	peer int
	tag  int32
}

// matchMessages pairs every Send with its receive. partner[r][i] is the step
// that matches rank r's step i, or noRef for Copy and Reduce.
func matchMessages(progs []Program) ([][]stepRef, error) {
	var l errList
	// recvs[r] and sends[r] index rank r's receives by sender and sends
	// by receiver; ValidateProgram made the keys unique.
	recvs := make([]map[peerTag]int, len(progs))
	sends := make([]map[peerTag]int, len(progs))
	partner := make([][]stepRef, len(progs))
	for r := range progs {
		recvs[r], sends[r] = map[peerTag]int{}, map[peerTag]int{}
		partner[r] = make([]stepRef, len(progs[r].Steps))
		for i := range progs[r].Steps {
			partner[r][i] = noRef
			s := &progs[r].Steps[i]
			switch s.Kind {
			case KindSend:
				sends[r][peerTag{s.Peer, s.Tag}] = i
			case KindRecv, KindRecvReduce:
				recvs[r][peerTag{s.Peer, s.Tag}] = i
			}
		}
	}
	for r := range progs {
		for i := range progs[r].Steps {
			s := &progs[r].Steps[i]
			switch s.Kind {
			case KindSend:
				k, ok := recvs[s.Peer][peerTag{r, s.Tag}]
				if !ok {
					l.stepf(r, i, s, "no matching recv or recvreduce from rank %d with tag %d on rank %d", r, s.Tag, s.Peer)
					continue
				}
				ms := &progs[s.Peer].Steps[k]
				if ms.Dst.Len != s.Src.Len {
					l.stepf(r, i, s, "sends %d elements, but rank %d step %d (%v) receives %d", s.Src.Len, s.Peer, k, ms, ms.Dst.Len)
					continue
				}
				partner[r][i], partner[s.Peer][k] = stepRef{s.Peer, k}, stepRef{r, i}
			case KindRecv, KindRecvReduce:
				if _, ok := sends[s.Peer][peerTag{r, s.Tag}]; !ok {
					l.stepf(r, i, s, "no matching send to rank %d with tag %d on rank %d", r, s.Tag, s.Peer)
				}
			}
		}
	}
	return partner, l.err()
}

// simulate runs the schedule abstractly under the strictest executor Validate
// allows (see Validate) and reports a deadlock if some step never completes.
func simulate(progs []Program, partner [][]stepRef) error {
	n := len(progs)
	next := make([]int, n) // steps [0, next) have started
	done := make([][]bool, n)
	for r := range progs {
		done[r] = make([]bool, len(progs[r].Steps))
	}
	ready := func(r, i int) bool {
		for _, d := range progs[r].Steps[i].Deps {
			if !done[r][d] {
				return false
			}
		}
		return true
	}
	for progress := true; progress; {
		progress = false
		for r := range progs {
			for next[r] < len(progs[r].Steps) && ready(r, next[r]) {
				i := next[r]
				next[r]++
				progress = true
				m := partner[r][i]
				if m == noRef {
					done[r][i] = true
				} else if next[m.rank] > m.step {
					done[r][i], done[m.rank][m.step] = true, true
				}
			}
		}
	}

	// Every step that has not completed is a started Send or receive whose
	// partner has not started, or waits on one. Describe, for each stuck
	// rank, the message it waits for, and report a cycle of such waits.
	waitsFor := make([]int, n)
	why := make([]string, n)
	stuck := 0
	for r := range progs {
		waitsFor[r] = -1
		steps := progs[r].Steps
		blocked := -1
		if next[r] < len(steps) {
			blocked = next[r]
		}
		d := -1 // the incomplete step that rank r waits for
		if blocked >= 0 {
			for _, x := range steps[blocked].Deps {
				if !done[r][x] {
					d = int(x)
					break
				}
			}
		} else if d = slices.Index(done[r], false); d < 0 {
			continue // finished
		}
		stuck++
		m := partner[r][d]
		waitsFor[r] = m.rank
		if blocked >= 0 {
			why[r] = fmt.Sprintf("rank %d step %d (%v) waits for its step %d (%v), which waits for rank %d step %d (%v) to start",
				r, blocked, steps[blocked], d, steps[d], m.rank, m.step, progs[m.rank].Steps[m.step])
		} else {
			why[r] = fmt.Sprintf("rank %d step %d (%v) waits for rank %d step %d (%v) to start",
				r, d, steps[d], m.rank, m.step, progs[m.rank].Steps[m.step])
		}
	}
	if stuck == 0 {
		return nil
	}
	// Every stuck rank waits for a rank that has not started all its steps,
	// which is stuck too, so following the waits from any stuck rank ends in
	// a cycle.
	start := 0
	for waitsFor[start] < 0 {
		start++
	}
	seen := map[int]int{}
	var path []int
	for r := start; ; r = waitsFor[r] {
		if at, ok := seen[r]; ok {
			path = path[at:]
			break
		}
		seen[r] = len(path)
		path = append(path, r)
	}
	parts := make([]string, len(path))
	inCycle := map[int]bool{}
	for i, r := range path {
		parts[i] = why[r]
		inCycle[r] = true
	}
	const others = 3 // stuck ranks outside the cycle to describe
	more := 0
	for r := range progs {
		if why[r] != "" && !inCycle[r] {
			if more < others {
				parts = append(parts, "also "+why[r])
			}
			more++
		}
	}
	if more > others {
		parts = append(parts, fmt.Sprintf("and %d more stuck ranks", more-others))
	}
	return &ValidationError{Rank: -1, Step: -1,
		Msg: fmt.Sprintf("deadlock (%d of %d ranks stuck): %s", stuck, n, strings.Join(parts, "; "))}
}
