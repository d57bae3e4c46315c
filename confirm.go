package braid

import (
	"context"
	"time"

	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/internal/wait"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/shmcoll"
)

// Lagged confirmation: in the default mode, every rank learns of a
// disagreement no later than its next collective call on the
// communicator (point-to-point calls do not wait for it).
//
// A rank checks the chained signature (check.go) of every message it
// receives, so a call whose result depends on every rank's input (an
// allreduce, allgather, reduce-scatter, alltoall or barrier of any rank,
// a reduce or gather of the root, with at least one element) cannot end
// well on a rank unless every rank made the same calls up to it: each
// byte that reached the result crossed only checked messages. Such a call
// is complete for that rank. Every other call (a broadcast or scatter, a
// reduce or gather of a rank that is not the root, any call of no
// elements) can end well while a rank it never heard from disagreed, and
// that rank's Mismatch reaches it only as an abort, at some later time.
//
// For those calls the ranks confirm, one call late. The aggregator is the
// call's root (rank 0 for calls without one).
//
//   - If the call is complete for the aggregator (a reduce or gather), the
//     aggregator sends each other rank a confirmation (a message of no
//     bytes carrying the call's chained signature) as soon as the call
//     ends there.
//   - Otherwise each other rank sends the aggregator a confirmation when
//     its call ends, and the aggregator, once it has every rank's,
//     confirms to each of them for which the call is not complete (none
//     on two ranks, where the other rank received the root's data).
//
// A rank that needs a confirmation for call k waits for it when its next
// call k+1 has done its own work, before k+1 returns success; the
// aggregator collects and answers there too. So nothing is added to the
// critical path of call k, the messages of k's confirmation overlap call
// k+1, and a confirmation received proves that every rank carried the
// same chained signature for call k: the aggregator checked each rank's
// (or its complete call did), and this rank checked the aggregator's. A
// rank that disagreed sends no good confirmation (it aborts with Mismatch,
// or its confirmation carries another signature, or goes to another
// aggregator, where it is a Mismatch), so the waiting rank gets the error
// instead of success. A confirmation that waits long sends a stall probe
// (check.go) like any call, so ranks that wait for each other with
// nothing in flight get Mismatch, not Timeout.
//
// The cost per call that is not complete everywhere is one message of no
// bytes per rank that is not the aggregator (two for a broadcast or
// scatter), and no synchronisation: a rank waits only for what its next
// call's peers had long sent. Strict mode has no need of it (its check is
// complete on every rank before any data move).
//
// Non-blocking calls wait for the confirmations of calls that ended
// before they did; Close of a communicator made by Init (a barrier) waits
// for every pending one.

// confirmStep is the Step of a confirmation's messages.
const confirmStep = ctlStep | 1<<27

// completeFor reports whether call p's result on rank r depends on every
// other rank's input (see above); with one rank every call is. On two
// ranks a broadcast or scatter is complete for the rank that is not the
// root: it receives the root's data, the one other rank's, through
// checked messages (or the root's signature in the shared area's flag
// line), so only the root confirms it.
func completeFor(p *sched.Params, r int) bool {
	if p.NRanks <= 1 || p.Coll == sched.Barrier {
		return true
	}
	if p.Count == 0 {
		return false
	}
	switch p.Coll {
	case sched.Allreduce, sched.Allgather, sched.ReduceScatter, sched.Alltoall:
		return true
	case sched.Reduce, sched.Gather:
		return r == p.Root
	case sched.Bcast, sched.Scatter:
		return p.NRanks == 2 && r != p.Root
	}
	return false
}

// confirmEntry is a confirmation this rank still has to settle.
type confirmEntry struct {
	seq, sig   uint32
	prog       *sched.Program
	name, algo string // the call's
	chunk      uint64 // a call through the shared area (prog nil): its last chunk
	agg        int    // and the rank that verifies it for the others (nodeAggregator)
}

// nodeAggregator returns the rank that compares every rank's running hash
// when a call through the shared area is confirmed (shmcoll's Confirm): a
// rank that confirms the call too, the root where it does (a broadcast or
// scatter, a call of no elements), else rank 0, or 1 where 0 is the root
// (a reduce or gather, complete for the root).
func nodeAggregator(p *sched.Params) int {
	if !p.Coll.Rooted() {
		return 0
	}
	if !completeFor(p, p.Root) {
		return p.Root
	}
	if p.Root == 0 {
		return 1
	}
	return 0
}

// confirmKey names one of the cached confirmation programs.
type confirmKey struct {
	agg  int
	kind uint8 // confSend, confRecv or confCollect
}

const (
	confSend    uint8 = iota // a rank's confirmation to the aggregator, or the aggregator's to every rank
	confRecv                 // wait for the aggregator's
	confCollect              // the aggregator: every rank's, then confirm to each
	confGather               // the aggregator: every rank's, with no answer (they are complete)
)

// confirmProgram returns the program of kind for aggregator agg.
func (c *Comm) confirmProgram(agg int, kind uint8) *sched.Program {
	k := &c.chk
	key := confirmKey{agg, kind}
	k.confMu.Lock()
	defer k.confMu.Unlock()
	if p := k.confProgs[key]; p != nil {
		return p
	}
	if k.confProgs == nil {
		k.confProgs = map[confirmKey]*sched.Program{}
	}
	p := &sched.Program{Rank: c.rank}
	n := c.Size()
	switch {
	case kind == confRecv:
		p.Steps = []sched.Step{{Kind: sched.KindRecv, Peer: agg, Tag: confirmStep}}
	case kind == confSend && c.rank != agg:
		p.Steps = []sched.Step{{Kind: sched.KindSend, Peer: agg, Tag: confirmStep}}
	case kind == confSend:
		for q := range n {
			if q != agg {
				p.Steps = append(p.Steps, sched.Step{Kind: sched.KindSend, Peer: q, Tag: confirmStep})
			}
		}
	default: // confCollect, confGather
		var deps []int32
		for q := range n {
			if q != agg {
				deps = append(deps, int32(len(p.Steps)))
				p.Steps = append(p.Steps, sched.Step{Kind: sched.KindRecv, Peer: q, Tag: confirmStep})
			}
		}
		for q := range n {
			if kind == confGather {
				break
			}
			if q != agg {
				p.Steps = append(p.Steps, sched.Step{Kind: sched.KindSend, Peer: q, Tag: confirmStep, Deps: deps})
			}
		}
	}
	k.confProgs[key] = p
	return p
}

// confirm is called when call k (sequence number seq) has ended well on
// this rank: it sends what this rank owes for k at once, records what it
// must settle for k later, and settles what it owes for the calls before
// seq. An error is the communicator's failure, already recorded.
func (c *Comm) confirm(ctx context.Context, k *call, seq uint32) error {
	if c.Size() <= 1 || c.w.opts.Check == CheckStrict {
		return nil
	}
	var owed confirmEntry // what k owes, if owes
	owes := false
	if !completeFor(&k.p, 0) || !completeFor(&k.p, c.Size()-1) || !completeFor(&k.p, c.rank) {
		agg := 0
		if k.p.Coll.Rooted() {
			agg = k.p.Root
		}
		aggDone := completeFor(&k.p, agg)
		switch {
		case choice.IsShared(k.p.Coll, k.algo):
			owes = c.nodeOwed(k, seq, &owed)
		case c.rank == agg && aggDone:
			if err := c.runConfirm(ctx, k.name, confirmEntry{seq: seq, sig: k.sig, prog: c.confirmProgram(agg, confSend), name: k.name, algo: k.algo}, false); err != nil {
				return err
			}
		case c.rank == agg:
			// The others are alike (a rooted call's ranks but the root):
			// those the call is complete for need no answer.
			kind := confCollect
			if completeFor(&k.p, (agg+1)%c.Size()) {
				kind = confGather
			}
			owed, owes = confirmEntry{seq: seq, sig: k.sig, prog: c.confirmProgram(agg, kind), name: k.name, algo: k.algo}, true
		default:
			if !aggDone {
				if err := c.runConfirm(ctx, k.name, confirmEntry{seq: seq, sig: k.sig, prog: c.confirmProgram(agg, confSend), name: k.name, algo: k.algo}, false); err != nil {
					return err
				}
			}
			if !completeFor(&k.p, c.rank) {
				owed, owes = confirmEntry{seq: seq, sig: k.sig, prog: c.confirmProgram(agg, confRecv), name: k.name, algo: k.algo}, true
			}
		}
	}
	// What k owes is recorded and what the calls before it owe is taken
	// under one lock (a broadcast loop does both at every call).
	if !owes {
		return c.settleOwing(ctx, k.name, seq, nil)
	}
	return c.settleOwing(ctx, k.name, seq, &owed)
}

// nodeOwed reports whether call k (sequence number seq), which ended well
// through the shared area (shm or pap), owes a confirmation, and fills e
// with it: the aggregator reads every rank's running hash and the others
// read its verification instead (shmcoll's Confirm), with no messages.
func (c *Comm) nodeOwed(k *call, seq uint32, e *confirmEntry) bool {
	if c.Size() <= 1 || c.w.opts.Check == CheckStrict || completeFor(&k.p, c.rank) {
		return false
	}
	e.seq, e.sig, e.prog, e.name, e.algo, e.chunk, e.agg = seq, k.sig, nil, k.name, k.algo, k.chunk, nodeAggregator(&k.p)
	return true
}

// confirms reports whether this rank's call k is checked against every
// rank's before a later call of this rank returns success, other than by
// the messages it reads: it agreed on it up front (strict mode), or it
// settles a confirmation for it (confirm). The shared area then leaves out
// its own comparison of running hashes at the next call (shmcoll's
// Call.Confirmed).
func (c *Comm) confirms(k *call) bool {
	return c.w.opts.Check == CheckStrict || c.Size() > 1 && !completeFor(&k.p, c.rank)
}

// settle runs the confirmations owed for the calls before seq.
func (c *Comm) settle(ctx context.Context, name string, seq uint32) error {
	return c.settleOwing(ctx, name, seq, nil)
}

// settling is what a call that ended well records and takes of the
// confirmations (settleOwing, or world.end for a call through the shared
// area: the lock that ends the call does it too).
type settling struct {
	chk  *commCheck
	seq  uint32       // the call: what the calls before it owe is due
	owes bool         // the call owes owed
	owed confirmEntry // what the call owes, if owes

	// What take took: the first due (a broadcast loop's one), and the
	// others (non-blocking calls').
	due   bool
	first confirmEntry
	more  []confirmEntry
}

// take records s's owed confirmation, if any, and takes those due; called
// with the world's w.sigs.mu held, which guards k.conf.
func (k *commCheck) take(s *settling) {
	if !s.owes && len(k.conf) == 0 {
		return
	}
	keep := k.conf[:0]
	for _, e := range k.conf {
		switch {
		case int32(e.seq-s.seq) >= 0:
			keep = append(keep, e)
		case !s.due:
			s.first, s.due = e, true
		default:
			s.more = append(s.more, e)
		}
	}
	clear(k.conf[len(keep):])
	if s.owes {
		keep = append(keep, s.owed)
	}
	k.conf = keep
	if n := int32(len(keep)); k.owed.Load() != n {
		k.owed.Store(n)
	}
}

// settleOwing records owed (if not nil) as a confirmation to settle
// later, and runs those owed for the calls before seq.
func (c *Comm) settleOwing(ctx context.Context, name string, seq uint32, owed *confirmEntry) error {
	k := &c.chk
	// A confirmation owed by a call that ended before this one was
	// recorded before that call returned, so it shows here.
	if owed == nil && k.owed.Load() == 0 {
		return nil
	}
	s := settling{seq: seq}
	if owed != nil {
		s.owed, s.owes = *owed, true
	}
	t := &c.w.sigs
	t.mu.Lock()
	k.take(&s)
	t.mu.Unlock()
	return c.runDue(ctx, name, &s)
}

// runDue runs the confirmations that take took.
func (c *Comm) runDue(ctx context.Context, name string, s *settling) error {
	if !s.due {
		return nil
	}
	if err := c.runConfirm(ctx, name, s.first, true); err != nil {
		return err
	}
	for _, e := range s.more {
		if err := c.runConfirm(ctx, name, e, true); err != nil {
			return err
		}
	}
	return nil
}

// settleAtClose runs the confirmations still owed when a communicator
// split from another closes, so that their messages do not stay behind in
// the transports as unexpected ones (one per split and peer, for as long
// as the job runs: a soak of 9,000 splits an hour grew every rank's heap).
// It waits up to d for the other ranks to close too. A disagreement it
// finds fails the job as at any call; a confirmation that does not come
// within d (a rank that never closes the communicator) is left, and
// logged: Close of a split communicator is not a barrier.
func (c *Comm) settleAtClose(d time.Duration) error {
	k := &c.chk
	c.w.sigs.mu.Lock()
	due := k.conf
	k.conf = nil
	k.owed.Store(0)
	c.w.sigs.mu.Unlock()
	if len(due) == 0 || c.Size() <= 1 || c.w.failure.Load() != nil || c.w.closed.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for _, e := range due {
		if err := c.closeConfirm(ctx, e, d); err != nil {
			return err
		}
	}
	return nil
}

// closeConfirm runs e's confirmation for settleAtClose.
func (c *Comm) closeConfirm(ctx context.Context, e confirmEntry, d time.Duration) error {
	c.w.reactivate(c.id, e.seq, e.sig, e.name, e.algo)
	defer c.w.end(c.id, e.seq, false, nil, nil, 0, nil)
	err := c.confirmRaw(ctx, e)
	if err != nil && ctx.Err() != nil && c.w.failure.Load() == nil {
		c.w.debugf("info", "close: comm %08x: the confirmation of call %d (%s) did not come within %v (not every rank closed): %v", c.id, e.seq, e.name, d, err)
		return nil
	}
	if err != nil {
		return c.failWith("close", err)
	}
	return nil
}

// runConfirm runs the confirmation of e; register makes e's call active
// again while it waits, so that a stalled wait probes its peer and
// answers the ranks that probed this one (check.go), and until its
// failure is recorded, so that a timeout holds back while the peer it
// waited for said it waits too (blame.go). name is the call that reports
// a failure.
//
// A confirmation through the shared area first tries to complete without
// waiting (shmcoll's TryConfirm), as many times as a waiter's spin phase
// polls: in a loop of small calls, the peers have finished the call
// before, or are about to, and the registration (two more locks of the
// check's table) is needed only by a longer wait, which may stall.
func (c *Comm) runConfirm(ctx context.Context, name string, e confirmEntry, register bool) error {
	if register && e.prog == nil {
		cl := shmcoll.Call{Name: e.name, Seq: e.seq}
		polls := wait.SpinPolls
		if c.w.spin < 0 {
			polls = wait.OverSpinPolls // ranks outnumber cores
		}
		for range polls {
			done, err := c.node.TryConfirm(&cl, e.chunk, e.agg)
			if err != nil {
				return c.failWith(name, err)
			}
			if done {
				return nil
			}
		}
	}
	if register {
		c.w.reactivate(c.id, e.seq, e.sig, e.name, e.algo)
		defer c.w.end(c.id, e.seq, false, nil, nil, 0, nil)
	}
	if err := c.confirmRaw(ctx, e); err != nil {
		return c.failWith(name, err)
	}
	return nil
}

// confirmRaw runs e's confirmation and returns its error as the executor
// or the shared area gives it, without recording a failure.
func (c *Comm) confirmRaw(ctx context.Context, e confirmEntry) error {
	seq, sig, prog := e.seq, e.sig, e.prog
	if prog == nil {
		cl := shmcoll.Call{Ctx: ctx, Fail: c.errFn, Name: e.name, Seq: e.seq,
			Stall: c.chk.nodeStallFn, StallAfter: c.w.stallAfter(), Spin: c.w.spin}
		if _, ok := ctx.Deadline(); !ok {
			cl.Timeout = c.w.opts.Timeout
		}
		return c.node.Confirm(&cl, e.chunk, e.agg)
	}
	env := exec.Env{
		Conn:       c.connFn,
		Tag:        transport.Tag{Comm: c.id, Seq: seq, Sig: sig},
		Fail:       c.errFn,
		Spin:       c.w.spin,
		Stall:      c.chk.stallFn,
		StallAfter: c.w.stallAfter(),
	}
	if _, ok := ctx.Deadline(); !ok {
		env.Timeout = c.w.opts.Timeout
	}
	return exec.Run(ctx, prog, &env, exec.Buffers{DType: Uint8, NRanks: c.Size()})
}
