package shmcoll

import (
	"sync/atomic"
)

// Recursive doubling through the area: a small allreduce of 16 ranks or
// more (DefaultRDRanks), or of 4 or 8, in rounds among a few partners
// each, instead of every rank reading every rank's flag line at once
// (reduceFlat); small reduce-scatters (by recursive halving where the
// ranks are a power of two: scatterDoubling) and allgathers the same way
// (gatherDoubling).
//
// In the flat reduction each of n ranks reads n−1 lines, each written by
// another core and read by n−1 others: n² line transfers a call. In round
// k of recursive doubling rank r exchanges its partial result with rank r
// xor 2^k only, one line (or a few) each way, and the next round needs
// both: log₂ n exchanges in turn instead of n² at once. Open MPI runs
// recursive doubling over its shared-memory fast boxes at these sizes.
// The area's rounds have radix 4 (recursive multiplying): in each, the
// four ranks that differ only in two bits of their number read each
// other's partial result, three lines at once instead of one; so 16
// ranks take two rounds, not four (a last round of radix 2 where log₂ n
// is odd: 32 ranks take three). On the node (session 19) that took the
// area's 16-rank allreduce of 8 B–1 KiB from 2.92–5.69 µs to 2.61–5.03
// with waits that yield, but end to end it stayed within the rounds'
// spread of radix 2 (docs/PERFORMANCE.md).
//
// A round costs about a line's round trip between two cores (0.3–0.5 µs
// on the 16-core node, BenchmarkLinePingPong), so doubling pays only where
// the flat reduction's storm costs more than a few of them. On the node
// (BenchmarkArea, session 18, two runs of three) 16 ranks allreduced
// 256 B in 3.6–3.7 µs by radix-2 doubling against 4.3–5.2 flat, 1 KiB in
// 5.4–6.0 against 6.7–7.2, and 8 B in 3.3–3.6 against 3.1–4.2; at 4 and 8
// ranks radix-2 doubling lost by 5–26 % (8 ranks, 8 B: 1.6–1.8 µs against
// 1.4), so the area doubled from 16 ranks. With radix 4 (4 ranks: one
// round; 8: two) it wins there too (session 27, BenchmarkArea, three runs
// each, GOMAXPROCS=16): 4 ranks allreduced 8 B in 0.52–0.64 µs against
// 0.78–0.88 flat, 64 B in 0.76–0.87 against 0.84–0.89, 1 KiB in 1.43–1.51
// against 1.69–1.81; 8 ranks 64 B in 1.11–1.48 against 1.52–1.62 and
// 1 KiB in 2.48–3.08 against 2.87–3.17, and 8 B and 256 B within each
// other's spread (1.21–1.28 against 1.16–1.24; 1.61–1.78 against
// 1.52–1.59); end to end, though, 8 ranks allreduced 8–32 B faster flat
// (reduceDoubles). So the area doubles from 16 ranks (DefaultRDRanks),
// and on 4 and 8 (a power of two from rdSmall, doubles); 2 and 3 ranks
// exchange with every other rank in one round anyway. Groups of 5–7 and
// 9–15 stay flat: their extra ranks add two steps, and on the node
// (session 28, BenchmarkArea, three runs each, BRAID_BENCH_RDRANKS=4
// against the default) doubling took 1.05–1.45 times the flat time for
// allreduces of 8 B–1 KiB on 5–7 and 9 ranks; on 10–15 ranks the two
// spread over each other (medians 0.73–1.54 of flat, reduce-scatters
// of blocks up to 64 B 0.52–1.04). At 32
// and more, which the node could not run, the flat storm only grows (n²
// lines against log₄ n rounds). Ranks that outnumber the cores do not
// double (the communicator turns it off): each round waits for partners
// that may not be running.
//
// # Layout
//
// Each rank's block ends with its doubling region: two sets (a call uses
// set rdCalls mod 2) of rdEntries entries, each a flag line (chunk number,
// signature, length, up to 40 bytes of data, the writer's arrival stamp:
// as the other flag lines) followed by rdCap bytes of data for a partial
// result too large for the line. Entry 0 carries an extra rank's input to
// its partner below (a group of n ranks that is not a power of two: the p
// = 2^⌊log₂ n⌋ lowest ranks double, and rank p+i first folds its input
// into rank i's, then reads the result back from rank i's last entry);
// entry 1+k carries a rank's partial result into round k.
//
// # Reuse without waiting
//
// An entry of set s is read by the writer's partners in that entry's
// round only, and written again two doubling calls later. Before that,
// the writer has read, in the doubling call between, an entry each of
// those partners wrote in that call: so they had finished the call before
// it, including their reads of the entry. No rank waits for a done line
// before writing (claim), and at the start of a call a rank stores its
// arrival stamp into each entry it will write, so that its core owns those
// lines again (the partner's read had taken them) by the time the partial
// results are ready.
//
// # Agreement and order
//
// A rank reads its partners' chunk numbers, signatures and lengths as
// every reader of a flag line does, and publishes its round k+1 only after
// round k checked: a call that ends well on a rank folded in every rank's
// input, each checked along the way, so the call is complete (no running
// hash comparison is owed, as for the flat reduction). The partners of a
// round combine their partial results in the order of the round's digit
// of their numbers (lower ranks' first), so that every rank holds
// the same bits even for operations whose result depends on the order of
// the operands (a maximum with NaN). Only the partners' arrival stamps are
// read (Call.Arrivals): one eligible call in rdSample goes flat instead,
// so that every rank's stamps are still seen.
const (
	rdCap     = 1 << 10 // the most data bytes of an entry: the largest doubling chunk
	rdEntries = 8       // entries a set: extra, rounds (6 would fit; 3 at p = 64), result
	rdEntry   = lineSize + rdCap
	rdRegion  = 2 * rdEntries * rdEntry
	rdSample  = 16
	// rdMaxRanks is the largest group that doubles (three rounds).
	rdMaxRanks = 64
)

// DefaultRDMax is the largest allreduce chunk that goes by recursive
// doubling, and DefaultRDRanks the least number of ranks from which every
// group doubles; below it, groups of a power of two from rdSmall ranks
// double too (doubles; see doubling.go).
const (
	DefaultRDMax   = rdCap
	DefaultRDRanks = 16
	rdSmall        = 4
)

// A call that doubles (at most RDMax ≤ rdCap bytes) is always one chunk:
// every slot holds more.
var _ = [1]struct{}{}[rdCap/minSlot]

// doubles reports whether a call of b bytes can go by recursive doubling:
// at most RDMax bytes, in a group of RDRanks ranks or more, or of a power
// of two from rdSmall (4 and 8 ranks; groups of 5–7 and 9–15, whose extra
// ranks add two steps, lost or did not win: see doubling.go).
func (g *Group) doubles(b int) bool {
	return g.rdMax > 0 && b <= g.rdMax && g.n <= rdMaxRanks &&
		(g.n >= g.rdRanks || g.n >= rdSmall && g.powerOfTwo())
}

// reduceDoubles reports whether an allreduce of b bytes goes by recursive
// doubling: where it can (doubles), but for data that fits a flag line
// on a group below RDRanks of more than rdSmall ranks, where the flat
// reduction reads only n−1 lines: on the 16-core node 8 ranks allreduced
// 8–32 B flat in 1.69–1.93 µs end to end and by doubling in 1.68–2.27
// (medians 1.70–1.85 against 1.79–1.98; session 27, braid bench, six
// alternated rounds), while at 64 B doubling won (1.99–2.11 against
// 2.03–3.10), as it does on 4 ranks at every size.
func (g *Group) reduceDoubles(b int) bool {
	return g.doubles(b) && (g.n >= g.rdRanks || g.n <= rdSmall || b > inline)
}

// doublingShape returns the ranks that double, p = 2^⌊log₂ n⌋ (the lowest
// p ranks; the others fold into them), and log₂ p, the bits of a rank
// below p that the rounds go through, two a round (rdRound).
func (g *Group) doublingShape() (p, log int) {
	p = 1
	for p*2 <= g.n {
		p, log = p*2, log+1
	}
	return p, log
}

// rdRound returns round k's first bit and radix: the round exchanges
// partial results among the ranks that differ only in bits [shift,
// shift+log₂ radix) of their number, radix 4 (two bits) but for a last
// round of radix 2 where log is odd.
func rdRound(k, log int) (shift, radix int) {
	shift = 2 * k
	return shift, 1 << min(2, log-shift)
}

// rdPartner returns the partner of rank me in a round from bit shift of
// radix radix (rdRound, halvingRound) whose digit there is d.
func rdPartner(me, shift, radix, d int) int { return me&^((radix-1)<<shift) | d<<shift }

// rdStart begins a call by recursive doubling or halving: it takes the
// call's chunk number f and the set s of entries it uses (doubling calls
// alternate between the two).
func (g *Group) rdStart() (f uint64, s int) {
	f, s = g.next(), int(g.rdCalls&1)
	g.rdCalls++
	return f, s
}

// powerOfTwo reports whether the group has a power of two ranks, which
// recursive doubling needs no extra ranks for and recursive halving needs.
func (g *Group) powerOfTwo() bool { return g.n&(g.n-1) == 0 }

// rdRounds returns the rounds of a group of 2^log ranks: ⌈log/2⌉.
func rdRounds(log int) int { return (log + 1) / 2 }

// DoublingRounds returns the rounds of an allreduce of b bytes by
// recursive doubling (⌈log₂ p / 2⌉, and two more where the group is not a
// power of two: the extra ranks' input and the result back to them), or 0
// where it does not double (reduceDoubles). One call in 16 of those goes
// flat instead.
func (g *Group) DoublingRounds(b int) int {
	if !g.reduceDoubles(b) {
		return 0
	}
	return g.rounds()
}

// rounds returns the rounds of a call by recursive doubling in g.
func (g *Group) rounds() int {
	p, log := g.doublingShape()
	rounds := rdRounds(log)
	if p < g.n {
		rounds += 2
	}
	return rounds
}

// scatterDoubles reports whether a reduce-scatter of whole bytes (every
// rank's block, n of them) goes in rounds among a few partners
// (scatterDoubling): where a call of whole bytes can double (doubles),
// on a power of two ranks by recursive halving (scatterHalving), on
// others, where a block is at most a line, by recursive doubling of the
// whole input. Recursive doubling reduces the whole input in every round,
// which with larger blocks costs more than the flat reduce-scatter, where
// a rank reads only its own block of each input: on the 16-core node, 8
// ranks reduce-scattered 1 KiB (blocks of 128 bytes) flat in 2.0–2.2 µs
// and by doubling in 2.6–2.9 (BenchmarkArea, session 27). Halving reads
// about the whole input once: 4 ranks reduce-scattered 512 B and 1 KiB
// (blocks of 128 and 256 bytes) in 0.96–1.07 and 1.24–1.28 µs against
// 1.31–1.50 and 1.48–1.52 flat, 8 ranks 1 KiB in 1.92–2.07 against
// 2.29–2.50 (BenchmarkArea, session 28, three runs each).
func (g *Group) scatterDoubles(whole int) bool {
	return g.n > 0 && (g.powerOfTwo() || whole/g.n <= lineSize) && g.doubles(whole)
}

// ScatterDoublingRounds is DoublingRounds for a reduce-scatter of whole
// bytes: 0 where it does not go in rounds (scatterDoubles); halving says
// that the rounds halve the data (scatterHalving) rather than reduce the
// whole input in each.
func (g *Group) ScatterDoublingRounds(whole int) (rounds int, halving bool) {
	if !g.scatterDoubles(whole) {
		return 0, false
	}
	return g.rounds(), g.powerOfTwo()
}

// gatherDoubles reports whether an allgather of blocks of blk bytes goes
// by recursive doubling (gatherDoubling): in a group of a power of two
// ranks that doubles, where the whole output is at most RDMax.
func (g *Group) gatherDoubles(blk int) bool {
	return g.powerOfTwo() && g.doubles(g.n*blk)
}

// GatherDoublingRounds is DoublingRounds for an allgather of blocks of
// blk bytes: 0 where it does not double (gatherDoubles).
func (g *Group) GatherDoublingRounds(blk int) int {
	if !g.gatherDoubles(blk) {
		return 0
	}
	return g.rounds()
}

// doubled reports whether a call that may double (eligible) does: all but
// one eligible call in rdSample, which goes flat so that every rank's
// arrival stamps are seen (the doubling calls read only their partners').
func (g *Group) doubled(eligible bool) bool {
	if !eligible {
		return false
	}
	g.rdSeen++
	return g.rdSeen%rdSample != 0
}

// ownEntry takes back the lines of this rank's entry e of set s that a
// call writes, b bytes of data: it stores the call's arrival stamp in the
// flag line and touches the data lines beyond it, so that this core owns
// them again (its partners' reads had taken them) by the time the data
// is ready.
func (g *Group) ownEntry(s, e, b int) {
	flag, data := g.rdAt(g.rank, s, e)
	*u64(flag[flagArrive:]) = g.stamp
	for o := 0; b > inline && o < b; o += lineSize {
		*u64(data[o:]) = 0
	}
}

// rdAt returns rank q's entry e of set s: its flag line and its data.
func (g *Group) rdAt(q, s, e int) (flag, data []byte) {
	off := len(g.blocks[q]) - rdRegion + (s*rdEntries+e)*rdEntry
	b := g.blocks[q][off : off+rdEntry : off+rdEntry]
	return b[:lineSize], b[lineSize:]
}

// rdBuf returns where rank q's entry e of set s holds nbytes of data.
func (g *Group) rdBuf(q, s, e, nbytes int) []byte {
	flag, data := g.rdAt(q, s, e)
	if nbytes <= inline {
		return flag[flagBytes : flagBytes+nbytes]
	}
	return data[:nbytes]
}

// rdPublish publishes this rank's entry e of set s as chunk f.
func (g *Group) rdPublish(s, e int, f uint64, sig uint32, nbytes int) {
	flag, _ := g.rdAt(g.rank, s, e)
	g.publishLine(flag, f, sig, uint32(nbytes))
}

// rdRead waits for rank q's entry e of set s of chunk f, checks it as
// await does, and returns its nbytes of data.
func (g *Group) rdRead(c *Call, q, s, e int, f uint64, nbytes int, what string) ([]byte, error) {
	flag, _ := g.rdAt(q, s, e)
	if _, err := g.awaitLine(c, q, flag, f, nbytes, what, true); err != nil {
		return nil, err
	}
	return g.rdBuf(q, s, e, nbytes), nil
}

// reduceDoubling is an allreduce of one chunk (the call's whole input) by
// recursive doubling.
func (g *Group) reduceDoubling(c *Call, in, out []byte, r Reducer) error {
	f, s := g.rdStart()
	b := len(in)
	p, log := g.doublingShape()
	rounds := rdRounds(log)
	last := rounds + 1 // the result entry of the ranks with an extra
	me, extra := g.rank, g.rank >= p
	partnerX := -1 // the extra rank of a rank below n−p
	if !extra && me+p < g.n {
		partnerX = me + p
	}
	// Take back the lines this call writes (see doubling.go).
	own := func(e int) { g.ownEntry(s, e, b) }
	if extra {
		own(0)
		copy(g.rdBuf(me, s, 0, b), in)
		g.rdPublish(s, 0, f, c.Sig, b)
		res, err := g.rdRead(c, me-p, s, last, f, b, "the result")
		if err != nil {
			return err
		}
		copy(out, res)
		g.finish(f, c.Sig)
		return nil
	}
	for e := 1; e <= rounds; e++ {
		own(e)
	}
	if partnerX >= 0 {
		own(last)
	}
	cur := g.rdBuf(me, s, 1, b)
	if partnerX >= 0 {
		x, err := g.rdRead(c, partnerX, s, 0, f, b, "its input")
		if err != nil {
			return err
		}
		r.K3(cur, in, x)
	} else {
		copy(cur, in)
	}
	var parts [4][]byte
	for k := range rounds {
		g.rdPublish(s, 1+k, f, c.Sig, b)
		shift, radix := rdRound(k, log)
		mine := me >> shift & (radix - 1)
		for d := range radix {
			if d == mine {
				parts[d] = cur
				continue
			}
			q := rdPartner(me, shift, radix, d)
			w, err := g.rdRead(c, q, s, 1+k, f, b, "its partial result")
			if err != nil {
				return err
			}
			parts[d] = w
		}
		dst := out
		if k+1 < rounds {
			dst = g.rdBuf(me, s, 2+k, b)
		}
		combineDigits(r, dst, parts[:radix])
		cur = dst
	}
	if partnerX >= 0 {
		copy(g.rdBuf(me, s, last, b), out)
		g.rdPublish(s, last, f, c.Sig, b)
	}
	g.finish(f, c.Sig)
	return nil
}

// scatterDoubling is a reduce-scatter of one chunk (the call's whole
// input, at most RDMax bytes: scatterDoubles) in rounds among a few
// partners: on a power of two ranks by recursive halving
// (scatterHalving), on others as an allreduce of the whole input by
// recursive doubling, of which each rank keeps its block (out). Doubling
// reduces n times the bytes that the flat reduce-scatter does, a line or
// a few at these sizes, for log₄ n rounds among a few partners instead
// of every rank reading a line of every rank's slot. On the 16-core node
// (session 27, BenchmarkArea, three runs each) blocks of 8 B took 2.1–2.8
// µs on 16 ranks against 4.5–6.9 flat, 1.2–1.3 on 8 against 1.8–2.0,
// 0.63–0.71 on 4 against 0.80–0.97; blocks of 64 B 1.8–1.9 on 8 ranks
// against 2.4–2.5. Halving took the 16-rank call of 64-byte blocks
// (1 KiB) from 5.1–5.8 µs end to end to 3.5–3.9, and of 32-byte blocks
// from 4.0–4.2 to 3.1–3.4 (braid bench, session 28, three alternated
// rounds). One call in rdSample goes flat, as an allreduce's does, so
// that every rank's arrival stamps are seen.
func (g *Group) scatterDoubling(c *Call, in, out []byte, r Reducer) error {
	if g.powerOfTwo() {
		return g.scatterHalving(c, in, out, r)
	}
	all := g.rdAll[:len(in)]
	if err := g.reduceDoubling(c, in, all, r); err != nil {
		return err
	}
	blk := len(out)
	copy(out, all[g.rank*blk:(g.rank+1)*blk])
	return nil
}

// scatterHalving is scatterDoubling on a power of two ranks, by
// recursive halving: the rounds go through the bits of a rank's number
// from the highest (halvingRound), and in each a rank keeps the part of
// its partial result that its digit of the round names, reading only that
// part of its partners' (a radix-4 round keeps a quarter). After the last
// round a rank holds its own block, combined over every rank. A call
// reads and reduces about a third more than the whole input (1 + 1/4 +
// 1/16 ...) where recursive doubling reads it whole in every round. As in
// the doubling allreduce, the partners of a round combine their parts in
// the order of the round's digit, and entries are reused without waiting:
// a rank writes entry e of a set again only two doubling calls later,
// after a call between whose result took in every rank's input, written
// after that rank had finished the call that read entry e.
func (g *Group) scatterHalving(c *Call, in, out []byte, r Reducer) error {
	f, s := g.rdStart()
	me := g.rank
	_, log := g.doublingShape()
	rounds := rdRounds(log)
	// Take back the lines this call writes (see doubling.go): entry 1+k
	// holds the part kept before round k.
	b := len(in)
	for k := range rounds {
		_, radix := halvingRound(k, log)
		g.ownEntry(s, 1+k, b)
		b /= radix
	}
	b = len(in)
	cur := g.rdBuf(me, s, 1, b)
	copy(cur, in)
	var parts [4][]byte
	for k := range rounds {
		g.rdPublish(s, 1+k, f, c.Sig, b)
		shift, radix := halvingRound(k, log)
		mine := me >> shift & (radix - 1)
		part := b / radix
		for d := range radix {
			if d == mine {
				parts[d] = cur[mine*part : (mine+1)*part]
				continue
			}
			q := rdPartner(me, shift, radix, d)
			w, err := g.rdRead(c, q, s, 1+k, f, b, "its partial result")
			if err != nil {
				return err
			}
			parts[d] = w[mine*part : (mine+1)*part]
		}
		dst := out
		if k+1 < rounds {
			dst = g.rdBuf(me, s, 2+k, part)
		}
		combineDigits(r, dst, parts[:radix])
		cur, b = dst, part
	}
	g.finish(f, c.Sig)
	return nil
}

// combineDigits combines a round's parts into dst in the order of the
// round's digit (parts[d] is the part of the partner whose digit is d),
// on every rank of the round alike, so that they hold the same bits.
func combineDigits(r Reducer, dst []byte, parts [][]byte) {
	r.K3(dst, parts[0], parts[1])
	for _, p := range parts[2:] {
		r.K(dst, p)
	}
}

// halvingRound returns round k's first bit and radix for recursive
// halving on 2^log ranks: the bits of rdRound(k, log), counted from the
// highest, so that the part a rank keeps is contiguous (the blocks of
// the ranks that share its higher digits).
func halvingRound(k, log int) (shift, radix int) {
	s, radix := rdRound(k, log)
	return log - s - bitsOf(radix), radix
}

// bitsOf returns log₂ of a radix of 2 or 4.
func bitsOf(radix int) int { return radix / 2 }

// gatherDoubling is an allgather of one chunk (the call's whole output,
// at most RDMax bytes, on a power of two ranks: gatherDoubles) by
// recursive doubling. In round k the ranks that differ only in bits
// [shift, shift+log₂ radix) of their number (rdRound) exchange the blocks
// that each has gathered so far: those of the 2^shift ranks that share
// its higher bits, contiguous in out. After the last round every rank
// holds all n. As the doubling allreduce, it reads a few partners a round
// instead of every rank's flag line at once, and reuses its entries
// without waiting (doubling.go). One call in rdSample goes flat, so that
// every rank's arrival stamps are seen.
func (g *Group) gatherDoubling(c *Call, in, out []byte) error {
	f, s := g.rdStart()
	blk, me := len(in), g.rank
	_, log := g.doublingShape()
	rounds := rdRounds(log)
	// Take back the lines this call writes (see doubling.go).
	for k := range rounds {
		g.ownEntry(s, 1+k, blk<<(2*k))
	}
	copy(out[me*blk:(me+1)*blk], in)
	for k := range rounds {
		shift, radix := rdRound(k, log)
		b := blk << shift // the blocks of 2^shift ranks
		lo := me &^ (1<<shift - 1) * blk
		copy(g.rdBuf(me, s, 1+k, b), out[lo:lo+b])
		g.rdPublish(s, 1+k, f, c.Sig, b)
		mine := me >> shift & (radix - 1)
		for d := range radix {
			if d == mine {
				continue
			}
			q := rdPartner(me, shift, radix, d)
			w, err := g.rdRead(c, q, s, 1+k, f, b, "the blocks it gathered")
			if err != nil {
				return err
			}
			qlo := q &^ (1<<shift - 1) * blk
			copy(out[qlo:qlo+b], w)
		}
	}
	g.finish(f, c.Sig)
	return nil
}

// awaitLine waits for rank q's flag line l to carry chunk f, checks its
// signature and length (nbytes), and returns it; input says that it
// carries q's arrival stamp (Call.Arrivals). what says what is awaited.
func (g *Group) awaitLine(c *Call, q int, l []byte, f uint64, nbytes int, what string, input bool) ([]byte, error) {
	seq := u64(l[flagSeq:])
	v := atomic.LoadUint64(seq)
	if v < f {
		done := u64(g.line(q, lineDone))
		if c.wake != nil {
			c.recheck = reachedEither(seq, done, f)
		}
		for i := 1; v < f; i++ {
			if i&7 == 0 && atomic.LoadUint64(done) >= f {
				// q finished chunk f; unless it published the flag before
				// (it stores the flag first), it did not publish what this
				// call reads from it: it made another call.
				if v = atomic.LoadUint64(seq); v >= f {
					break
				}
				return nil, &MismatchError{Peer: q, Skipped: true}
			}
			if err := c.idle(q, what, f-c.chunk0); err != nil {
				return nil, err
			}
			v = atomic.LoadUint64(seq)
		}
		c.arrived()
	}
	sig := *u32(l[flagSig:])
	n := int(*u32(l[flagLen:]) &^ (flagDirect | flagCMA))
	if v != f || sig != c.Sig || n != nbytes {
		return nil, &MismatchError{Peer: q, Sig: sig, Want: c.Sig}
	}
	if input && c.Arrivals != nil {
		c.Arrivals[q] = *u64(l[flagArrive:])
	}
	return l, nil
}
