package shmcoll

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/internal/par"
	"github.com/braid-ccl/braid/internal/reduce"
	"github.com/braid-ccl/braid/transport"
)

// Layout of a block.
const (
	lineSize  = 64
	inline    = lineSize - 24 // data bytes that travel inside a flag line
	ring      = 8             // flag lines per kind: chunk f uses line f mod ring
	lineDone  = 2 * ring      // the last chunk the owner finished, and its running hash
	histLen   = 16
	lineHist  = lineDone + 1 // two lines: the running hash after chunk f, at word f mod histLen
	dataOff   = 2048         // the slots start here
	slotIn    = 0
	slotRes   = 1
	minSlot   = 4 << 10
	maxSlot   = 16 << 20
	maxRanks  = 4096
	flagSeq   = 0 // uint64
	flagSig   = 8 // uint32
	flagLen   = 12
	flagBytes = 16
	// flagPos holds, in the flag line of a chunk too large for the line
	// that its writer placed (slotAt: a broadcast's chunk, and those of
	// placed), where in its slot the writer put it.
	flagPos = flagBytes
	// flagArrive holds the writer's arrival stamp (Call.Arrive) in an
	// input flag line, after the inline data.
	flagArrive = lineSize - 8
)

// DefaultSlot is the size of a data slot, the largest chunk a collective
// moves at once, for groups of up to 8 ranks; SlotFor gives it for others.
// On the 16-core node, 16 ranks ran 1–16 MiB allreduces and
// reduce-scatters 10–40 % faster with 1 MiB slots than with 256 KiB, and
// 64 KiB slots were slower still (docs/PERFORMANCE.md).
const DefaultSlot = 1 << 20

// areaBudget bounds the default area of a group: four slots a rank.
const areaBudget = 32 << 20

// SlotFor returns the default slot of a group of n ranks: DefaultSlot, cut
// so that the group's four slots a rank fit in 32 MiB of /dev/shm (512 KiB
// at 16 ranks, 128 KiB at 64), and at least 64 KiB.
func SlotFor(n int) int {
	s := areaBudget / 4 / max(n, 1)
	s = s &^ (64<<10 - 1)
	return min(DefaultSlot, max(s, 64<<10))
}

// DefaultChainMin and DefaultChainRanks: an allreduce's chunks of at least
// DefaultChainMin bytes, on at least DefaultChainRanks ranks, go along the
// pipelined chain in rank order (the arrival-aware chain's code with a
// fixed order) instead of the two phases. On the 16-core node, balanced,
// the chain took 0.61–0.91 of the two phases' time at 256 KiB–16 MiB on 8
// and 16 ranks, and 1.6–3.2 times it at 4–32 KiB (docs/PERFORMANCE.md,
// session 11); on 4 ranks 0.62–0.88 at 4 MiB, 0.89–0.99 at 16 MiB and
// 0.86–1.07 at 64 MiB (session 12, three rounds); it loses on 2 ranks
// (this VM), where the planner runs segring from 256 KiB anyway.
const (
	DefaultChainMin   = 256 << 10
	DefaultChainRanks = 4
)

// DefaultFlatMax is the largest chunk an allreduce or reduce of fewer
// than 16 ranks combines in one phase (every rank reads every input);
// larger chunks take two phases (reduce-scatter, then allgather) so that
// each rank reads each byte once. FlatMaxFor gives it for more ranks.
const DefaultFlatMax = 2 << 10

// minFlatMax is the least FlatMaxFor gives.
const minFlatMax = 256

// FlatMaxFor returns the default FlatMax of a group of n ranks:
// DefaultFlatMax below 16 ranks, halved at 16 and at each doubling beyond
// (1 KiB from 16 ranks, 512 B from 32), and at least 256 B. A flat chunk
// makes every rank read n inputs, so the lines all ranks read grow as n²;
// two phases read each byte once, for one more synchronisation.
//
// On the 16-core node (session 13, docs/PERFORMANCE.md) 16 ranks allreduced
// 1 KiB flat in 7.0 µs and 4 KiB in two phases in 7.8, while the planner,
// which prices a flat 2 KiB above a two-phase 4 KiB there, ran 2 KiB with
// recursive doubling in 13.0 (Open MPI 11.5). 8 ranks took 5.9 µs flat at
// 2 KiB and 6.1 in two phases at 4 KiB. With ranks that outnumber the
// cores the extra synchronisation costs more than the reads: on the 2-core
// VM, 9 and 12 ranks allreduced 2 KiB flat in 21-31 µs and in two phases in
// 34-53, so the limit stays 2 KiB below 16 ranks. (16 ranks there: flat
// 2 KiB 43-45 µs, two phases 70-71, recursive doubling, which the planner
// took before, 122-143; it now takes the area, whose calls the arrival
// planner moved to the arrival-aware allreduce, 41-44.)
//
// Two ranks take one phase up to 4 KiB: each reads the other's whole
// input either way, so one phase saves a synchronisation. On the 16-core
// node a 2-rank 4 KiB allreduce through the area took 1.92 µs in one phase
// and 2.16 in two, while at 16 KiB one phase lost (4.94 against 4.23;
// session 18, BenchmarkArea).
func FlatMaxFor(n int) int {
	if n == 2 {
		return 2 * DefaultFlatMax
	}
	m := DefaultFlatMax
	for k := 16; k <= n && m > minFlatMax; k *= 2 {
		m /= 2
	}
	return m
}

// BlockSize returns the bytes of one rank's block for the given slot size:
// the lines, four slots and the region of recursive doubling.
func BlockSize(slot int) int { return dataOff + 4*slot + rdRegion }

// Group is one rank's handle on the area of a group of ranks. Its
// collectives must be entered in ticket order (see Ticket); a Group is not
// safe for concurrent calls otherwise.
type Group struct {
	rank, n int
	slot    int
	flatMax int
	// chunks of chainMin bytes and more, on chainRanks ranks and more,
	// take the rank-order pipelined chain (Options.ChainMin)
	chainMin, chainRanks int
	bcastSeg             int         // a broadcast's chunk if positive (Options.BcastSeg)
	rdMax, rdRanks       int         // recursive doubling's scope (Options.RDMax, RDRanks)
	rdCalls, rdSeen      uint64      // calls that doubled, and calls that could have (doubling.go)
	blocks               [][]byte    // blocks[q]: rank q's block, mapped here
	srcs                 [][]byte    // scratch: one source per rank
	rdAll                []byte      // scratch: a doubling reduce-scatter's whole result (rdCap bytes)
	comb                 combineTask // scratch: combine's work

	f     uint64 // the last chunk this rank used
	known uint64 // every rank has finished reading chunk known

	// Every rank keeps a running hash of the signatures of its chunks and
	// publishes it with its done line, so that ranks whose calls disagree
	// find out even when neither read the other's flag (two roots of a
	// broadcast, say): see verify.
	hash    uint64
	hist    [histLen]uint64 // hash after chunk f, at f mod histLen
	partial bool            // the last call did not read every rank's input flag
	sink    uint64          // keeps touch's loads
	stamp   uint64          // the current call's Call.Arrive
	wake    *wake           // goroutine ranks: woken whenever a rank publishes

	// Registered memory (direct.go): the writer's side of the current
	// call, and counts of the chunks published and read by reference.
	mem       Memory
	directMin int
	dir       directIn
	// Single copy by address (cma.go): the scope, and whether every rank
	// can read every other's process (cmaYes, cmaNo; 0: not known yet;
	// atomic, so that a reader outside the calls' order needs no lock).
	cmaMin, cmaRanks int
	cma              atomic.Uint64
	lastPub          uint64 // the last chunk this rank published by reference
	published        atomic.Uint64
	readDirect       atomic.Uint64

	// verified is this rank's copy of its verification line (lineVer),
	// which the others read: the latest verification it published as a
	// confirmation's aggregator (Confirm).
	verified atomic.Uint64

	tickets atomic.Uint64 // handed out by Ticket
	served  atomic.Uint64 // the last ticket whose call ended
	broken  atomic.Pointer[error]

	release func() error
}

// Rank returns this rank's index in the group.
func (g *Group) Rank() int { return g.rank }

// Size returns the number of ranks in the group.
func (g *Group) Size() int { return g.n }

// Slot returns the size of a data slot: the largest chunk.
func (g *Group) Slot() int { return g.slot }

// FlatMax returns the largest chunk an allreduce reduces in one phase.
func (g *Group) FlatMax() int { return g.flatMax }

// Chained reports whether an allreduce's chunk of b bytes goes along the
// rank-order pipelined chain rather than the two phases.
func (g *Group) Chained(b int) bool { return g.chainMin > 0 && g.n >= g.chainRanks && b >= g.chainMin }

// Goroutines reports whether the group's ranks are goroutines of one
// process (NewLocal), which share that process's threads and its copy
// pool (package par) instead of each having their own.
func (g *Group) Goroutines() bool { return g.wake != nil }

// Close unmaps the area (or forgets it, for goroutine ranks).
func (g *Group) Close() error {
	if g.release == nil {
		return nil
	}
	r := g.release
	g.release = nil
	return r()
}

// Ticket returns the place of the next call in this rank's order. The
// caller takes tickets in the order of the communicator's calls (under the
// same lock as its sequence numbers), and passes each to the call.
func (g *Group) Ticket() uint64 { return g.tickets.Add(1) }

// Call is how one collective waits and what it carries.
type Call struct {
	Ctx    context.Context
	Ticket uint64 // from Ticket
	Sig    uint32 // the signature of the call's arguments; every rank's must match
	// Fail, if not nil, reports a failure of the communicator noticed
	// elsewhere; a waiting call ends with it.
	Fail func() error
	// Timeout, if not zero, ends a call that has waited this long without
	// progress.
	Timeout time.Duration
	// Stall, if not nil, is called from the waiting goroutine when a wait
	// for rank q has lasted StallAfter without progress (what says what
	// was awaited): once for each rank the call waits for in turn, so
	// that the caller can ask q whether it waits too, and tell the ranks
	// that wait for this one that it does.
	Stall      func(seq uint32, q int, what string)
	StallAfter time.Duration
	// Name names the call in errors ("allreduce"), and Seq numbers it (the
	// communicator's sequence number).
	Name string
	Seq  uint32
	// Arrive is this rank's arrival stamp, opaque here (the caller's
	// clock): it travels in the call's input flag lines. Arrivals, if
	// not nil, has one word per rank and receives, by rank, this rank's
	// own stamp and those of the ranks whose input flag it read (every
	// rank's in allreduce, allgather, reducescatter and barrier; the
	// root's in bcast; in reduce, the root reads every rank's, the others
	// only when a chunk exceeds FlatMax; in an allreduce by recursive
	// doubling, only its partners', except in one such call in 16);
	// zero for the others.
	Arrive   uint64
	Arrivals []uint64
	// Confirmed says that the caller confirms this call (Confirm, with
	// its Last) before it reports any later call's success, or agreed with
	// every rank on it before it began. A call that does not read every
	// rank's input otherwise makes the next call compare running hashes
	// as it enters (verify): a read of a peer's line per call, which the
	// caller's confirmation makes needless.
	Confirmed bool

	// Last is set when the call ends well: the last chunk it used, which
	// Confirm takes.
	Last uint64

	// Spin is how long a wait polls before it yields the thread
	// (transport.Backoff's Spin): 0 means 64 polls, for ranks that may
	// share cores. The communicator passes its spin: 50 µs while every
	// rank of the host has a core. With 64 polls, 16 ranks on the 16-core
	// node spent a fifth of an 8-byte allreduce's profile in sched_yield,
	// each yield outlasting the wait it interrupted (session 18).
	// A positive Spin also keeps a wait yielding its thread between polls
	// for up to OwnCoreYield before it sleeps (pace).
	Spin time.Duration

	bo      transport.Backoff // paces a wait (Spin, pace)
	whole   int               // the bytes of every rank's input of the call (direct.go)
	outLen  int               // the bytes of the call's output, for par.CopyOut (the chain's)
	wake    *wake             // goroutine ranks: the group's wake-up
	recheck func() bool       // whether what the current wait awaits is there
	timer   *time.Timer
	polls   int
	since   time.Time // when the current slow wait began
	stalled int       // 1 + the rank Stall was last called for; 0: none
	chunk0  uint64
	try     bool // TryConfirm: a wait ends the confirmation with errWouldWait
}

// WaitError reports a wait that ended before the awaited rank arrived.
type WaitError struct {
	Peer  int    // the rank waited for
	Seq   uint32 // the call (Call.Seq)
	What  string // what was awaited
	Chunk uint64 // the call's chunk, counted from 1
	Err   error  // transport.ErrTimeout (Call.Timeout), the context's error, or Fail's
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("waited for rank %d (call %d, chunk %d: %s): %v", e.Peer, e.Seq, e.Chunk, e.What, e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// MismatchError reports a rank that made another call than this one.
type MismatchError struct {
	Peer      int
	Sig, Want uint32
	// Earlier is set when the disagreement was found in the running hashes
	// of the calls before this one (Sig and Want are then zero).
	Earlier bool
	// Skipped is set when the peer finished the chunk without publishing
	// what this call reads from it (a root that is not the root here).
	Skipped bool
}

func (e *MismatchError) Error() string {
	if e.Skipped {
		return fmt.Sprintf("rank %d went past this call without sending what it needs from it: the ranks called with different collectives or roots", e.Peer)
	}
	if e.Earlier {
		return fmt.Sprintf("rank %d made other calls than this rank before this one: the ranks called with different collectives, counts, dtypes, ops or roots", e.Peer)
	}
	return fmt.Sprintf("rank %d made a call with other arguments (signature %08x, here %08x): the ranks called with different collectives, counts, dtypes, ops or roots", e.Peer, e.Sig, e.Want)
}

// ErrBroken is returned by every call after one failed part-way: the ranks'
// chunk numbers no longer agree.
var ErrBroken = errors.New("shmcoll: an earlier call failed part-way; the group cannot be used")

// Reducer is how a reducing collective combines elements.
type Reducer struct {
	ElemSize int
	K        reduce.Kernel  // dst = dst op src
	K3       reduce.Kernel3 // dst = a op b
}

// flag returns rank q's flag line of kind for chunk f.
func (g *Group) flag(q, kind int, f uint64) []byte {
	return g.line(q, kind*ring+int(f%ring))
}

func (g *Group) line(q, l int) []byte {
	return g.blocks[q][l*lineSize : (l+1)*lineSize : (l+1)*lineSize]
}

func u64(b []byte) *uint64 { return (*uint64)(unsafe.Pointer(&b[0])) }
func u32(b []byte) *uint32 { return (*uint32)(unsafe.Pointer(&b[0])) }

func (g *Group) slotBuf(q, kind, p int) []byte {
	off := dataOff + (2*kind+p)*g.slot
	return g.blocks[q][off : off+g.slot : off+g.slot]
}

// enter waits for the call's turn and checks that the group is usable.
func (g *Group) enter(c *Call) error {
	if e := g.broken.Load(); e != nil {
		return *e
	}
	for i := 0; g.served.Load() != c.Ticket-1; i++ {
		if i&63 == 0 {
			if err := c.Ctx.Err(); err != nil {
				return err
			}
		}
		runtime.Gosched()
	}
	if e := g.broken.Load(); e != nil {
		g.served.Store(c.Ticket)
		return *e
	}
	c.chunk0 = g.f
	if g.cma.Load() == 0 {
		g.cmaOn() // every rank probes, writer or not (cma.go)
	}
	c.wake = g.wake
	c.pace()
	g.stamp = c.Arrive
	if len(c.Arrivals) == g.n {
		clear(c.Arrivals)
		c.Arrivals[g.rank] = c.Arrive
	} else {
		c.Arrivals = nil
	}
	if g.partial {
		// The last call did not see every rank's signature: compare the
		// running hashes of the ranks that have finished it.
		g.partial = false
		return g.verify(false)
	}
	return nil
}

// verify compares the running hash of a rank that has finished a chunk
// this rank remembers with this rank's own hash after that chunk: of every
// rank if all is set, else of one reference rank (rank 0, or rank 1 on
// rank 0). One is enough between calls: if any two ranks' histories
// differ, some rank's differs from its reference's, and that rank fails
// the job, which ends every rank's calls; a line a call instead of n−1
// keeps a broadcast's next call cheap.
func (g *Group) verify(all bool) error {
	ref := 0
	if g.rank == 0 {
		ref = 1
	}
	for q := range g.n {
		if q == g.rank || !all && q != ref {
			continue
		}
		l := g.line(q, lineDone)
		d := atomic.LoadUint64(u64(l))
		if d == 0 || d > g.f || g.f-d >= histLen {
			continue
		}
		h := atomic.LoadUint64(u64(l[8+8*(d&1):]))
		if atomic.LoadUint64(u64(l)) != d {
			continue // it moved on meanwhile
		}
		if h != g.hist[d%histLen] {
			return &MismatchError{Peer: q, Earlier: true}
		}
	}
	return nil
}

// Skip gives up the call of ticket without running it (its caller found
// the call wrong before it began): it waits for the ticket's turn, breaks
// the group (the other ranks' chunk numbers now run ahead of this one's)
// and lets the next ticket go.
func (g *Group) Skip(ctx context.Context, ticket uint64) {
	for i := 0; g.served.Load() != ticket-1; i++ {
		if i&63 == 0 && ctx.Err() != nil {
			break
		}
		runtime.Gosched()
	}
	e := ErrBroken
	g.broken.CompareAndSwap(nil, &e)
	g.served.Store(ticket)
}

// leave ends the call's turn, once the readers of its input published by
// reference are done with it; a failed call breaks the group.
func (g *Group) leave(c *Call, err error) error {
	if derr := g.endDirect(c, err != nil); err == nil {
		err = derr
	}
	if err != nil {
		e := ErrBroken
		g.broken.CompareAndSwap(nil, &e)
	} else {
		c.Last = g.f
	}
	g.served.Store(c.Ticket)
	return err
}

// OwnCoreYield is how long a wait of a rank with a core of its own (a
// positive Call.Spin) yields its thread between polls before it sleeps;
// other waits yield for transport.YieldFor (2 ms).
//
// No rank can wake a rank of another process that sleeps on the area, so
// a sleeping rank notices its peer up to a sleep late (up to
// transport.MaxSleep, 2 ms). In a call of many chunks that lateness
// spreads: the ranks waiting for the late one wait long enough to sleep
// in turn. Under injected imbalance on the 16-core node (`braid bench
// --imbalance 20` and 50, 16 ranks, a rank's compute before each call
// drawn up to 1–35 ms), the 16-rank allreduce of 1 MiB through the area
// took 10.6–28 times its balanced time after the last rank arrived, and
// 1.07–1.45 times with a yield phase of a second (session 29, m1). A
// rank with a core of its own takes nothing from its peers by yielding,
// as Open MPI's ranks poll without end; past a second it sleeps, so that
// a job stopped for longer (a rank writing a checkpoint) does not keep
// every core busy, and the lateness is small beside such a wait.
const OwnCoreYield = time.Second

// pace sets the call's wait policy from Spin.
func (c *Call) pace() {
	c.bo.Spin, c.bo.Yield = c.Spin, 0
	if c.Spin > 0 {
		c.bo.Yield = OwnCoreYield
	}
}

// idle is one empty poll of a wait for rank q.
func (c *Call) idle(q int, what string, chunk uint64) error {
	c.polls++
	if c.polls&63 == 0 {
		var err error
		if err = c.Ctx.Err(); err == nil && c.Fail != nil {
			err = c.Fail()
		}
		if err == nil && (c.Timeout > 0 || c.Stall != nil && c.stalled != q+1) {
			now := time.Now()
			switch {
			case c.since.IsZero():
				c.since = now
			case c.Timeout > 0 && now.Sub(c.since) > c.Timeout:
				err = transport.ErrTimeout
			case c.Stall != nil && c.stalled != q+1 && now.Sub(c.since) >= c.StallAfter:
				c.stalled = q + 1
				c.Stall(c.Seq, q, what)
			}
		}
		if err != nil {
			return &WaitError{Peer: q, Seq: c.Seq, What: what, Chunk: chunk, Err: err}
		}
	}
	if c.wake != nil {
		// Goroutine ranks: a waiter that spins or yields its thread keeps
		// its processor from the rank it waits for. After a few turns it
		// blocks until some rank of the group publishes something (the
		// caller then polls again), or a millisecond passes.
		if c.polls < 32 {
			runtime.Gosched()
			return nil
		}
		ch := c.wake.chan_()
		if c.recheck != nil && c.recheck() {
			return nil
		}
		if c.timer == nil {
			c.timer = time.NewTimer(time.Millisecond)
		} else {
			c.timer.Reset(time.Millisecond)
		}
		select {
		case <-ch:
		case <-c.timer.C:
		}
		c.timer.Stop()
		return nil
	}
	c.bo.Idle(nil)
	return nil
}

// arrived resets the wait's clocks after progress.
func (c *Call) arrived() {
	if c.polls != 0 {
		c.bo.Reset()
		c.polls = 0
		c.since = time.Time{}
	}
}

// next takes the next chunk number.
func (g *Group) next() uint64 {
	g.f++
	return g.f
}

// claim waits until every rank has finished the last chunk that used what
// this rank writes for chunk f: chunk f−ring for data inside a flag line
// (small), chunk f−2 for a slot.
func (g *Group) claim(c *Call, f uint64, small bool) error {
	back := uint64(2)
	if small {
		back = ring
	}
	return g.claimBack(c, f, back)
}

// claimBack waits until every rank has finished chunk f−back (at most
// ring chunks back: the flag lines' reuse).
func (g *Group) claimBack(c *Call, f, back uint64) error {
	if f <= back || g.known >= f-back {
		return nil
	}
	// Ask for more than needed, so that the next claims find it known.
	low := ^uint64(0)
	for q := range g.n {
		if q == g.rank {
			continue
		}
		d := u64(g.line(q, lineDone))
		v := atomic.LoadUint64(d)
		if c.wake != nil {
			c.recheck = reached(d, f-back)
		}
		for v < f-back {
			if err := c.idle(q, "the end of an earlier chunk", f-c.chunk0); err != nil {
				return err
			}
			v = atomic.LoadUint64(d)
		}
		c.arrived()
		low = min(low, v)
	}
	g.known = max(g.known, low)
	return nil
}

// reached returns a recheck (Call.recheck) of whether *w ≥ f. The
// closures are made here, not where they are used, so that the variables
// they capture escape only for goroutine ranks (which wait with a
// recheck): processes' calls allocate nothing.
func reached(w *uint64, f uint64) func() bool {
	return func() bool { return atomic.LoadUint64(w) >= f }
}

// reachedEither returns a recheck of whether *a ≥ f or *b ≥ f.
func reachedEither(a, b *uint64, f uint64) func() bool {
	return func() bool { return atomic.LoadUint64(a) >= f || atomic.LoadUint64(b) >= f }
}

// sawAll records that this rank saw every rank's input of chunk f: each of
// them had finished chunk f−1.
func (g *Group) sawAll(f uint64) { g.known = max(g.known, f-1) }

// finish publishes that this rank has read everything of chunk f, and the
// running hash of its calls' signatures up to f.
func (g *Group) finish(f uint64, sig uint32) {
	h := (g.hash ^ uint64(sig)) * 0x9e3779b97f4a7c15
	h ^= h >> 29
	g.hash = h
	g.hist[f%histLen] = h
	// The hash of chunk f goes to word 1 + f mod 2, which a reader of
	// chunk f−1's hash does not read; it checks that the chunk number did
	// not move while it read.
	// The hashes go first, published by the release of the chunk number
	// (a reader loads the number before and after them).
	l := g.line(g.rank, lineDone)
	g.storeWord(u64(l[8+8*(f&1):]), h)
	g.storeWord(g.histWord(g.rank, f), h)
	g.publishWord(u64(l), f)
	if g.wake != nil {
		g.wake.kick()
	}
}

// publishWord publishes v at *p, a word of this rank's block that other ranks
// load atomically, after every earlier store of this rank's call. Ranks
// that are processes store it with release order only (storeRelease): on
// amd64 a plain store, where atomic.StoreUint64 is a locked exchange that
// waits until the line is this core's again, which the peers that polled
// it had taken. On the 16-core node that wait was a fifth of a 2-rank
// 8-byte allreduce's profile (session 18, docs/PERFORMANCE.md); the store
// now drains while the rank polls its peers' lines. Goroutine ranks keep
// the sequentially consistent store that Go's memory model knows.
func (g *Group) publishWord(p *uint64, v uint64) {
	if g.wake != nil {
		atomic.StoreUint64(p, v)
		return
	}
	storeRelease(p, v)
}

// storeWord stores v at *p, a word of this rank's block that a later
// publishWord publishes: a plain store for processes on amd64
// (storePlain), an atomic one elsewhere, for goroutine ranks and under
// the race detector, whose readers may load it while it changes.
func (g *Group) storeWord(p *uint64, v uint64) {
	if g.wake != nil {
		atomic.StoreUint64(p, v)
		return
	}
	storePlain(p, v)
}

// buf returns where this rank writes nbytes of kind (slotIn or slotRes)
// for chunk f: inside the flag line when they fit, else the slot.
func (g *Group) buf(kind int, f uint64, nbytes int) []byte {
	if nbytes <= inline {
		return g.flag(g.rank, kind, f)[flagBytes : flagBytes+nbytes]
	}
	return g.slotBuf(g.rank, kind, int(f&1))[:nbytes]
}

// commit publishes what buf returned as chunk f.
func (g *Group) commit(kind int, f uint64, sig uint32, nbytes int) {
	l := g.flag(g.rank, kind, f)
	if kind == slotIn {
		*u64(l[flagArrive:]) = g.stamp
	}
	g.publishLine(l, f, sig, uint32(nbytes))
}

// publishLine publishes this rank's flag line l as chunk f of signature
// sig and length word n: plain stores of the two, which the release of the
// chunk number then publishes (with the data and whatever else the caller
// stored in the line) to a reader that loads it atomically.
func (g *Group) publishLine(l []byte, f uint64, sig, n uint32) {
	*u32(l[flagSig:]) = sig
	*u32(l[flagLen:]) = n
	g.publishWord(u64(l[flagSeq:]), f)
	if g.wake != nil {
		g.wake.kick()
	}
}

// read waits for rank q's chunk f of kind and returns its data, which must
// be nbytes long (and not published by reference: see readIn), from the
// start of q's slot if it is too large for the flag line.
func (g *Group) read(c *Call, q, kind int, f uint64, nbytes int) ([]byte, error) {
	return g.readAt(c, q, kind, f, nbytes, false)
}

// readPlaced is read of a chunk whose writer placed it (placed): where
// its flag line says, if it is too large for the line.
func (g *Group) readPlaced(c *Call, q, kind int, f uint64, nbytes int) ([]byte, error) {
	return g.readAt(c, q, kind, f, nbytes, true)
}

func (g *Group) readAt(c *Call, q, kind int, f uint64, nbytes int, placed bool) ([]byte, error) {
	l, err := g.await(c, q, kind, f, nbytes)
	if err != nil {
		return nil, err
	}
	if *u32(l[flagLen:])&flagDirect != 0 {
		return nil, &MismatchError{Peer: q, Sig: *u32(l[flagSig:]), Want: c.Sig}
	}
	if nbytes <= inline {
		return l[flagBytes : flagBytes+nbytes], nil
	}
	pos := 0
	if placed {
		if pos = int(*u32(l[flagPos:])); pos > g.slot-nbytes {
			return nil, &MismatchError{Peer: q, Sig: *u32(l[flagSig:]), Want: c.Sig}
		}
	}
	return g.slotBuf(q, kind, int(f&1))[pos : pos+nbytes], nil
}

// await waits for rank q's flag line of kind for chunk f, checks its
// signature and length (nbytes), and returns it.
func (g *Group) await(c *Call, q, kind int, f uint64, nbytes int) ([]byte, error) {
	what := "its input"
	if kind == slotRes {
		what = "its share of the result"
	}
	return g.awaitLine(c, q, g.flag(q, kind, f), f, nbytes, what, kind == slotIn)
}

// touch loads every rank's flag of kind for chunk f without waiting: the
// loads are independent, so the processor overlaps their cache misses,
// and the reads that follow, in rank order, find the lines (with data of
// up to 40 bytes) in the cache instead of missing on each in turn.
func (g *Group) touch(kind int, f uint64) {
	var sum uint64
	for q := range g.n {
		sum += atomic.LoadUint64(u64(g.flag(q, kind, f)))
	}
	g.sink = sum
}

// block returns the elements [lo, hi) of the q-th of n blocks of m elements.
func block(m, n, q int) (lo, hi int) {
	b, r := m/n, m%n
	lo = q*b + min(q, r)
	hi = lo + b
	if q < r {
		hi++
	}
	return lo, hi
}

// chunks returns the chunk size for total bytes of elements of es bytes
// with at most limit bytes a chunk, and the number of chunks (at least one,
// so that every rank takes the same chunk numbers even for no data).
func chunks(total, es, limit int) (size, count int) {
	if es&(es-1) == 0 {
		// Every dtype's size is a power of two: no divisions, which
		// were a twentieth of a small call's fixed cost.
		size = max(es, limit&^(es-1))
	} else {
		size = max(es, limit/es*es)
	}
	if total <= size {
		return size, 1
	}
	return size, (total + size - 1) / size
}

// combine writes dst = srcs[0] op srcs[1] op ... in order; a large dst is
// split at element bounds across the rank's threads (package par), each
// piece combined from every source while it is in cache.
func (g *Group) combine(r Reducer, dst []byte, srcs [][]byte) {
	if len(dst) < par.MinSize() {
		// Not split: the reducers directly, without the task's set-up
		// (a small allreduce's every call).
		if len(srcs) == 1 {
			copy(dst, srcs[0])
			return
		}
		r.K3(dst, srcs[0], srcs[1])
		for _, s := range srcs[2:] {
			r.K(dst, s)
		}
		return
	}
	t := &g.comb
	t.r, t.dst, t.srcs = r, dst, srcs
	par.Run(len(dst), r.ElemSize, t)
	*t = combineTask{}
}

// combineTask is combine's work, kept in the Group so that passing it to
// par.Run allocates nothing.
type combineTask struct {
	r    Reducer
	dst  []byte
	srcs [][]byte
}

func (t *combineTask) Piece(lo, hi int) {
	dst, srcs := t.dst[lo:hi], t.srcs
	if len(srcs) == 1 {
		copy(dst, srcs[0][lo:hi])
		return
	}
	t.r.K3(dst, srcs[0][lo:hi], srcs[1][lo:hi])
	for _, s := range srcs[2:] {
		t.r.K(dst, s[lo:hi])
	}
}

// Allreduce combines in from every rank into out on every rank (in and out
// may be the same buffer).
func (g *Group) Allreduce(c *Call, in, out []byte, r Reducer) (err error) {
	if err := g.enter(c); err != nil {
		return err
	}
	defer func() { err = g.leave(c, err) }()
	size, count := chunks(len(in), r.ElemSize, g.slot)
	if g.doubled(g.reduceDoubles(len(in))) {
		return g.reduceDoubling(c, in, out, r)
	}
	if size > g.flatMax && !g.Chained(size) {
		g.startDirect(c, in, len(in), false)
	}
	c.outLen = len(out)
	for i := range count {
		off := i * size
		b := min(size, len(in)-off)
		switch {
		case b <= g.flatMax:
			err = g.reduceFlat(c, in[off:off+b], out[off:off+b], r, -1)
		case g.Chained(b):
			g.partial = g.n > 1 && !c.Confirmed
			err = g.chainChunk(c, in[off:off+b], out[off:off+b], r, -1, true)
		default:
			err = g.reduceTwo(c, in[off:off+b], out[off:off+b], r, -1, off)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Reduce combines in from every rank into out on root.
func (g *Group) Reduce(c *Call, in, out []byte, r Reducer, root int) (err error) {
	if err := g.enter(c); err != nil {
		return err
	}
	defer func() { err = g.leave(c, err) }()
	size, count := chunks(len(in), r.ElemSize, g.slot)
	if size > g.flatMax {
		g.startDirect(c, in, len(in), false)
	}
	for i := range count {
		off := i * size
		b := min(size, len(in)-off)
		var o []byte
		if g.rank == root {
			o = out[off : off+b]
		}
		if b <= g.flatMax {
			err = g.reduceFlat(c, in[off:off+b], o, r, root)
		} else {
			err = g.reduceTwo(c, in[off:off+b], o, r, root, off)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// reduceFlat is one chunk reduced by every reader of every input; root < 0
// means every rank.
func (g *Group) reduceFlat(c *Call, in, out []byte, r Reducer, root int) error {
	f := g.next()
	if err := g.claim(c, f, len(in) <= inline); err != nil {
		return err
	}
	b := len(in)
	par.Copy(g.buf(slotIn, f, b), in)
	g.commit(slotIn, f, c.Sig, b)
	if root >= 0 && g.rank != root {
		g.partial = !c.Confirmed
		g.finish(f, c.Sig)
		return nil
	}
	srcs := g.srcs
	g.touch(slotIn, f)
	for q := range g.n {
		s, err := g.read(c, q, slotIn, f, b)
		if err != nil {
			return err
		}
		srcs[q] = s
	}
	g.sawAll(f)
	g.combine(r, out, srcs)
	g.finish(f, c.Sig)
	return nil
}

// reduceTwo is one chunk, at pos in the call's input, reduced in two
// phases: rank q reduces the q-th slice of every input, then the readers
// copy the slices out.
func (g *Group) reduceTwo(c *Call, in, out []byte, r Reducer, root, pos int) error {
	f := g.next()
	if err := g.claim(c, f, len(in) <= inline); err != nil {
		return err
	}
	es := r.ElemSize
	b := len(in)
	direct := g.direct(b)
	g.publishIn(f, c.Sig, in, direct, g.part(f, b))
	m := b / es
	lo, hi := block(m, g.n, g.rank)
	srcs := g.srcs
	g.touch(slotIn, f)
	for q := range g.n {
		if q == g.rank && direct {
			srcs[q] = in[lo*es : hi*es]
			continue
		}
		s, err := g.readInMem(c, q, f, b)
		if err != nil {
			return err
		}
		srcs[q] = s.at(lo*es, pos+lo*es, (hi-lo)*es)
	}
	g.sawAll(f)
	mine := g.placed(slotRes, f, (hi-lo)*es)
	g.combine(r, mine, srcs)
	g.commit(slotRes, f, c.Sig, len(mine))
	if root < 0 || g.rank == root {
		for i := range g.n {
			q := (g.rank + i) % g.n
			qlo, qhi := block(m, g.n, q)
			s, err := g.readPlaced(c, q, slotRes, f, (qhi-qlo)*es)
			if err != nil {
				return err
			}
			par.CopyOut(out[qlo*es:qhi*es], s, len(out))
		}
	}
	g.finish(f, c.Sig)
	return nil
}

// Bcast copies root's buf to every rank's buf.
//
// The call moves in chunks of bcastChunk's size. The root copies chunk f
// into part (f/2) mod sub of its input slot f mod 2 (sub parts of a slot:
// up to 2·sub chunks in flight, where other collectives have two) and
// says which part in the chunk's flag line; the others copy each chunk
// out as soon as it is published.
func (g *Group) Bcast(c *Call, buf []byte, root int) (err error) {
	if err := g.enter(c); err != nil {
		return err
	}
	defer func() { err = g.leave(c, err) }()
	seg, sub := g.bcastChunk(len(buf))
	size, count := chunks(len(buf), 1, seg)
	// On two ranks the rank that is not the root reads the root's input
	// flag, every other rank's: nothing is left to compare.
	g.partial = g.n > 1 && !c.Confirmed && (g.n > 2 || g.rank == root)
	if g.rank == root {
		g.startDirect(c, buf, len(buf), true)
	} else {
		c.whole = len(buf)
	}
	for i := range count {
		off := i * size
		b := min(size, len(buf)-off)
		f := g.next()
		if g.rank != root {
			s, err := g.readIn(c, root, f, b)
			if err != nil {
				return err
			}
			if err := g.copyOut(c, f, s, buf[off:off+b], 0, off, len(buf)); err != nil {
				return err
			}
			g.finish(f, c.Sig)
			continue
		}
		direct := g.direct(b)
		// Chunk f's part of slot f mod 2 was last used by chunk f−2·sub
		// of this call, or by a chunk of an earlier call (of any layout)
		// that the call's first claims, two chunks back as other calls'
		// claims, leave in flight: chunk i of the call may run 2(i/2)+2
		// chunks ahead of the slowest reader, up to 2·sub.
		back := uint64(min(2*sub, 2*(i/2)+2))
		if b <= inline || direct {
			back = ring // the flag line alone
		}
		if err := g.claimBack(c, f, back); err != nil {
			return err
		}
		g.publishIn(f, c.Sig, buf[off:off+b], direct, int(f>>1)%sub*size)
		g.finish(f, c.Sig)
	}
	return nil
}

// bcastChunk returns the chunk of a broadcast of total bytes and how many
// such chunks a slot holds (sub, at most ring/2, so that the 2·sub chunks
// in flight keep their flag lines).
//
// A call of at most a quarter slot is one chunk placed in a quarter part:
// successive such calls go round the eight quarter parts of the two input
// slots instead of alternating between two whole slots. On this 2-core VM
// (2 ranks, 5 alternated rounds, medians of the slowest rank's mean over
// back-to-back calls) that took a 64 KiB broadcast from 6.7 to 4.8 µs and
// a 32 KiB one from 3.8 to 2.9 (4 ranks oversubscribed, 64 KiB: 15.0 to
// 11.4); 16 KiB and 128 KiB–16 MiB did not move. Larger calls go in
// whole slots: cutting them smaller (64 and 128 KiB chunks, up to eight
// in flight) pipelines the root's copy with the readers' within a call,
// but back-to-back calls overlap them across calls anyway, and smaller
// chunks (8 and 16 KiB) were up to twice as slow (a synchronisation and
// cold lines a chunk); Options.BcastSeg (BRAID_SHM_BCAST_SEG) sets the
// chunk to compare them elsewhere.
//
// The chunk depends only on total and the group's options, which every
// rank agrees on unless told otherwise: a rank whose chunks differ
// publishes chunks of other lengths, which its readers report as a
// mismatch, and where the lengths agree (calls of one chunk) the part of
// the slot travels in the chunk's flag line.
func (g *Group) bcastChunk(total int) (seg, sub int) {
	seg = g.slot
	switch {
	case g.bcastSeg > 0:
		seg = min(g.slot, max(lineSize, g.bcastSeg&^(lineSize-1)))
	case total <= g.slot/4:
		seg = g.slot / 4
	}
	return seg, max(1, min(g.slot/seg, ring/2))
}

// placed returns where this rank writes nbytes of kind (slotIn or
// slotRes) for chunk f: inside the flag line if they fit (buf), else at
// part(f, nbytes) of its slot, which the flag line names (slotAt), for
// readers that read it with readPlaced or readIn.
func (g *Group) placed(kind int, f uint64, nbytes int) []byte {
	if nbytes <= inline {
		return g.buf(kind, f, nbytes)
	}
	return g.slotAt(kind, f, g.part(f, nbytes), nbytes)
}

// part returns where in slot f mod 2 a chunk f of nbytes goes. A chunk of
// at most a quarter slot goes to quarter part (f/2) mod 4, the next such
// chunk's to the next part, as a broadcast's do (bcastChunk): the lines it
// writes were last read eight chunks back rather than two, which on the
// 16-core node took a 2-rank broadcast of 16 KiB from 3.7 to 2.4 µs and
// of 64 KiB from 7.0 to 5.2. The claim stays chunk f−2's, the last chunk
// that any layout used slot f mod 2 for. Larger chunks go to the slot's
// start.
func (g *Group) part(f uint64, nbytes int) int {
	if nbytes <= g.slot/4 {
		return int(f>>1) % 4 * (g.slot / 4)
	}
	return 0
}

// slotAt returns nbytes at pos of this rank's slot of kind for chunk f,
// and names pos in the chunk's flag line (flagPos).
func (g *Group) slotAt(kind int, f uint64, pos, nbytes int) []byte {
	*u32(g.flag(g.rank, kind, f)[flagPos:]) = uint32(pos)
	return g.slotBuf(g.rank, kind, int(f&1))[pos : pos+nbytes]
}

// publishIn publishes src as this rank's input of chunk f: by reference
// if direct (commitDirect), else inside the flag line if it fits, else
// copied to pos of slot f mod 2 (slotAt), where readIn finds it.
func (g *Group) publishIn(f uint64, sig uint32, src []byte, direct bool, pos int) {
	switch {
	case direct:
		g.commitDirect(f, sig, len(src))
		return
	case len(src) <= inline:
		copy(g.buf(slotIn, f, len(src)), src)
	default:
		par.Copy(g.slotAt(slotIn, f, pos, len(src)), src)
	}
	g.commit(slotIn, f, sig, len(src))
}

// Allgather copies every rank's in (blk bytes) to block q of every rank's
// out. in may be this rank's block of out.
func (g *Group) Allgather(c *Call, in, out []byte) (err error) {
	if err := g.enter(c); err != nil {
		return err
	}
	defer func() { err = g.leave(c, err) }()
	blk := len(in)
	if g.doubled(g.gatherDoubles(blk)) {
		return g.gatherDoubling(c, in, out)
	}
	size, count := chunks(blk, 1, g.slot)
	inPlace := blk > 0 && &in[0] == &out[g.rank*blk]
	g.startDirect(c, in, blk, true)
	for i := range count {
		off := i * size
		b := min(size, blk-off)
		f := g.next()
		direct := g.direct(b)
		if err := g.claim(c, f, b <= inline || direct); err != nil {
			return err
		}
		g.publishIn(f, c.Sig, in[off:off+b], direct, g.part(f, b))
		g.touch(slotIn, f)
		for k := range g.n {
			q := (g.rank + k) % g.n
			dst := out[q*blk+off : q*blk+off+b]
			switch {
			case q == g.rank && inPlace:
			case q == g.rank && direct:
				par.CopyOut(dst, in[off:off+b], len(out))
			default:
				s, err := g.readIn(c, q, f, b)
				if err != nil {
					return err
				}
				if err := g.copyOut(c, f, s, dst, 0, off, len(out)); err != nil {
					return err
				}
			}
		}
		g.sawAll(f)
		g.finish(f, c.Sig)
	}
	return nil
}

// ReduceScatter combines block q of every rank's in into rank q's out (in
// holds n blocks of len(out) bytes; out may be this rank's block of in).
func (g *Group) ReduceScatter(c *Call, in, out []byte, r Reducer) (err error) {
	if err := g.enter(c); err != nil {
		return err
	}
	defer func() { err = g.leave(c, err) }()
	es, blk := r.ElemSize, len(out)
	if g.slot/g.n < es {
		return fmt.Errorf("shmcoll: %d ranks do not fit an element of %d bytes each in a %d-byte slot", g.n, es, g.slot)
	}
	if g.doubled(g.scatterDoubles(len(in))) {
		return g.scatterDoubling(c, in, out, r)
	}
	size, count := chunks(blk, es, g.slot/g.n)
	srcs := g.srcs
	g.startDirect(c, in, len(in), false)
	inPlace := overlaps(in, out)
	for i := range count {
		off := i * size
		b := min(size, blk-off)
		f := g.next()
		direct := g.direct(g.n * b)
		// In place, this rank's own part of a chunk published by
		// reference is the chunk's output: it combines a copy of it, in
		// its result slot (which the claim of a whole chunk frees).
		if err := g.claim(c, f, g.n*b <= inline || direct && !inPlace); err != nil {
			return err
		}
		if direct {
			g.commitDirect(f, c.Sig, g.n*b)
		} else {
			dst := g.placed(slotIn, f, g.n*b)
			for q := range g.n {
				par.Copy(dst[q*b:(q+1)*b], in[q*blk+off:q*blk+off+b])
			}
			g.commit(slotIn, f, c.Sig, g.n*b)
		}
		g.touch(slotIn, f)
		for q := range g.n {
			if q == g.rank && direct {
				own := in[q*blk+off : q*blk+off+b]
				if inPlace {
					tmp := g.slotBuf(g.rank, slotRes, int(f&1))[:b]
					par.Copy(tmp, own)
					own = tmp
				}
				srcs[q] = own
				continue
			}
			s, err := g.readInMem(c, q, f, g.n*b)
			if err != nil {
				return err
			}
			srcs[q] = s.at(g.rank*b, g.rank*blk+off, b)
		}
		g.sawAll(f)
		g.combine(r, out[off:off+b], srcs)
		g.finish(f, c.Sig)
	}
	return nil
}

// Barrier returns once every rank has entered it.
func (g *Group) Barrier(c *Call) (err error) {
	if err := g.enter(c); err != nil {
		return err
	}
	defer func() { err = g.leave(c, err) }()
	f := g.next()
	if err := g.claim(c, f, true); err != nil {
		return err
	}
	g.commit(slotIn, f, c.Sig, 0)
	g.touch(slotIn, f)
	for k := range g.n {
		if _, err := g.read(c, (g.rank+k)%g.n, slotIn, f, 0); err != nil {
			return err
		}
	}
	g.sawAll(f)
	g.finish(f, c.Sig)
	// Every rank has finished every earlier chunk: compare the hashes.
	return g.verify(true)
}

// histWord returns rank q's word of the running hash after chunk f.
func (g *Group) histWord(q int, f uint64) *uint64 {
	return u64(g.blocks[q][lineHist*lineSize+8*int(f%histLen):])
}

// The verification line (lineVer) holds what the owner, as a
// confirmation's aggregator, published (Confirm). It is a line of its
// own, not words of the done line: the other ranks read it at every
// confirmation, and the owner writes its done line at every chunk
// (finish), so that on one line each of the owner's calls would take the
// line back from the readers twice (a broadcast loop's root: once to
// finish its chunk, once to publish the verification of the chunk
// before), where now its done line stays in its cache.
//
// The verification is one word, so that a reader never pairs a chunk with
// another chunk's hash: the chunk's low 32 bits above the hash's low 32
// bits (32 bits, as a call's signature has; chunks compare modulo 2^32,
// as sequence numbers do).
const (
	lineVer     = lineArrival + ring // after the arrival lines (pap.go)
	verVerified = 0                  // the latest chunk at which every rank's running hash equalled the owner's, and the hash (verWord)
	verBad      = 8                  // 1 + a rank whose running hash differed from the owner's; 0: none
)

// The verification line lies before the slots.
var _ = [1]struct{}{}[(lineVer+1)*lineSize/(dataOff+1)]

// verWord packs a verification of chunk at with hash h.
func verWord(at, h uint64) uint64 { return at<<32 | h&0xffffffff }

// verChunk returns the chunk of verification word w, near f.
func verChunk(w, f uint64) uint64 { return f + uint64(int64(int32(uint32(w>>32)-uint32(f)))) }

// Confirm returns once every rank has finished chunk f (a call's Last)
// and its running hash of the signatures of its chunks agrees with this
// rank's, or with a MismatchError (Earlier set) naming a rank whose does
// not: then that rank made other calls than this one up to chunk f. It is
// the shared area's lagged confirmation of a call that did not read every
// rank's input: the communicator calls it when its next call has ended,
// so that a broadcast's ranks, or a reduce's that are not the root, learn
// of a disagreement by then. Only c's Ctx, Fail, Timeout, Stall,
// StallAfter, Name and Seq are read. It may run beside this rank's
// next calls in the area.
//
// agg is the call's aggregator, a rank that confirms the call too (every
// rank that confirms a call must name the same one). The aggregator
// compares every rank's running hash with its own (confirmAll) and
// publishes the chunk it verified, with its hash, in its done line; every
// other rank reads that one line instead of n−1, comparing the
// aggregator's verified hash with its own. Equal cumulative hashes prove
// equal histories, so one comparison with a verified aggregator is as good
// as n−1 (and a 16-rank broadcast loop spent most of its time reading the
// others' lines). A rank whose history differs from the aggregator's
// finds it in the aggregator's running hash without waiting, so ranks
// that disagree on the aggregator itself (on a broadcast's root, say)
// still get a MismatchError rather than wait for a verification that
// never comes; an aggregator that finds a disagreement publishes the rank
// it disagreed with, so that the others end with the same error.
func (g *Group) Confirm(c *Call, f uint64, agg int) error {
	c.try = false
	return g.confirm(c, f, agg)
}

// TryConfirm is Confirm without waiting: it reports true when the
// confirmation is complete (Confirm would have returned nil), a
// MismatchError as Confirm would, and false with no error where Confirm
// would wait for a rank. It reads the lines Confirm reads and publishes
// what Confirm publishes, so a caller that got false calls Confirm, which
// waits (and probes a stalled rank) as ever. c is as for Confirm; it
// neither polls c's context nor reads the clock.
func (g *Group) TryConfirm(c *Call, f uint64, agg int) (bool, error) {
	c.try = true
	err := g.confirm(c, f, agg)
	c.try = false
	if err == errWouldWait {
		return false, nil
	}
	return err == nil, err
}

// errWouldWait ends a confirmation of TryConfirm where Confirm would wait.
var errWouldWait = errors.New("shmcoll: the confirmation would wait")

// confirmIdle is one empty poll of a confirmation's wait for rank q, or
// errWouldWait for TryConfirm.
func (c *Call) confirmIdle(q int, what string) error {
	if c.try {
		return errWouldWait
	}
	return c.idle(q, what, 0)
}

// confirm is Confirm, or TryConfirm where c.try is set.
func (g *Group) confirm(c *Call, f uint64, agg int) error {
	c.wake = g.wake
	c.chunk0 = f
	c.pace()
	if agg == g.rank || agg < 0 || agg >= g.n {
		if agg != g.rank {
			_, err := g.confirmAll(c, f)
			return err
		}
		mine := u64(g.line(g.rank, lineDone))
		vl := g.line(g.rank, lineVer)
		if w := g.verified.Load(); w != 0 && verChunk(w, f) >= f {
			// An earlier confirmation found every rank at chunk f or
			// later with this rank's hash there: equal hashes after a
			// later chunk prove equal histories up to f too. (Its copy
			// in this rank's memory: the line the others read costs a
			// miss.)
			return nil
		}
		for {
			at, err := g.confirmAll(c, f)
			if err == errWouldWait {
				return err
			}
			var m *MismatchError
			if errors.As(err, &m) {
				atomic.StoreUint64(u64(vl[verBad:]), uint64(m.Peer)+1)
			}
			if err != nil {
				if g.wake != nil {
					g.wake.kick()
				}
				return err
			}
			// Every rank's hash after chunk at equals this rank's: publish
			// it, unless this rank's next calls (non-blocking ones) have
			// overwritten it meanwhile; then compare again, later.
			h := atomic.LoadUint64(g.histWord(g.rank, at))
			if atomic.LoadUint64(mine)-at >= histLen {
				continue
			}
			// The line only moves forward. g.verified, updated after it,
			// is never ahead of it, and is its value but where another
			// confirmation of this rank published meanwhile.
			w, v := u64(vl[verVerified:]), verWord(at, h)
			for old := g.verified.Load(); ; old = atomic.LoadUint64(w) {
				if old != 0 && verChunk(old, at) >= at || atomic.CompareAndSwapUint64(w, old, v) {
					break
				}
			}
			for {
				old := g.verified.Load()
				if old != 0 && verChunk(old, at) >= at || g.verified.CompareAndSwap(old, v) {
					break
				}
			}
			if g.wake != nil {
				g.wake.kick()
			}
			return nil
		}
	}
	mine := u64(g.line(g.rank, lineDone))
	l := g.line(agg, lineDone)
	done := u64(l)
	vl := g.line(agg, lineVer)
	ver, bad := u64(vl[verVerified:]), u64(vl[verBad:])
	if c.wake != nil && !c.try {
		c.recheck = func() bool {
			w := atomic.LoadUint64(ver)
			return w != 0 && verChunk(w, f) >= f || atomic.LoadUint64(bad) != 0
		}
	}
	for {
		if b := atomic.LoadUint64(bad); b != 0 {
			peer := int(b - 1)
			if peer == g.rank {
				peer = agg
			}
			return &MismatchError{Peer: peer, Earlier: true}
		}
		me := atomic.LoadUint64(mine)
		if w := atomic.LoadUint64(ver); w != 0 && verChunk(w, f) >= f {
			v, h := verChunk(w, f), w&0xffffffff
			if v > me || me-v >= histLen {
				// This rank's hash after v is no longer kept (a call of
				// more than histLen chunks since): compare with every rank.
				_, err := g.confirmAll(c, f)
				return err
			}
			own := atomic.LoadUint64(g.histWord(g.rank, v))
			if atomic.LoadUint64(mine)-v >= histLen {
				continue
			}
			if h != own&0xffffffff {
				return &MismatchError{Peer: agg, Earlier: true}
			}
			break
		}
		// Not verified yet: a history that differs from the aggregator's
		// shows in its running hash.
		if d := atomic.LoadUint64(done); d >= f && d <= me && me-d < histLen {
			h := atomic.LoadUint64(u64(l[8+8*(d&1):]))
			if atomic.LoadUint64(done) == d && h != atomic.LoadUint64(g.histWord(g.rank, d)) && atomic.LoadUint64(mine)-d < histLen {
				return &MismatchError{Peer: agg, Earlier: true}
			}
		}
		if err := c.confirmIdle(agg, "the confirmation of an earlier call"); err != nil {
			return err
		}
	}
	c.arrived()
	return nil
}

// confirmAll is Confirm comparing this rank's running hash with every
// other rank's. It returns the earliest chunk, at least f, at which it
// compared them.
func (g *Group) confirmAll(c *Call, f uint64) (uint64, error) {
	mine := u64(g.line(g.rank, lineDone))
	first := ^uint64(0)
	for q := range g.n {
		if q == g.rank {
			continue
		}
		l := g.line(q, lineDone)
		done := u64(l)
		if c.wake != nil && !c.try {
			c.recheck = reached(done, f)
		}
		for {
			me := atomic.LoadUint64(mine)
			lo := f
			if me >= histLen && me-histLen+1 > lo {
				lo = me - histLen + 1
			}
			d := atomic.LoadUint64(done)
			if d < lo {
				if err := c.confirmIdle(q, "the end of an earlier call"); err != nil {
					return 0, err
				}
				continue
			}
			at := min(d, me)
			var h uint64
			if at == d {
				// q's hash after its last chunk is in the line just read
				// (finish): one line of q's instead of two, valid while
				// q's chunk number has not moved.
				h = atomic.LoadUint64(u64(l[8+8*(d&1):]))
				if atomic.LoadUint64(done) != d {
					continue
				}
			} else {
				h = atomic.LoadUint64(g.histWord(q, at))
				if atomic.LoadUint64(done)-at >= histLen {
					continue // overwritten meanwhile: read a later chunk
				}
			}
			own := atomic.LoadUint64(g.histWord(g.rank, at))
			if atomic.LoadUint64(mine)-at >= histLen {
				continue // overwritten meanwhile: read a later chunk
			}
			if h != own {
				return 0, &MismatchError{Peer: q, Earlier: true}
			}
			first = min(first, at)
			break
		}
		c.arrived()
	}
	if first == ^uint64(0) {
		first = f
	}
	return first, nil
}

// wake lets goroutine ranks block until a rank of the group publishes a
// flag: each publication closes the current channel and makes a new one.
type wake struct {
	mu sync.Mutex
	ch chan struct{}
}

func newWake() *wake { return &wake{ch: make(chan struct{})} }

func (w *wake) chan_() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *wake) kick() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}
