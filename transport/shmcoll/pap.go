package shmcoll

import (
	"errors"
	"sync/atomic"

	"github.com/braid-ccl/braid/internal/par"
)

// Process-arrival-pattern (PAP) aware reductions, after "Efficient Process
// Arrival Pattern Aware Collective Communication for Deep Learning"
// (Alizadeh et al., EuroMPI/USA 2022, §5.1 and §5.2). The ranks of a call
// rarely arrive together; the reductions above combine the inputs in rank
// order, so that a rank that arrived early waits for the late ones before
// it can start, and all the work is left for after the last arrival. Here
// the ranks take their place in the order of arrival, and the work is done
// as they come:
//
//   - Small chunks (Algorithm 1, "Small-PAP-aware"): a leader combines
//     the chunk: a reduce's root (it needs the result, and the others need
//     not wait for anyone), or for an allreduce (when the caller asks for
//     leaders, leaderMax) the first rank to arrive. Every rank writes its
//     input as usual; the leader combines each input as soon as its flag
//     is up, in whatever order the flags rise, and publishes the result,
//     which the others copy out. After the last arrival there is one
//     combination left, and two hand-overs of a flag line (the last
//     input to the leader, the result to the others).
//   - An allreduce's chunks of at most FlatMax bytes are reduced as
//     Allreduce reduces them: every rank reads every input as its flag
//     rises, so that after the last arrival one hand-over is left (the
//     last input to every rank), fewer than any leader or chain needs.
//   - Large chunks (Algorithm 2, "Large-PAP-aware", pipelined): the ranks
//     form a chain in the order of arrival. The first copies its input
//     as the chain's partial result; each next one combines its
//     predecessor's partial result with its input into its own (one pass,
//     no copy in), a segment at a time, a segment behind its predecessor,
//     and, for a reduce, leaves; the last holds the result, which the
//     root (reduce) or every rank (allreduce: the paper's reduce followed
//     by a broadcast from the last rank) copies out a segment behind it.
//     Early ranks have combined their inputs by the time the last one
//     arrives: one pass over the chunk is left after it, and the copies
//     out overlap it (the pre-reduction of Proficz's pre-reduced ring and
//     sorted linear tree, "Improving all-reduce collective operations
//     for imbalanced process arrival patterns", J. Supercomputing 2018,
//     without its prediction: the order is the one observed).

// The order of arrival is kept in one word per chunk (the group's arrival
// word, in rank 0's block, which every rank updates by compare-and-swap):
// the chunk number, how many ranks have arrived, the first of them and the
// latest. A rank's swap returns the previous latest: its predecessor in the
// chain. Each rank also raises its input flag of the chunk on arrival (with
// its input, or empty for the chain), so that a wait that ends names a rank
// that has not arrived.
//
// One rank combines everything, so every rank gets the same bits; the
// order of combination is the order of arrival, so two calls with the same
// inputs may round differently (the ops are commutative).

// The arrival word of chunk f: bits 0–12 the ranks arrived, 13–25 the first,
// 26–38 the latest, 39–63 the chunk number modulo 2^25 (a stale word, of
// chunk f−ring, has another).
const (
	arrCountBits = 13
	arrRankBits  = 13
	arrMask      = 1<<arrRankBits - 1
	arrFirst     = arrCountBits
	arrLast      = arrCountBits + arrRankBits
	arrChunk     = arrCountBits + 2*arrRankBits
	lineArrival  = lineHist + 2 // lines lineArrival .. +ring-1 of rank 0's block, after the hash history
)

// DefaultPAPLeaderMax is the largest chunk the arrival-aware reductions
// combine at one leader (Algorithm 1); larger chunks form a chain in the
// order of arrival (Algorithm 2).
const DefaultPAPLeaderMax = 16 << 10

// arrival is the decoded arrival word of a chunk.
type arrival struct {
	count, first, last int
}

func (g *Group) arrivalWord(f uint64) *uint64 {
	return u64(g.line(0, lineArrival+int(f%ring)))
}

func decodeArrival(w, f uint64) (arrival, bool) {
	if w>>arrChunk != f&(1<<(64-arrChunk)-1) {
		return arrival{}, false
	}
	return arrival{count: int(w & (1<<arrCountBits - 1)), first: int(w >> arrFirst & arrMask), last: int(w >> arrLast & arrMask)}, true
}

// arrive takes this rank's place in chunk f's order of arrival: it returns
// its position (0 for the first) and the rank that arrived just before it
// (-1 for the first) and the first rank.
func (g *Group) arrive(f uint64) (pos, pred, first int) {
	w := g.arrivalWord(f)
	tag := f & (1<<(64-arrChunk) - 1) << arrChunk
	for {
		old := atomic.LoadUint64(w)
		a, ok := decodeArrival(old, f)
		var nw uint64
		if !ok {
			nw = tag | uint64(g.rank)<<arrLast | uint64(g.rank)<<arrFirst | 1
		} else {
			nw = tag | uint64(g.rank)<<arrLast | uint64(a.first)<<arrFirst | uint64(a.count+1)
		}
		if atomic.CompareAndSwapUint64(w, old, nw) {
			if !ok {
				return 0, -1, g.rank
			}
			return a.count, a.last, a.first
		}
	}
}

// waitAll waits until every rank has arrived at chunk f and returns the last.
func (g *Group) waitAll(c *Call, f uint64) (int, error) {
	w := g.arrivalWord(f)
	a, _ := decodeArrival(atomic.LoadUint64(w), f)
	if a.count == g.n {
		return a.last, nil
	}
	if c.wake != nil {
		c.recheck = func() bool { a, _ := decodeArrival(atomic.LoadUint64(w), f); return a.count == g.n }
	}
	for a.count < g.n {
		if err := c.idle(g.absent(f), "its arrival", f-c.chunk0); err != nil {
			return 0, err
		}
		a, _ = decodeArrival(atomic.LoadUint64(w), f)
	}
	c.arrived()
	return a.last, nil
}

// absent returns a rank whose input flag of chunk f is not up (one that
// has not arrived), or this rank's if every flag is.
func (g *Group) absent(f uint64) int {
	for q := range g.n {
		if atomic.LoadUint64(u64(g.flag(q, slotIn, f))) < f {
			return q
		}
	}
	return g.rank
}

// peek returns rank q's input of chunk f if its flag is up, without
// waiting.
func (g *Group) peek(q int, c *Call, f uint64, nbytes int) ([]byte, bool, error) {
	l := g.flag(q, slotIn, f)
	v := atomic.LoadUint64(u64(l[flagSeq:]))
	if v < f {
		return nil, false, nil
	}
	sig := *u32(l[flagSig:])
	n := int(*u32(l[flagLen:]))
	if v != f || sig != c.Sig || n != nbytes {
		return nil, false, &MismatchError{Peer: q, Sig: sig, Want: c.Sig}
	}
	if c.Arrivals != nil {
		c.Arrivals[q] = *u64(l[flagArrive:])
	}
	if n <= inline {
		return l[flagBytes : flagBytes+n], true, nil
	}
	return g.slotBuf(q, slotIn, int(f&1))[:n], true, nil
}

// AllreducePAP is Allreduce with the arrival-aware reductions: chunks of
// at most FlatMax bytes as Allreduce reduces them (every rank reads every
// input as it comes: after the last arrival one flag line or slot is left
// to read, which no order of arrival shortens), chunks of at most
// leaderMax bytes with a leader, larger ones with the pipelined chain.
func (g *Group) AllreducePAP(c *Call, in, out []byte, r Reducer, leaderMax int) (err error) {
	return g.reducePAP(c, in, out, r, -1, leaderMax)
}

// ReducePAP is Reduce with the arrival-aware reductions: chunks of at most
// leaderMax bytes led by the root, larger ones with the pipelined chain.
func (g *Group) ReducePAP(c *Call, in, out []byte, r Reducer, root, leaderMax int) (err error) {
	return g.reducePAP(c, in, out, r, root, leaderMax)
}

func (g *Group) reducePAP(c *Call, in, out []byte, r Reducer, root, leaderMax int) (err error) {
	if err := g.enter(c); err != nil {
		return err
	}
	defer func() { err = g.leave(c, err) }()
	size, count := chunks(len(in), r.ElemSize, g.slot)
	c.outLen = len(in)
	// Every rank must take the same path for every chunk: the chunk's
	// size decides, and it is the same everywhere.
	for i := range count {
		off := i * size
		b := min(size, len(in)-off)
		var o []byte
		if root < 0 || g.rank == root {
			o = out[off : off+b]
		}
		switch {
		case root < 0 && b <= g.flatMax:
			err = g.reduceFlat(c, in[off:off+b], o, r, root)
		case b <= leaderMax:
			g.partial = g.n > 1 && !c.Confirmed
			err = g.leaderChunk(c, in[off:off+b], o, r, root)
		default:
			g.partial = g.n > 1 && !c.Confirmed
			err = g.chainChunk(c, in[off:off+b], o, r, root, false)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// leaderChunk is one chunk of Algorithm 1: the first rank to arrive
// combines the inputs as they come.
func (g *Group) leaderChunk(c *Call, in, out []byte, r Reducer, root int) error {
	f := g.next()
	b := len(in)
	if err := g.claim(c, f, b <= inline); err != nil {
		return err
	}
	copy(g.buf(slotIn, f, b), in)
	g.commit(slotIn, f, c.Sig, b)
	// A reduce's leader is its root, which needs the result anyway: the
	// others deposit their inputs and leave, whenever they come, and the
	// root combines them in the order they come. An allreduce's is the
	// first rank to arrive.
	leader := root
	if root < 0 {
		_, _, leader = g.arrive(f)
	}
	if leader != g.rank {
		if root >= 0 && g.rank != root {
			g.finish(f, c.Sig)
			return nil
		}
		s, err := g.read(c, leader, slotRes, f, b)
		if err != nil {
			return g.nameAbsent(err, f)
		}
		copy(out, s)
		g.finish(f, c.Sig)
		return nil
	}
	// The leader: its own input first, then the others' as their flags
	// rise.
	acc := g.buf(slotRes, f, b)
	copy(acc, in)
	left := g.srcs[:0] // the ranks not yet combined, as a list of nil/non-nil marks
	for range g.n {
		left = append(left, nil)
	}
	todo := g.n - 1
	if c.wake != nil && todo > 0 {
		c.recheck = func() bool {
			for q := range g.n {
				if q != g.rank && left[q] == nil && atomic.LoadUint64(u64(g.flag(q, slotIn, f))) >= f {
					return true
				}
			}
			return false
		}
	}
	for todo > 0 {
		moved := false
		for q := range g.n {
			if q == g.rank || left[q] != nil {
				continue
			}
			s, ok, err := g.peek(q, c, f, b)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			r.K(acc, s)
			left[q] = s
			todo--
			moved = true
		}
		if moved {
			c.arrived()
			continue
		}
		if todo > 0 {
			q := 0
			for q < g.n && (q == g.rank || left[q] != nil) {
				q++
			}
			if err := c.idle(q, "its input", f-c.chunk0); err != nil {
				return err
			}
		}
	}
	clear(left)
	g.sawAll(f)
	if root < 0 || root == g.rank {
		copy(out, acc)
	}
	if root < 0 || root != g.rank {
		g.commit(slotRes, f, c.Sig, b)
	}
	g.finish(f, c.Sig)
	return nil
}

// chainChunk is one chunk of Algorithm 2, pipelined: the ranks combine in
// a chain in the order of arrival, each one segment (pipeSeg) at a time,
// publishing its progress after each, so that its successor combines
// segment k while it combines k+1; the last rank's partial result is the
// result, which the root (reduce) or every rank (allreduce: the paper's
// reduce followed by a broadcast from the last rank) copies out segment by
// segment as it is combined. A rank that arrives long after its
// predecessor finds its partial result complete: after the last arrival
// one pass over the chunk is left (the last rank combines its input with
// its predecessor's partial result), which the others' copies follow a
// segment behind, instead of the rank-order reductions' copy in, combine
// and copy out.
//
// The chain's data always goes through the slots, never inline in a flag
// line.
//
// With fixed set, the chain runs in rank order instead (Allreduce's chain,
// for balanced calls): rank r combines after rank r−1, and rank n−1's
// partial result is the result, so that the bits do not depend on who
// came first.
func (g *Group) chainChunk(c *Call, in, out []byte, r Reducer, root int, fixed bool) error {
	f := g.next()
	b := len(in)
	if err := g.claim(c, f, false); err != nil {
		return err
	}
	g.commit(slotIn, f, c.Sig, 0) // arrived (for the names of waits and the stamps)
	var pos, pred int
	if fixed {
		pos, pred = g.rank, g.rank-1
	} else {
		pos, pred, _ = g.arrive(f)
	}
	last := pos == g.n-1
	seg := pipeSeg(b, g.n, r.ElemSize, g.slot)
	// A root that arrived last, or the only rank, combines straight into
	// its output: nobody reads its result.
	alone := last && (g.rank == root || g.n == 1)
	mine := out
	var prog *uint64
	if !alone {
		mine = g.slotBuf(g.rank, slotRes, int(f&1))[:b]
		l := g.flag(g.rank, slotRes, f)
		*u32(l[flagSig:]) = c.Sig
		*u32(l[flagLen:]) = uint32(b)
		prog = u64(l[flagProg:])
	}
	var src []byte
	if pred >= 0 {
		src = g.slotBuf(pred, slotRes, int(f&1))[:b]
	}
	// An allreduce's last rank copies each segment out as it goes.
	copyOut := last && root < 0 && !alone
	for k, off := 1, 0; off < b; k, off = k+1, off+seg {
		e := min(off+seg, b)
		if pred < 0 {
			copy(mine[off:e], in[off:e])
		} else {
			if err := g.awaitSeg(c, pred, f, k, b, "its partial result"); err != nil {
				return err
			}
			r.K3(mine[off:e], src[off:e], in[off:e])
		}
		if prog != nil {
			g.publishWord(prog, progWord(f, k))
			if g.wake != nil {
				g.wake.kick()
			}
		}
		if copyOut {
			par.CopyOut(out[off:e], mine[off:e], c.outLen)
		}
	}
	if last || root >= 0 && g.rank != root {
		// The result is this rank's (and copied out), or a reduce's
		// non-root is done: its successor reads its partial result
		// before it finishes chunk f, and no rank claims this slot again
		// before that.
		if last && g.rank == root {
			g.readStamps(c, f)
		}
		g.finish(f, c.Sig)
		return nil
	}
	// The result is the last rank's partial result.
	q := g.n - 1
	if !fixed {
		var err error
		if q, err = g.waitAll(c, f); err != nil {
			return err
		}
		g.sawAll(f)
		if pos == 0 || g.rank == root {
			g.readStamps(c, f)
		}
	}
	res := g.slotBuf(q, slotRes, int(f&1))[:b]
	for k, off := 1, 0; off < b; k, off = k+1, off+seg {
		e := min(off+seg, b)
		if err := g.awaitSeg(c, q, f, k, b, "its share of the result"); err != nil {
			return g.nameAbsent(err, f)
		}
		par.CopyOut(out[off:e], res[off:e], c.outLen)
	}
	if fixed {
		// Rank n−1's result passed through every rank: each had
		// published its input flag of chunk f, so finished f−1.
		g.sawAll(f)
		g.readStamps(c, f)
	}
	g.finish(f, c.Sig)
	return nil
}

// The progress word of a chain's chunk, in its owner's res flag line at
// flagProg (which only the chains write: inline data ends before it, and
// only input lines carry stamps there): the chunk number above
// progSegBits, the segments combined below. Chunk numbers only grow, and
// a line is reused for chunk f+ring only once every rank has finished
// chunk f, so a word of an older chunk is smaller than any of chunk f.
const (
	flagProg    = flagArrive
	progSegBits = 24
)

// The progress word must lie after the inline data.
const _ = uint(flagProg - flagBytes - inline)

func progWord(f uint64, k int) uint64 { return f<<progSegBits | uint64(k) }

// awaitSeg waits until rank q has combined segment k (counted from 1) of
// its partial result of chunk f, of nbytes in all, and checks, at the
// first segment, that q's call is this one.
func (g *Group) awaitSeg(c *Call, q int, f uint64, k, nbytes int, what string) error {
	l := g.flag(q, slotRes, f)
	w := u64(l[flagProg:])
	want := progWord(f, k)
	if atomic.LoadUint64(w) < want {
		if c.wake != nil {
			c.recheck = reached(w, want)
		}
		for atomic.LoadUint64(w) < want {
			if err := c.idle(q, what, f-c.chunk0); err != nil {
				return err
			}
		}
		c.arrived()
	}
	if k == 1 {
		if sig, n := *u32(l[flagSig:]), int(*u32(l[flagLen:])); sig != c.Sig || n != nbytes {
			return &MismatchError{Peer: q, Sig: sig, Want: c.Sig}
		}
	}
	return nil
}

// pipeSeg returns the segment of a chain over a chunk of b bytes on n
// ranks with slots of slot bytes: about sqrt(b × 2 KiB / (n−1)) (the
// pipeline's fill, n−1 segments, against one hop's cost of a flag line,
// taken as the time to combine 2 KiB), a power of two from 4 KiB to
// 64 KiB, at most an eighth of a slot, a whole number of elements.
func pipeSeg(b, n, es, slot int) int {
	s := 4 << 10
	for s < 64<<10 && s*s*max(n-1, 1) < b*(2<<10) {
		s *= 2
	}
	s = min(s, slot/8)
	s = max(s/es*es, es)
	return min(s, max(b, es))
}

// readStamps records every rank's arrival stamp of chunk f (Call.Arrivals)
// from their input flags, once every rank has arrived: one rank of a
// chain does it (the first, while it waits for the result, or the last),
// since what the others would learn is the same (a reduce's root does
// it too).
func (g *Group) readStamps(c *Call, f uint64) {
	if c.Arrivals == nil {
		return
	}
	for q := range g.n {
		l := g.flag(q, slotIn, f)
		if atomic.LoadUint64(u64(l[flagSeq:])) == f {
			c.Arrivals[q] = *u64(l[flagArrive:])
		}
	}
}

// nameAbsent returns err, a wait for the rank that holds chunk f's result
// that ended, naming instead a rank that has not arrived at chunk f if
// there is one: the holder was itself waiting for it.
func (g *Group) nameAbsent(err error, f uint64) error {
	var w *WaitError
	if errors.As(err, &w) {
		if q := g.absent(f); q != g.rank {
			w.Peer, w.What = q, "its arrival"
		}
	}
	return err
}

// The lines of a block before its slots: the arrival lines must not
// overlap the hash history (two lines from lineHist) nor reach the data.
var _ = [1]struct{}{}[(lineArrival+ring)*lineSize/(dataOff+1)]
var _ = [1]struct{}{}[lineHist+2-lineArrival]
