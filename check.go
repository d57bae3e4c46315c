package braid

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
)

// Disagreeing ranks (see the package documentation for what each mode
// guarantees).
//
// Every collective call has a signature (callSig): its collective, count,
// root, dtype, op, algorithm, segment, radix and the check mode. A
// communicator chains the signatures of its calls in the order it issues
// them: call s carries chain(chain of s−1, s, signature of s), so two ranks
// carry the same value for call s only if they agreed on that call and on
// every call before it. Every message of call s carries the value
// (transport.Tag.Sig), and it is compared wherever a message meets a call:
//
//   - a matched receive with another value fails with ErrMismatch (the
//     transports compare it);
//   - a message that arrives before its receive is posted is compared by
//     the transports' Unexpected hook (world.unexpected) with the call it
//     belongs to: running here, recently ended here (sigTable.done), or
//     not begun yet (kept in sigTable.seen until it begins);
//   - a call that has waited stallAfter sends a probe (a message of no
//     bytes carrying its value) to each peer it waits for, so that ranks
//     that wait for each other with no message in flight (a gather whose
//     ranks name different roots) are compared too. The receiver consumes
//     probes at its next call (drainProbes).
//
// Because the value chains every earlier call, a disagreement whose
// messages all escaped (every rank only sent) is caught by the next call
// in which the ranks exchange messages.
//
// In strict mode (Options.Check = "strict") every call first allgathers a
// descriptor of every rank's call (strictCheck) with a fixed algorithm and
// compares them before any of the call's data moves.

// Braid's own messages within a collective call (the strict check's and
// the stall probes) have Step values with ctlStep set; schedules' tags stay
// far below it, and point-to-point's transport.P2PBit is above it.
const (
	ctlStep    = 1 << 30
	probeStep  = ctlStep | 1<<29
	noticeStep = ctlStep | 1<<28 // "this call waits too", the answer to a probe (blame.go)

	// strictSig is the Sig of the strict check's messages: the check is
	// the same call on every rank; the descriptors it carries differ.
	strictSig uint32 = 0x73747263
)

// CheckStrict is the value of Options.Check (BRAID_CHECK) that agrees on
// every call's arguments before any data moves.
const CheckStrict = "strict"

// commCheck is a communicator's state for the disagreement check.
type commCheck struct {
	// state is the last issued call's sequence number (high half) and
	// chained signature (low half), updated together.
	state atomic.Uint64

	stallFn     func(i int, s *sched.Step, tag transport.Tag) // c.stall, made once
	nodeStallFn func(seq uint32, q int, what string)          // c.nodeStall, made once

	strictOnce sync.Once
	strictProg *sched.Program
	strictErr  error

	// The lagged confirmations (confirm.go), guarded by the world's
	// sigs.mu, which ends a call through the shared area in the same
	// lock (world.end). owed is len(conf), read without the lock so
	// that a call with nothing to settle takes none.
	conf []confirmEntry
	owed atomic.Int32

	confMu    sync.Mutex // guards confProgs
	confProgs map[confirmKey]*sched.Program
}

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// chain returns the chained signature of call seq with signature sig after
// a call whose chained signature is prev.
func chain(prev, seq, sig uint32) uint32 {
	x := mix64(uint64(prev)<<32 | uint64(sig^seq*0x9e3779b9))
	return uint32(x) ^ uint32(x>>32)
}

// next takes the next sequence number for a call of signature sig and
// returns it with the call's chained signature.
func (k *commCheck) next(sig uint32) (seq, chained uint32) {
	for {
		old := k.state.Load()
		seq = uint32(old>>32) + 1
		chained = chain(uint32(old), seq, sig)
		if k.state.CompareAndSwap(old, uint64(seq)<<32|uint64(chained)) {
			return seq, chained
		}
	}
}

// next2 takes two consecutive sequence numbers, for calls of signatures
// sig and sig2, and returns the first with both chained signatures.
func (k *commCheck) next2(sig, sig2 uint32) (seq, chained, chained2 uint32) {
	for {
		old := k.state.Load()
		seq = uint32(old>>32) + 1
		chained = chain(uint32(old), seq, sig)
		chained2 = chain(chained, seq+1, sig2)
		if k.state.CompareAndSwap(old, uint64(seq+1)<<32|uint64(chained2)) {
			return seq, chained, chained2
		}
	}
}

// callSig returns the signature of call k run by algorithm algoName with
// the given segment and radix, and the trees it packs (treesSig; 0 for
// an algorithm that packs none).
func (c *Comm) callSig(k *call, algoName string, seg, radix int, trees uint32) uint32 {
	p := k.p
	p.Segment, p.Radix = seg, radix
	h := uint32(2166136261) // FNV-1a of the algorithm's name
	for i := 0; i < len(algoName); i++ {
		h = (h ^ uint32(algoName[i])) * 16777619
	}
	if c.w.opts.Check == CheckStrict {
		h ^= 1 << 31
	}
	sig := chain(signature(p, k.d, k.op), 0, h)
	if trees != 0 {
		sig = chain(sig, 1, trees)
	}
	return sig
}

// treesSig returns a signature of the spanning trees t (nil: 0): ranks
// whose packings differ (another topology, other devices) run different
// schedules of the same algorithm, segment and radix, and must not be
// taken to agree.
func treesSig(t *sched.Trees) uint32 {
	if t == nil {
		return 0
	}
	x := uint64(len(t.Tree))
	for _, tr := range t.Tree {
		x = mix64(x ^ uint64(uint32(tr.Root)) ^ math.Float64bits(tr.Weight)*0x9e3779b97f4a7c15)
		for _, p := range tr.Parent {
			x = mix64(x ^ uint64(uint32(p)))
		}
	}
	return uint32(x) ^ uint32(x>>32) | 1
}

// agreeSig is the signature of MIAD's agreement call (see runIssued).
func (c *Comm) agreeSig() uint32 {
	k := call{p: sched.Params{Coll: sched.Allreduce, NRanks: c.Size(), Count: 1}, d: Float64, op: Max}
	return c.callSig(&k, "recdouble", 0, 0, 0)
}

// stallAfter is how long a call waits before it probes the peers it waits
// for: long enough that a rank that is merely late costs nothing, short
// against the timeout.
func (w *world) stallAfter() time.Duration {
	return min(250*time.Millisecond, w.opts.Timeout/4)
}

// sigTable notices ranks that disagree about a call even when none of
// their messages is matched: see the top of this file.
type sigTable struct {
	mu     sync.Mutex
	active []sigEntry // this rank's calls in flight (usually one)
	seen   []sigEntry // unexpected messages for calls not begun yet
	done   [recentCalls]doneEntry
	ndone  int
	drain  []drainEntry // probes to consume

	// probers are the probes that came while no call here had stalled,
	// the latest per peer: the first call of this rank that stalls
	// answers them with a notice (blame.go), whichever call it is and
	// whenever it stalls, for the prober may still wait for this rank
	// then (it probed before this rank began its call, or while it was
	// between calls, or in a call that ended well before the one that
	// waits).
	probers []drainEntry

	flight  [flightLen]flightEntry // the flight recorder (flight.go)
	nflight uint64                 // calls written to it
}

// recentCalls is how many ended calls sigTable remembers, for the
// messages that arrive after their call ended here.
const recentCalls = 64

// sigEntry is a call in sigTable's active or seen list. world.begin writes
// every field of an active one, one by one: a field added here must be
// added there.
type sigEntry struct {
	comm, seq, sig uint32
	peer           int    // seen: the sender's world rank
	name           string // active: the call's name
	fl             uint64 // active: 1 + the call's place in the flight recorder
	algo           string // active: its algorithm (nodeAlgo: the shared area)

	// active: the world rank the call waited for when it stalled, or -1
	// before, and what the call knows of the stall probes (nil until the
	// first): begin and end copy entries, and most calls never stall.
	waitPeer int
	st       *stallState
}

// stallState is what an active call knows of the stall probes: the world
// ranks it probed, and that said (a notice) that they wait too. Probes
// to answer once a call stalls are the table's (sigTable.probers).
type stallState struct {
	probed  []int
	noticed []int
}

// stall returns e's stallState, made on first use.
func (e *sigEntry) stall() *stallState {
	if e.st == nil {
		e.st = &stallState{}
	}
	return e.st
}

// doneEntry is an ended call that sigTable remembers.
type doneEntry struct {
	comm, seq, sig uint32
	name, algo     string
}

type drainEntry struct {
	peer int
	tag  transport.Tag
}

func find(list []sigEntry, comm, seq uint32) int {
	for i := range list {
		if list[i].comm == comm && list[i].seq == seq {
			return i
		}
	}
	return -1
}

func remove(list []sigEntry, i int) []sigEntry {
	list[i] = list[len(list)-1]
	list[len(list)-1] = sigEntry{}
	return list[:len(list)-1]
}

// findDone returns the index in t.done of call (comm, seq), or -1.
func (t *sigTable) findDone(comm, seq uint32) int {
	for i := range min(t.ndone, recentCalls) {
		if e := &t.done[i]; e.comm == comm && e.seq == seq {
			return i
		}
	}
	return -1
}

// reactivate registers again a call that has ended (a confirmation that
// waits for its peers, confirm.go), without a new entry in the flight
// recorder, so that a stalled wait probes its peer; end closes it.
func (w *world) reactivate(comm, seq, sig uint32, name, algo string) {
	t := &w.sigs
	t.mu.Lock()
	t.active = append(t.active, sigEntry{comm: comm, seq: seq, sig: sig, name: name, algo: algo, waitPeer: -1})
	t.mu.Unlock()
}

// begin registers this rank's call, run by algo, in the check's table and
// the flight recorder, and reports a message already seen for it with
// another signature.
func (w *world) begin(comm, seq uint32, k *call, algo string) (peer int, other uint32, bad bool) {
	t := &w.sigs
	t.mu.Lock()
	peer, other, bad, drain := t.begin(comm, seq, k, algo)
	t.mu.Unlock()
	w.drainProbes(drain)
	return peer, other, bad
}

// begin is world.begin with t.mu held: it returns, besides, the probes to
// consume (world.drainProbes) once t.mu is released.
func (t *sigTable) begin(comm, seq uint32, k *call, algo string) (peer int, other uint32, bad bool, drain []drainEntry) {
	sig := k.sig
	t.nflight++
	// Field by field: a composite literal of a struct with pointers is
	// built aside and copied with the garbage collector's bulk barrier.
	f := &t.flight[(t.nflight-1)%flightLen]
	f.comm, f.seq, f.name, f.algo = comm, seq, k.name, algo
	f.bytes, f.state, f.arrive, f.end, f.waitPeer = callBytes(k), flightRunning, k.arrive, 0, -1
	f.pat = pattern{}
	if n := len(t.active); n < cap(t.active) {
		t.active = t.active[:n+1]
	} else {
		t.active = append(t.active, sigEntry{})
	}
	a := &t.active[len(t.active)-1]
	a.comm, a.seq, a.sig, a.peer, a.name, a.fl, a.algo, a.waitPeer, a.st = comm, seq, sig, 0, k.name, t.nflight, algo, -1, nil
	drain = t.takeDrain()
	if i := find(t.seen, comm, seq); i >= 0 && t.seen[i].sig != sig {
		peer, other, bad = t.seen[i].peer, t.seen[i].sig, true
	}
	return peer, other, bad, drain
}

// end records the end of this rank's call in the check's table and the
// flight recorder, and adds what the rank knew of its arrival pattern p to
// sites (when the call succeeded; p and sites may be nil).
//
// s, if not nil, is what a call that ended well settles of the lagged
// confirmations (confirm.go): taken under the same lock.
func (w *world) end(comm, seq uint32, failed bool, p *pattern, sites *arrivalSites, coll sched.Collective, s *settling) {
	t := &w.sigs
	t.mu.Lock()
	if i := find(t.active, comm, seq); i >= 0 {
		e := &t.active[i]
		if f := &t.flight[(e.fl-1)%flightLen]; e.fl > 0 && f.comm == comm && f.seq == seq {
			f.state, f.waitPeer = flightDone, e.waitPeer
			if failed {
				f.state = flightFailed
			}
			if p != nil {
				f.pat, f.end = *p, p.end // 0: not read (flightEntry)
			} else {
				f.end = w.clock.now()
			}
		}
		if !failed && p != nil && sites != nil {
			sites.record(coll, p)
		}
		d := &t.done[t.ndone%recentCalls]
		d.comm, d.seq, d.sig, d.name, d.algo = e.comm, e.seq, e.sig, e.name, e.algo
		t.ndone++
		t.active = remove(t.active, i)
	}
	for i := find(t.seen, comm, seq); i >= 0; i = find(t.seen, comm, seq) {
		t.seen = remove(t.seen, i)
	}
	if s != nil {
		s.chk.take(s)
	}
	drain := t.takeDrain()
	t.mu.Unlock()
	w.drainProbes(drain)
}

// takeDrain returns the probes to consume and empties the list; called
// with t.mu held.
func (t *sigTable) takeDrain() []drainEntry {
	if len(t.drain) == 0 {
		return nil
	}
	d := t.drain
	t.drain = nil
	return d
}

// drainProbes receives the probes that peers sent, which no schedule
// receives.
func (w *world) drainProbes(list []drainEntry) {
	for _, d := range list {
		if d.peer < 0 || d.peer >= len(w.conns) || w.conns[d.peer] == nil {
			continue
		}
		if req, err := w.conns[d.peer].Irecv(d.tag, nil); err == nil {
			req.Test()
		}
	}
}

// unexpected is the transports' callback for a message that arrived before
// its receive was posted. It may run with a transport's lock held: it
// records a failure but leaves the abort to a goroutine (failAsync).
func (w *world) unexpected(peer int, tag transport.Tag) {
	if tag.Step&transport.P2PBit != 0 {
		return
	}
	ctl := tag.Step & (probeStep | noticeStep)
	if tag.Step&ctlStep != 0 && ctl == ctlStep && tag.Step&confirmStep != confirmStep {
		// A message of the strict check.
		if w.opts.Check != CheckStrict {
			w.failAsync(&Error{Kind: Mismatch, Rank: w.rank, Call: "transport", Peer: peer,
				Err: fmt.Errorf("call %d of comm %08x: rank %d checks its calls strictly (BRAID_CHECK=%s) and this rank does not: every rank must run with the same BRAID_CHECK", tag.Seq, tag.Comm, peer, CheckStrict)}, peer)
		}
		return
	}
	t := &w.sigs
	t.mu.Lock()
	var want uint32
	var name, algo string
	known, notify := false, false
	if i := find(t.active, tag.Comm, tag.Seq); i >= 0 {
		a := &t.active[i]
		want, name, algo, known = a.sig, a.name, a.algo, ctl != noticeStep
		if ctl == noticeStep {
			st := a.stall()
			st.noticed = append(st.noticed, peer)
		}
	} else if i := t.findDone(tag.Comm, tag.Seq); i >= 0 {
		want, name, algo, known = t.done[i].sig, t.done[i].name, t.done[i].algo, ctl != noticeStep
	} else if ctl != noticeStep && find(t.seen, tag.Comm, tag.Seq) < 0 {
		t.seen = append(t.seen, sigEntry{comm: tag.Comm, seq: tag.Seq, sig: tag.Sig, peer: peer})
	}
	if ctl == probeStep {
		// The prober waits for this rank: if a call here waits too (for
		// this call or another), say so now, else once one stalls.
		notify = slices.ContainsFunc(t.active, func(a sigEntry) bool { return a.waitPeer >= 0 })
		if !notify {
			t.addProber(drainEntry{peer, tag})
		}
	}
	if ctl == probeStep || ctl == noticeStep {
		t.drain = append(t.drain, drainEntry{peer, tag})
	}
	t.mu.Unlock()
	if known && want != tag.Sig {
		w.sigMismatch(tag.Comm, tag.Seq, want, tag.Sig, peer, name, algo)
		return
	}
	if notify {
		// Not from the transport's callback: it may hold a lock that
		// sending needs.
		go w.control(peer, noticeFor(tag))
	}
}

// addProber records probe p to answer once a call here stalls, in place
// of an earlier probe of the same peer; called with t.mu held.
func (t *sigTable) addProber(p drainEntry) {
	for i := range t.probers {
		if t.probers[i].peer == p.peer {
			t.probers[i] = p
			return
		}
	}
	t.probers = append(t.probers, p)
}

// noticeFor returns the notice that answers probe.
func noticeFor(probe transport.Tag) transport.Tag {
	probe.Step = noticeStep
	return probe
}

// control sends Braid's control message tag (no bytes) to world rank peer.
func (w *world) control(peer int, tag transport.Tag) {
	if peer >= 0 && peer < len(w.conns) && w.conns[peer] != nil {
		w.conns[peer].Isend(tag, nil)
	}
}

// sigMismatch reports that world rank peer's message for call seq of
// communicator comm carries the chained signature peerSig where this
// rank's call has sig (name is the call's name, or ""). It records the
// failure, starts the abort that tells every peer, and returns the error.
// It does not block and may be called with a transport's lock held: the
// transports' Unexpected hook calls it, and so may any path that compares
// signatures outside the transports (a fast path's shared slots). algo
// is the call's algorithm here.
func (w *world) sigMismatch(comm, seq, sig, peerSig uint32, peer int, name, algo string) *Error {
	what := ""
	switch {
	case name == "":
		name = "transport"
	case algo == nodeAlgo:
		what = fmt.Sprintf(" (%s through the shared area here)", name)
	case algo != "":
		what = fmt.Sprintf(" (%s via %s here)", name, algo)
	}
	e := &Error{Kind: Mismatch, Rank: w.rank, Call: name, Peer: peer,
		Err: fmt.Errorf("call %d of comm %08x%s: world rank %d's messages for it carry signature %08x, this rank's %08x: the ranks made different calls (collective, count, dtype, op, root or algorithm) in this call or an earlier one; BRAID_CHECK=%s names the difference",
			seq, comm, what, peer, peerSig, sig, CheckStrict)}
	w.failAsync(e, peer)
	return e
}

// failAsync records e as the job's failure, if it is the first, and
// aborts the meshes from a goroutine (close waits for it).
func (w *world) failAsync(e *Error, worldPeer int) {
	if !e.wknown {
		e.wpeer, e.wknown = worldPeer, true
	}
	if w.failure.CompareAndSwap(nil, e) {
		w.meshMu.Lock()
		closing := w.closing
		if !closing {
			w.aborting.Add(1)
		}
		w.meshMu.Unlock()
		if closing {
			return // the peers learn that this rank closed
		}
		go func() {
			defer w.aborting.Done()
			w.abortMeshes(e, worldPeer)
		}()
	}
}

// beginCall registers call seq (k.sig set) before it runs and, in strict
// mode, agrees on it with every rank. On error the call is over (end was
// called) and the communicator has failed.
func (c *Comm) beginCall(ctx context.Context, k *call, algoName string, seq uint32) error {
	peer, other, bad := c.w.begin(c.id, seq, k, algoName)
	return c.begun(ctx, k, algoName, seq, peer, other, bad)
}

// begun is the rest of beginCall once the call is registered (world.begin,
// whose results it takes).
func (c *Comm) begun(ctx context.Context, k *call, algoName string, seq uint32, peer int, other uint32, bad bool) error {
	if bad {
		c.w.end(c.id, seq, true, nil, nil, 0, nil)
		e := c.w.sigMismatch(c.id, seq, k.sig, other, peer, k.name, algoName)
		return &Error{Kind: Mismatch, Rank: c.rank, Call: k.name, Peer: c.commRank(peer), Err: e.Err}
	}
	if c.w.opts.Check == CheckStrict && c.Size() > 1 {
		if err := c.strictCheck(ctx, k, algoName, seq); err != nil {
			c.w.end(c.id, seq, true, nil, nil, 0, nil)
			return err
		}
	}
	return nil
}

// commRank returns the communicator rank of world rank wr, or -1.
func (c *Comm) commRank(wr int) int {
	return slices.Index(c.members, wr)
}

// stall is exec's Env.Stall: the call (tag.Comm, tag.Seq) has waited
// stallAfter for the peer of step s.
func (c *Comm) stall(index int, s *sched.Step, tag transport.Tag) {
	c.stallOn(tag.Seq, s.Peer, func() string { return fmt.Sprintf("step %d: %v", index, s) })
}

// nodeStall is the shared area's Call.Stall: call seq has waited
// stallAfter for communicator rank q, for what.
func (c *Comm) nodeStall(seq uint32, q int, what string) {
	c.stallOn(seq, q, func() string { return what + ", through the shared area" })
}

// stallOn records that call seq of this communicator has waited
// stallAfter for communicator rank q (what says for what, for the log),
// probes q with the call's chained signature, and tells the ranks that
// probed this rank that it waits too (blame.go).
func (c *Comm) stallOn(seq uint32, q int, what func() string) {
	w := c.w
	if q < 0 || q >= len(c.members) {
		return
	}
	wp := c.members[q]
	t := &w.sigs
	t.mu.Lock()
	i := find(t.active, c.id, seq)
	if i < 0 {
		t.mu.Unlock()
		return
	}
	a := &t.active[i]
	st := a.stall()
	probe := !slices.Contains(st.probed, wp)
	st.probed = append(st.probed, wp)
	if a.waitPeer < 0 {
		a.waitPeer = wp
	}
	notify := t.probers
	t.probers = nil
	sig := a.sig // the strict check's messages carry strictSig
	t.mu.Unlock()
	for _, p := range notify {
		w.control(p.peer, noticeFor(p.tag))
	}
	if probe {
		if w.opts.Debug != "" {
			w.debugf("info", "call %d of comm %08x: waited %v for rank %d (%s); probing it", seq, c.id, w.stallAfter(), q, what())
		}
		w.control(wp, transport.Tag{Comm: c.id, Seq: seq, Step: probeStep, Sig: sig})
	}
}

// descWords is the length of a call's descriptor in the strict check.
const descWords = 6

// describe returns the descriptor of call k run by algoName: what every
// rank must agree on.
func describe(k *call, algoName string) [descWords]uint64 {
	var d [descWords]uint64
	d[0] = uint64(k.p.Coll) | uint64(k.d)<<8 | uint64(k.op)<<16 | uint64(uint32(k.p.Root))<<32
	d[1] = uint64(k.p.Count)
	d[2] = uint64(uint32(k.p.Segment)) | uint64(uint32(k.p.Radix))<<32
	for i := 0; i < len(algoName) && i < 16; i++ {
		d[3+i/8] |= uint64(algoName[i]) << (8 * (i % 8))
	}
	d[5] = uint64(k.sig)
	return d
}

// descString says what descriptor d describes, for error messages.
func descString(d []uint64) string {
	coll, dt, op, root := sched.Collective(d[0]&0xff), DType(d[0]>>8&0xff), Op(d[0]>>16&0xff), int32(d[0]>>32)
	var name []byte
	for i := range 16 {
		if b := byte(d[3+i/8] >> (8 * (i % 8))); b != 0 {
			name = append(name, b)
		}
	}
	s := coll.String()
	if coll.Rooted() {
		s += fmt.Sprintf(" root %d", root)
	}
	s += fmt.Sprintf(" of %d × %v", d[1], dt)
	if coll.Reduces() {
		s += fmt.Sprintf(" %v", op)
	}
	s += " via " + choiceString(string(name), sched.Params{Segment: int(uint32(d[2])), Radix: int(d[2] >> 32)}, max(dt.Size(), 1))
	return s
}

// strictProgram returns the program of the strict check: the direct
// allgather of one descriptor per rank, its tags moved into the control
// range.
func (c *Comm) strictProgram() (*sched.Program, error) {
	k := &c.chk
	k.strictOnce.Do(func() {
		a, err := algo.Lookup(sched.Allgather, "direct")
		if err != nil {
			k.strictErr = err
			return
		}
		prog := a.Program(sched.Params{Coll: sched.Allgather, NRanks: c.Size(), Count: descWords}, c.rank)
		prog.Steps = slices.Clone(prog.Steps)
		for i := range prog.Steps {
			if prog.Steps[i].Tag < 0 || prog.Steps[i].Tag >= 1<<27 {
				k.strictErr = fmt.Errorf("strict check: tag %d out of range", prog.Steps[i].Tag)
				return
			}
			prog.Steps[i].Tag |= ctlStep
		}
		k.strictProg = &prog
	})
	return k.strictProg, k.strictErr
}

// strictCheck allgathers every rank's descriptor of call seq and compares
// them with this rank's; a difference is a Mismatch on every rank, which
// names the ranks and their calls.
func (c *Comm) strictCheck(ctx context.Context, k *call, algoName string, seq uint32) error {
	prog, err := c.strictProgram()
	if err != nil {
		e := &Error{Kind: Internal, Rank: c.rank, Call: k.name, Peer: -1, Err: err}
		c.w.fail(e)
		return e
	}
	n := c.Size()
	mine := describe(k, algoName)
	all := make([]uint64, n*descWords)
	env := exec.Env{
		Conn:       c.connFn,
		Tag:        transport.Tag{Comm: c.id, Seq: seq, Sig: strictSig},
		Fail:       c.errFn,
		Spin:       c.w.spin,
		Stall:      c.chk.stallFn,
		StallAfter: c.w.stallAfter(),
	}
	if _, ok := ctx.Deadline(); !ok {
		env.Timeout = c.w.opts.Timeout
	}
	if err := exec.Run(ctx, prog, &env, exec.Buffers{In: bytesOf(mine[:]), Out: bytesOf(all), DType: Uint64, NRanks: n}); err != nil {
		return c.failWith(k.name, err)
	}
	first := -1
	for r := range n {
		if [descWords]uint64(all[r*descWords:]) != mine {
			first = r
			break
		}
	}
	if first < 0 {
		return nil
	}
	// Every rank has every descriptor: they all say the same.
	type group struct {
		desc  []uint64
		ranks []string
	}
	var groups []group
	for r := range n {
		d := all[r*descWords : (r+1)*descWords]
		i := slices.IndexFunc(groups, func(g group) bool { return slices.Equal(g.desc, d) })
		if i < 0 {
			groups = append(groups, group{desc: d})
			i = len(groups) - 1
		}
		groups[i].ranks = append(groups[i].ranks, fmt.Sprint(r))
	}
	var parts []string
	for _, g := range groups {
		what := descString(g.desc)
		if slices.ContainsFunc(groups, func(h group) bool {
			return !slices.Equal(h.desc, g.desc) && slices.Equal(h.desc[:descWords-1], g.desc[:descWords-1])
		}) {
			what += fmt.Sprintf(" after other earlier calls or with other packed trees (signature %08x)", g.desc[descWords-1])
		}
		who := "rank "
		if len(g.ranks) > 1 {
			who = "ranks "
		}
		parts = append(parts, who+strings.Join(g.ranks, ", ")+": "+what)
	}
	e := &Error{Kind: Mismatch, Rank: c.rank, Call: k.name, Peer: first,
		Err: fmt.Errorf("call %d (BRAID_CHECK=%s): the ranks disagree: %s", seq, CheckStrict, strings.Join(parts, "; "))}
	c.failWith(k.name, e)
	return e
}
