package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/wait"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
)

// Step states. A pulled Send is posted once its notice is out, and done
// once the reader's "read done" event is waited for on this rank's
// stream; a pushed Recv is posted once its destination is out, and done
// once the writer's "written" event is waited for; every other step is
// done once its work is queued on the stream (the stream runs it after
// everything queued before, its dependencies included).
const (
	stPending uint8 = iota
	stPosted
	stDone
)

// waitPolicy is how exec.Drive waits for the peers of this package's
// programs and of the fused kernels' reset rendezvous (exec.Env.Wait):
// the host's policy (internal/wait.Backoff, transport.Backoff) with these
// phases: spin 100µs, then yield the goroutine until 2 ms have passed
// since the wait began, then sleep 50µs between polls. The ranks of a
// collective arrive within microseconds of each other when they are in
// step, so the spin covers the common case; a rank that waits for a late
// peer gives the core away. Goroutines: the ranks of a DeviceComm may be
// goroutines of one process, whose worker threads hold Go processors.
var waitPolicy = wait.Backoff{
	Spin:       100 * time.Microsecond,
	Yield:      2*time.Millisecond - 100*time.Microsecond,
	Sleep:      50 * time.Microsecond,
	Goroutines: true,
}

// call is the state of one call while the worker issues it.
type call struct {
	k       *Call
	steps   []sched.Step
	state   []uint8
	seq     uint32
	es      int
	bases   [3]cuda.DevicePtr
	ordered bool // queued by Enqueue: buffers are ready only when the stream gets here
	push    bool // data moves by push (noticeDest/noticeWritten), not pull
	land    landing
	tmpLen  int // the program's own scratch, in elements; landing areas follow it
	startEv int // ordered pushes: index in Comm.lev of the event at the call's start
}

func (k *call) addr(ch sched.Chunk) cuda.DevicePtr { return k.bases[ch.Buf].Add(ch.Off * k.es) }

// backend is the exec.Backend of one program call: exec.Drive decides
// when each step may start, polls the steps under way and waits between
// polls; backend issues what a step can (step), with the main stream's
// waits for the pushes the step depends on (syncStep) before it and the
// events pushes wait for (markDone) after it, and moves the notices
// (Poll). Its own state (call.state) knows more than Drive's: a pulled
// Send or pushed Recv is posted before it is done, and a step may be
// done fused with the one or two after it.
type backend struct {
	g *Comm
	c *cuda.Ctx
	k *call

	// Options.Stats: whether a step moved since the last Poll, and since
	// when nothing has.
	moved     bool
	idleSince time.Time
}

func (b *backend) Start(i int) (int, error) { return b.do(i) }
func (b *backend) Test(i int) (int, error)  { return b.do(i) }

// do issues what it can of steps[i] and returns how many steps, from i
// on, are done by it: 0 if steps[i] is not done, else 1 and the steps
// after it that it did fused (a step fuses with at most the two after
// it).
func (b *backend) do(i int) (int, error) {
	g, c, k := b.g, b.c, b.k
	steps, state := k.steps, k.state
	if steps[i].Kind != sched.KindSend {
		if err := g.syncStep(c, k, i); err != nil {
			return 0, err
		}
	}
	var before [2]bool // steps i+1 and i+2 were done before
	for j := range before {
		before[j] = i+1+j < len(steps) && state[i+1+j] == stDone
	}
	moved, err := g.step(c, k, i)
	if err == nil && moved && k.push {
		err = g.markDone(c, k, i, i+2)
	}
	if err != nil {
		return 0, err
	}
	b.moved = b.moved || moved
	if state[i] != stDone {
		return 0, nil
	}
	n := 1
	for j := range before {
		if i+1+j >= len(steps) || before[j] || state[i+1+j] != stDone {
			break
		}
		n++
	}
	return n, nil
}

// Poll moves the notices: those that arrived into the stash, and those
// that waited for room in a ring out. The call is not over while any
// wait to go out.
func (b *backend) Poll() (moved, busy bool) {
	g := b.g
	g.drain()
	moved = g.flush()
	if g.stats != nil {
		b.idle(!moved && !b.moved)
		b.moved = false
	}
	return moved, g.pendingOut()
}

// idle counts, for Options.Stats, the time from the first poll that
// found nothing moved to the next that found something.
func (b *backend) idle(idle bool) {
	if b.g == nil || b.g.stats == nil {
		return
	}
	switch {
	case idle && b.idleSince.IsZero():
		b.idleSince = time.Now()
	case !idle && !b.idleSince.IsZero():
		b.g.stats.wait += time.Since(b.idleSince)
		b.idleSince = time.Time{}
	}
}

// note returns a notice of the given kind for steps[i]: in a collective
// numbered by the call's sequence number; in a point-to-point call
// (Call.P2P) by the message's own number, marked noticeP2P, with the
// step's elements and type for the other end to check.
func (k *call) note(kind uint32, i int) notice {
	st := &k.steps[i]
	if k.k.P2P == nil {
		return notice{Kind: kind, Seq: k.seq, Tag: st.Tag}
	}
	return notice{Kind: kind | noticeP2P, Seq: k.k.P2P[i], Tag: st.Tag, Count: uint64(st.Len()), DType: uint32(k.k.DType)}
}

// takeStep removes from the stash the notice of the given kind for
// steps[i] from its peer (note's numbering).
func (g *Comm) takeStep(k *call, kind uint32, i int) (notice, bool) {
	w := k.note(kind, i)
	return g.take(k.steps[i].Peer, w.Kind, w.Seq, w.Tag)
}

// refused checks, in a point-to-point call, the notice n of the other
// end of steps[i]: it returns a *SizeMismatchError if that end refused
// the message (flagRefused) or differs from this one in length or type,
// after telling it with reply (a notice of kind that carries
// flagRefused) unless it refused first.
func (g *Comm) refused(k *call, i int, n *notice, kind uint32) error {
	if k.k.P2P == nil {
		return nil
	}
	st := &k.steps[i]
	if n.Flags&flagRefused == 0 && n.Count == uint64(st.Len()) && n.DType == uint32(k.k.DType) {
		return nil
	}
	if n.Flags&flagRefused == 0 {
		r := k.note(kind, i)
		r.Flags = flagRefused
		g.send(st.Peer, r)
		g.flush()
	}
	return &SizeMismatchError{Rank: g.rank, Peer: st.Peer, Tag: st.Tag, Send: st.Kind == sched.KindSend,
		Count: st.Len(), DType: k.k.DType, PeerCount: int(n.Count), PeerDType: dtype.DType(n.DType)}
}

// landAt returns the landing area of the pushed RecvReduce steps[i].
func (k *call) landAt(i int) cuda.DevicePtr {
	return k.bases[sched.Tmp].Add((k.tmpLen + k.land.off[i]) * k.es)
}

// landing places, in scratch after the program's own, the areas where
// peers push the chunks that RecvReduce steps reduce: one per step, so
// that every one can be offered to its sender when the call starts.
type landing struct {
	off   []int // [step]: elements from the end of the program's scratch; -1 if not a RecvReduce
	total int   // elements
}

// needsOf returns, for each step of p, whether a Send depends on it.
func (g *Comm) needsOf(p *sched.Program) []bool {
	if n, ok := g.needs[p]; ok {
		return n
	}
	n := needsOf(p)
	g.needs[p] = n
	return n
}

// needsOf is Comm.needsOf, not cached.
func needsOf(p *sched.Program) []bool {
	n := make([]bool, len(p.Steps))
	for _, st := range p.Steps {
		if st.Kind == sched.KindSend {
			for _, d := range st.Deps {
				n[d] = true
			}
		}
	}
	return n
}

func (g *Comm) landingOf(p *sched.Program) landing {
	if l, ok := g.landing[p]; ok {
		return l
	}
	l := landing{off: make([]int, len(p.Steps))}
	for i, st := range p.Steps {
		l.off[i] = -1
		if st.Kind == sched.KindRecvReduce {
			l.off[i] = l.total
			l.total += (st.Dst.Len + 63) &^ 63 // keeps every area 256-byte aligned for 4-byte types and up
		}
	}
	g.landing[p] = l
	return l
}

// growScratch makes the scratch (g.tmp) hold at least need bytes: the
// programs' own scratch and landing areas, or a reduce-scatter staged at
// an aligned stride. The scratch it replaces is kept until Close, since
// work queued on the streams may still use it; work queued later on the
// main stream uses the scratch after it, and peers push into it only
// after an offer of the call that follows it.
func (g *Comm) growScratch(c *cuda.Ctx, need int) error {
	if need <= g.tmpSize {
		return nil
	}
	p, err := c.Alloc(need)
	if err != nil {
		return fmt.Errorf("gpu: scratch of %d bytes: %w", need, err)
	}
	if g.tmp != 0 {
		g.oldTmp = append(g.oldTmp, g.tmp)
	}
	g.tmp, g.tmpSize = p, need
	return nil
}

// issueMode says how run issues a call and what it waits for.
type issueMode uint8

const (
	waitStream    issueMode = iota // a synchronous call: run waits for the stream
	streamOrdered                  // Enqueue: issued, not waited for
	// pollEnd: a synchronous call that runPolled waits for: issued as
	// streamOrdered, and a fused kernel of one block asked to store its
	// end (fused.Kernel.SignalEnd), which the caller polls.
	pollEnd
)

// run executes k on the worker's thread. An ordered call (Enqueue,
// runPolled) is issued without waiting for the stream: its buffers are
// ready only when the stream gets to it, so that every chunk offered to a
// peer carries an event. In a capture (cp, from BeginCapture) a fused
// kernel is recorded into the graph, not run, and nothing waits for it; a
// program is refused, in a capture begun outside this Comm too
// (notCapturing).
func (g *Comm) run(ctx context.Context, c *cuda.Ctx, k *Call, seq uint32, mode issueMode, cp *capture) error {
	ordered := mode != waitStream
	if k.Fused != nil {
		dl := callDeadline(ctx)
		reset := func() error { return g.resetFused(ctx, c, seq) }
		if a := k.Fused; a.Kind == fused.ReduceScatter && a.Stride > a.Count {
			// Staged at an aligned stride (fusedState.strided): the n
			// blocks, then the result. Not in a capture: a graph would
			// keep the scratch that a later call may grow.
			if cp != nil {
				return fmt.Errorf("%w: a reduce-scatter staged at an aligned stride (blocks of %d elements)", ErrNotCapturable, a.Count)
			}
			if err := g.growScratch(c, (len(g.fused.Regions)+1)*a.Stride*a.DType.Size()); err != nil {
				return err
			}
		}
		if err := g.fused.launch(c, g.s, g.rank, k, dl, cp, reset, g.tmp, mode == pollEnd); err != nil || ordered || cp != nil {
			return err
		}
		if err := c.StreamSynchronize(g.s); err != nil {
			return err
		}
		return g.fused.failed(g.rank)
	}
	if err := g.notCapturing(c, k, cp); err != nil {
		return err
	}
	prog := k.Prog
	es := k.DType.Size()
	kc := call{k: k, steps: prog.Steps, seq: seq, es: es, ordered: ordered, tmpLen: prog.TmpLen}
	kc.push = g.pushMax >= 0 && (!k.Params.Coll.Reduces() || k.Params.Count*es <= g.pushMax)
	if kc.push && k.P2P == nil {
		// A point-to-point program has no RecvReduce, hence no landing
		// areas; and it is made per call, so nothing is cached for it.
		kc.land = g.landingOf(prog)
	}
	if err := g.growScratch(c, (prog.TmpLen+kc.land.total)*es); err != nil {
		return err
	}
	kc.bases = [3]cuda.DevicePtr{sched.In: k.In, sched.Out: k.Out, sched.Tmp: g.tmp}
	steps := prog.Steps
	if cap(g.state) < len(steps) {
		g.state = make([]uint8, len(steps))
	}
	kc.state = g.state[:len(steps)]
	clear(kc.state)
	clear(g.nsend)
	clear(g.nrecv)
	g.nlev = 0
	if kc.push {
		if cap(g.copied) < len(steps) {
			g.copied = make([]int, len(steps))
			g.synced = make([]bool, len(steps))
		}
		if cap(g.stepEv) < len(steps) {
			g.stepEv = make([]int, len(steps))
		}
		g.copied, g.synced, g.stepEv = g.copied[:len(steps)], g.synced[:len(steps)], g.stepEv[:len(steps)]
		for i := range g.copied {
			g.copied[i], g.stepEv[i] = -1, -1
		}
		clear(g.synced)
		clear(g.usedS)
		if k.P2P == nil {
			g.needEv = g.needsOf(prog)
		} else {
			g.needEv = needsOf(prog)
		}
		if ordered {
			ev, err := g.localEvent(c)
			if err == nil {
				err = c.Record(ev, g.s)
			}
			if err != nil {
				return fmt.Errorf("gpu: rank %d: %w", g.rank, err)
			}
			kc.startEv = g.nlev - 1
		}
	}
	if kc.push {
		// Every landing area is free (the reductions that read it in
		// earlier calls are queued before this point): offer them all now,
		// so that senders push as soon as their chunks are ready.
		for i := range steps {
			if steps[i].Kind == sched.KindRecvReduce {
				if err := g.postDest(c, &kc, i, kc.landAt(i), ordered); err != nil {
					return fmt.Errorf("gpu: rank %d, step %d (%v): %w", g.rank, i, &steps[i], err)
				}
			}
		}
	}

	var t0 time.Time
	if g.stats != nil {
		t0 = time.Now()
	}
	if err := g.drive(ctx, c, &kc); err != nil {
		return err
	}
	if kc.push {
		// The call ends when its pushes have.
		for p, used := range g.usedS {
			if !used {
				continue
			}
			ev, err := g.localEvent(c)
			if err == nil {
				err = c.Record(ev, g.copyS[p])
			}
			if err == nil {
				err = c.StreamWaitEvent(g.s, ev)
			}
			if err != nil {
				return fmt.Errorf("gpu: rank %d: joining the copy streams: %w", g.rank, err)
			}
		}
	}
	if k.Op == dtype.Avg && k.Params.Coll.Reduces() {
		for _, ch := range prog.Final {
			p := kc.addr(ch)
			if err := c.Divide(g.s, k.DType, p, p, ch.Len, g.n); err != nil {
				return err
			}
		}
	}
	if ordered {
		return nil
	}
	if g.stats == nil {
		return c.StreamSynchronize(g.s)
	}
	t1 := time.Now()
	err := c.StreamSynchronize(g.s)
	t2 := time.Now()
	g.stats.calls++
	g.stats.issue += t1.Sub(t0)
	g.stats.sync += t2.Sub(t1)
	g.stats.steps += len(steps)
	return err
}

// drive issues the steps of the program call k through exec.Drive (the
// executor's loop, with this package's backend): it returns once every
// step's work is queued on the streams and every notice is out, or at the
// first failure. A wait that the call's context ended is, in a
// point-to-point call, a *PeerWaitError naming the peer.
func (g *Comm) drive(ctx context.Context, c *cuda.Ctx, k *call) error {
	g.be = backend{g: g, c: c, k: k}
	env := exec.Env{Tag: transport.Tag{Seq: k.seq}, Wait: &waitPolicy, Ahead: true}
	err := exec.Drive(ctx, k.k.Prog, &env, &g.be)
	g.be.idle(false)
	g.be = backend{}
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		var se *exec.StepError
		if k.k.P2P != nil && errors.As(err, &se) {
			return &PeerWaitError{Rank: g.rank, Peer: se.Step.Peer, Err: err}
		}
		return fmt.Errorf("gpu: rank %d waited for its peers until the call's context ended (%d of %d steps done): %w",
			g.rank, countDone(k.state), len(k.steps), err)
	}
	return fmt.Errorf("gpu: %w", err)
}

// resetFused clears this rank's flags and low-latency lines for a fused
// call (sequence number seq) that would pass SeqLimit, once every rank's
// earlier kernels have ended, and returns once every rank has cleared
// its own: no kernel of an earlier call writes them afterwards, and none
// of a later call before. Every rank calls it at the same call.
func (g *Comm) resetFused(ctx context.Context, c *cuda.Ctx, seq uint32) error {
	f := g.fused
	if err := c.StreamSynchronize(g.s); err != nil {
		return err
	}
	if err := f.failed(g.rank); err != nil {
		return err
	}
	if err := g.rendezvous(ctx, seq, resetEnded); err != nil {
		return err
	}
	size := fused.RegionBytes(g.n, f.SlotBytes)
	ll := fused.LLOffset(g.n, f.SlotBytes)
	if err := c.Memset8(f.own, 0, fused.SlotsOffset, g.s); err != nil {
		return err
	}
	if err := c.Memset8(f.own.Add(ll), 0, size-ll, g.s); err != nil {
		return err
	}
	if err := c.Memset32(f.seqs, 1, fused.SeqWords, g.s); err != nil {
		return err
	}
	if err := c.StreamSynchronize(g.s); err != nil {
		return err
	}
	return g.rendezvous(ctx, seq, resetCleared)
}

// The tags of resetFused's rendezvous notices.
const (
	resetEnded   int32 = -1 // this rank's kernels of earlier calls have ended
	resetCleared int32 = -2 // this rank's flags and lines are clear
)

// rendezvous tells every peer that this rank has reached tag of call seq
// and waits until every peer has told it the same, or ctx ends: a
// program of one receive of a notice from each peer, run by exec.Drive
// over meeting.
func (g *Comm) rendezvous(ctx context.Context, seq uint32, tag int32) error {
	prog := &sched.Program{Rank: g.rank}
	for p := range g.n {
		if p != g.rank {
			g.send(p, notice{Kind: noticeReset, Seq: seq, Tag: tag})
			prog.Steps = append(prog.Steps, sched.Step{Kind: sched.KindRecv, Peer: p, Tag: tag})
		}
	}
	env := exec.Env{Tag: transport.Tag{Seq: seq}, Wait: &waitPolicy}
	if err := exec.Drive(ctx, prog, &env, &meeting{g: g, prog: prog, seq: seq}); err != nil {
		return fmt.Errorf("gpu: rank %d waited for its peers to reset the fused kernels' flags until the call's context ended: %w", g.rank, err)
	}
	return nil
}

// meeting is the exec.Backend of a rendezvous: a step is done once its
// peer's reset notice is in.
type meeting struct {
	g    *Comm
	prog *sched.Program
	seq  uint32
}

func (m *meeting) Start(i int) (int, error) { return m.Test(i) }

func (m *meeting) Test(i int) (int, error) {
	st := &m.prog.Steps[i]
	if _, ok := m.g.take(st.Peer, noticeReset, m.seq, st.Tag); ok {
		return 1, nil
	}
	return 0, nil
}

func (m *meeting) Poll() (moved, busy bool) {
	m.g.drain()
	return m.g.flush(), m.g.pendingOut()
}

// step issues what it can of steps[i] and reports whether anything moved.
func (g *Comm) step(c *cuda.Ctx, k *call, i int) (bool, error) {
	steps, state, es := k.steps, k.state, k.es
	st := &steps[i]
	switch st.Kind {
	case sched.KindCopy:
		src, dst := k.addr(st.Src), k.addr(st.Dst)
		if st.Dst.Len == 0 || src == dst {
			state[i] = stDone
			return true, nil
		}
		if fusesAfter(steps, state, i) {
			// The reduction into the copy's destination reads the copy's
			// source instead: one kernel for both steps.
			moved, err := g.reduce(c, k, i+1, src)
			if moved {
				state[i] = stDone
			}
			return moved, err
		}
		if err := c.Copy(dst, src, st.Dst.Len*es, g.s); err != nil {
			return false, err
		}
		state[i] = stDone
		return true, nil
	case sched.KindReduce, sched.KindRecvReduce:
		return g.reduce(c, k, i, k.addr(st.Dst))
	case sched.KindSend:
		if k.push {
			return g.pushSend(c, k, i)
		}
		peer := st.Peer
		if state[i] == stPending {
			n := k.note(noticeReady, i)
			if st.Src.Len > 0 {
				p := k.addr(st.Src)
				ex, id, err := g.export(c, p)
				if err != nil {
					return false, err
				}
				n.Flags |= flagBuf
				n.BufID, n.Mem, n.Off = id, ex.mem, uint64(p-ex.base)
			}
			if len(st.Deps) > 0 || k.ordered && st.Src.Len > 0 {
				h, err := g.signal(c, g.ready, g.nsend, peer, g.s)
				if err != nil {
					return false, err
				}
				n.Flags |= flagEvent
				n.Event = h
			}
			g.send(peer, n)
			state[i] = stPosted
			return true, nil
		}
		n, ok := g.takeStep(k, noticeDone, i)
		if !ok {
			return false, nil
		}
		if n.Flags&flagRefused != 0 {
			return false, g.refused(k, i, &n, noticeReady)
		}
		if err := g.waitFor(c, &n); err != nil {
			return false, err
		}
		state[i] = stDone
		return true, nil
	case sched.KindRecv:
		if k.push {
			if state[i] == stPending {
				if err := g.postDest(c, k, i, k.addr(st.Dst), len(st.Deps) > 0 || k.ordered); err != nil {
					return false, err
				}
				state[i] = stPosted
				return true, nil
			}
			n, ok := g.takeStep(k, noticeWritten, i)
			if !ok {
				return false, nil
			}
			if err := g.refused(k, i, &n, noticeWritten); err != nil {
				return false, err
			}
			if err := g.waitFor(c, &n); err != nil {
				return false, err
			}
			state[i] = stDone
			return true, nil
		}
		n, ok := g.takeStep(k, noticeReady, i)
		if !ok {
			return false, nil
		}
		if err := g.refused(k, i, &n, noticeDone); err != nil {
			return false, err
		}
		src, err := g.source(c, st, &n)
		if err != nil {
			return false, err
		}
		if st.Dst.Len > 0 {
			if err := c.Copy(k.addr(st.Dst), src, st.Dst.Len*es, g.s); err != nil {
				return false, err
			}
		}
		if err := g.readDone(c, k, i); err != nil {
			return false, err
		}
		state[i] = stDone
		return true, nil
	}
	return false, fmt.Errorf("unknown step kind %v", st.Kind)
}

// postDest offers dst to the sender of the receive steps[i] (push): a
// notice with the address and, if event, an event recorded behind the
// work queued so far, after which the sender may write.
func (g *Comm) postDest(c *cuda.Ctx, k *call, i int, dst cuda.DevicePtr, event bool) error {
	st := &k.steps[i]
	n := k.note(noticeDest, i)
	if st.Dst.Len > 0 {
		ex, id, err := g.export(c, dst)
		if err != nil {
			return err
		}
		n.Flags |= flagBuf
		n.BufID, n.Mem, n.Off = id, ex.mem, uint64(dst-ex.base)
		if event {
			h, err := g.signal(c, g.done, g.nrecv, st.Peer, g.s)
			if err != nil {
				return err
			}
			n.Flags |= flagEvent
			n.Event = h
		}
	}
	g.send(st.Peer, n)
	return nil
}

// pushSend runs the Send steps[i] by push: once the receiver has offered
// a destination, this rank's copy engine writes the chunk there, and a
// "written" notice carries an event recorded behind the copy.
//
// Events are reused safely: this rank records its pool's event again in
// a later call only after that call's destination notice from the same
// peer, which the peer posts after it has issued its waits of this call.
func (g *Comm) pushSend(c *cuda.Ctx, k *call, i int) (bool, error) {
	st := &k.steps[i]
	peer := st.Peer
	n, ok := g.takeStep(k, noticeDest, i)
	if !ok {
		return false, nil
	}
	if err := g.refused(k, i, &n, noticeWritten); err != nil {
		return false, err
	}
	w := k.note(noticeWritten, i)
	if st.Src.Len > 0 {
		if n.Flags&flagBuf == 0 {
			return false, fmt.Errorf("rank %d offered no room for %d elements (the ranks run different schedules)", peer, st.Src.Len)
		}
		base, err := g.mapPeer(c, peer, &n)
		if err != nil {
			return false, err
		}
		// The copy runs on the peer's copy stream, after the main stream's
		// work so far (which produced the chunk) and after the receiver's
		// event, so that copies to several peers, and copies and
		// reductions, overlap.
		cs, err := g.copyStream(c, peer)
		if err != nil {
			return false, err
		}
		if err := g.waitDeps(c, k, cs, st); err != nil {
			return false, err
		}
		if err := g.waitOn(c, cs, &n); err != nil {
			return false, err
		}
		if err := c.Copy(base.Add(int(n.Off)), k.addr(st.Src), st.Src.Len*k.es, cs); err != nil {
			return false, err
		}
		h, err := g.signal(c, g.ready, g.nsend, peer, cs)
		if err != nil {
			return false, err
		}
		w.Flags |= flagEvent
		w.Event = h
		done, err := g.localEvent(c)
		if err == nil {
			err = c.Record(done, cs)
		}
		if err != nil {
			return false, err
		}
		g.copied[i] = g.nlev - 1
		g.usedS[peer] = true
	}
	g.send(peer, w)
	k.state[i] = stDone
	return true, nil
}

// syncStep makes the main stream wait, once per call, for the pushes that
// steps[i] depends on, before work of steps[i] (or of a step fused with
// it) is queued there.
func (g *Comm) syncStep(c *cuda.Ctx, k *call, i int) error {
	if !k.push || g.synced[i] {
		return nil
	}
	g.synced[i] = true
	return g.waitCopies(c, &k.steps[i])
}

// waitDeps makes the copy stream cs wait for what the push st depends on,
// and for nothing else: the main-stream events of its dependencies, or
// their copies if they are pushes too. A push without dependencies reads
// memory that is ready when the call starts, in an ordered call once the
// stream reaches the call's start.
func (g *Comm) waitDeps(c *cuda.Ctx, k *call, cs cuda.Stream, st *sched.Step) error {
	if len(st.Deps) == 0 {
		if k.ordered {
			return c.StreamWaitEvent(cs, g.lev[k.startEv])
		}
		return nil
	}
	for _, d := range st.Deps {
		j := g.copied[d]
		if j < 0 {
			j = g.stepEv[d]
		}
		if j < 0 {
			continue // a push that copied nothing
		}
		if err := c.StreamWaitEvent(cs, g.lev[j]); err != nil {
			return err
		}
	}
	return nil
}

// markDone records, on the main stream, an event behind each of the steps
// lo..hi that are done, have queued their work there and are waited for by
// a push (needEv).
func (g *Comm) markDone(c *cuda.Ctx, k *call, lo, hi int) error {
	for i := lo; i <= hi && i < len(k.steps); i++ {
		if k.state[i] != stDone || !g.needEv[i] || g.stepEv[i] >= 0 || g.copied[i] >= 0 {
			continue
		}
		ev, err := g.localEvent(c)
		if err != nil {
			return err
		}
		if err := c.Record(ev, g.s); err != nil {
			return err
		}
		g.stepEv[i] = g.nlev - 1
	}
	return nil
}

// waitCopies makes the main stream wait for the pushes that st depends on.
func (g *Comm) waitCopies(c *cuda.Ctx, st *sched.Step) error {
	for _, d := range st.Deps {
		if j := g.copied[d]; j >= 0 {
			if err := c.StreamWaitEvent(g.s, g.lev[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyStream returns the stream of pushes to peer, made on first use.
func (g *Comm) copyStream(c *cuda.Ctx, peer int) (cuda.Stream, error) {
	if g.copyS[peer] == 0 {
		s, err := c.NewStream(0)
		if err != nil {
			return 0, err
		}
		g.copyS[peer] = s
	}
	return g.copyS[peer], nil
}

// localEvent draws the call's next local event. An event is recorded again
// only in a later call, after every wait on its earlier record was issued
// (waits are issued within the call that records).
func (g *Comm) localEvent(c *cuda.Ctx) (cuda.Event, error) {
	if g.nlev == len(g.lev) {
		ev, err := c.NewEvent(cuda.EventDisableTiming)
		if err != nil {
			return 0, err
		}
		g.lev = append(g.lev, ev)
	}
	g.nlev++
	return g.lev[g.nlev-1], nil
}

// reduce issues the Reduce or RecvReduce steps[j], dst = a op src, where a
// is dst itself or, fused with the copy before it, that copy's source. If
// the next step copies dst elsewhere and may run now, the kernel writes
// that copy too (its second destination). A pushed RecvReduce reads its
// landing area once the sender's "written" notice is in.
func (g *Comm) reduce(c *cuda.Ctx, k *call, j int, a cuda.DevicePtr) (bool, error) {
	steps, state, es := k.steps, k.state, k.es
	st := &steps[j]
	var b cuda.DevicePtr
	switch {
	case st.Kind == sched.KindRecvReduce && k.push:
		n, ok := g.takeStep(k, noticeWritten, j)
		if !ok {
			return false, nil
		}
		if err := g.waitFor(c, &n); err != nil {
			return false, err
		}
		b = k.landAt(j)
	case st.Kind == sched.KindRecvReduce:
		n, ok := g.takeStep(k, noticeReady, j)
		if !ok {
			return false, nil
		}
		var err error
		if b, err = g.source(c, st, &n); err != nil {
			return false, err
		}
	default:
		b = k.addr(st.Src)
	}
	if err := g.syncStep(c, k, j); err != nil {
		return false, err
	}
	dst := k.addr(st.Dst)
	var dst2 cuda.DevicePtr
	fused2 := false
	if j+1 < len(steps) && fusesBefore(steps, state, j) {
		// The copy's own waits come first: it may overwrite what a push
		// still reads (the input, in place).
		if err := g.syncStep(c, k, j+1); err != nil {
			return false, err
		}
		d2 := k.addr(steps[j+1].Dst)
		size := st.Dst.Len * es
		if d2 == dst || (apart(d2, a, size) || d2 == a) && (apart(d2, b, size) || d2 == b) {
			dst2, fused2 = d2, true
			if d2 == dst {
				dst2 = 0
			}
		}
	}
	if st.Dst.Len > 0 {
		if err := c.Reduce(g.s, cuda.Reduction{DType: k.k.DType, Op: k.k.Op, Dst: dst, Dst2: dst2, A: a, B: b, Count: st.Dst.Len}); err != nil {
			return false, err
		}
	}
	if st.Kind == sched.KindRecvReduce && !k.push {
		if err := g.readDone(c, k, j); err != nil {
			return false, err
		}
	}
	state[j] = stDone
	if fused2 {
		state[j+1] = stDone
	}
	return true, nil
}

// fusesAfter reports whether the copy steps[i] can be folded into the
// reduction that follows it: steps[i+1] reduces into exactly the copy's
// destination and waits for nothing else that is not done.
func fusesAfter(steps []sched.Step, state []uint8, i int) bool {
	if i+1 >= len(steps) {
		return false
	}
	nx := &steps[i+1]
	if nx.Kind != sched.KindReduce && nx.Kind != sched.KindRecvReduce || nx.Dst != steps[i].Dst {
		return false
	}
	return depsDoneBut(nx, state, i)
}

// fusesBefore reports whether the copy steps[j+1] of the reduction's
// result can be written by the reduction kernel itself: it copies exactly
// steps[j].Dst and waits for nothing else that is not done.
func fusesBefore(steps []sched.Step, state []uint8, j int) bool {
	nx := &steps[j+1]
	if nx.Kind != sched.KindCopy || nx.Src != steps[j].Dst || nx.Dst.Len != nx.Src.Len {
		return false
	}
	return depsDoneBut(nx, state, j)
}

func depsDoneBut(st *sched.Step, state []uint8, except int) bool {
	for _, d := range st.Deps {
		if int(d) != except && state[d] != stDone {
			return false
		}
	}
	return true
}

// apart reports whether [p, p+n) and [q, q+n) do not overlap.
func apart(p, q cuda.DevicePtr, n int) bool {
	return p+cuda.DevicePtr(n) <= q || q+cuda.DevicePtr(n) <= p
}

// take removes the notice of the given kind for (peer, seq, tag) from the
// stash.
func (g *Comm) take(peer int, kind, seq uint32, tag int32) (notice, bool) {
	key := stashKey{int32(peer), kind, seq, tag}
	n, ok := g.stash[key]
	if ok {
		delete(g.stash, key)
	}
	return n, ok
}

// waitFor makes the main stream wait for the event a notice carries.
func (g *Comm) waitFor(c *cuda.Ctx, n *notice) error { return g.waitOn(c, g.s, n) }

// waitOn makes stream s wait for the event a notice carries.
func (g *Comm) waitOn(c *cuda.Ctx, s cuda.Stream, n *notice) error {
	if n.Flags&flagEvent == 0 {
		return nil
	}
	ev, err := g.openEvent(c, n.Event)
	if err != nil {
		return err
	}
	return c.StreamWaitEvent(s, ev)
}

// source makes the stream wait until the chunk a ready notice announces
// may be read, and returns the chunk's address here.
func (g *Comm) source(c *cuda.Ctx, st *sched.Step, n *notice) (cuda.DevicePtr, error) {
	if err := g.waitFor(c, n); err != nil {
		return 0, err
	}
	if st.Dst.Len == 0 {
		return 0, nil
	}
	if n.Flags&flagBuf == 0 {
		return 0, fmt.Errorf("rank %d sent no data for %d elements (the ranks run different schedules)", st.Peer, st.Dst.Len)
	}
	base, err := g.mapPeer(c, st.Peer, n)
	if err != nil {
		return 0, err
	}
	return base.Add(int(n.Off)), nil
}

// readDone tells the sender of steps[i] that its chunk has been read,
// after an event recorded behind the read.
func (g *Comm) readDone(c *cuda.Ctx, k *call, i int) error {
	st := &k.steps[i]
	done := k.note(noticeDone, i)
	if st.Dst.Len > 0 {
		h, err := g.signal(c, g.done, g.nrecv, st.Peer, g.s)
		if err != nil {
			return err
		}
		done.Flags |= flagEvent
		done.Event = h
	}
	g.send(st.Peer, done)
	return nil
}

// PeerWaitError says that a point-to-point call waited for its peer until
// the call's context ended.
type PeerWaitError struct {
	Rank, Peer int
	Err        error // the executor's *exec.StepError, which wraps the context's
}

func (e *PeerWaitError) Error() string {
	return fmt.Sprintf("gpu: rank %d waited for rank %d until the call's context ended (the peer did not make the matching call, or is gone): %v", e.Rank, e.Peer, e.Err)
}

func (e *PeerWaitError) Unwrap() error { return e.Err }

func countDone(state []uint8) int {
	n := 0
	for _, s := range state {
		if s == stDone {
			n++
		}
	}
	return n
}

// drain moves every notice that has arrived into the stash.
func (g *Comm) drain() {
	var n notice
	for p := range g.n {
		if p == g.rank {
			continue
		}
		for g.mb.take(p, &n) {
			g.stash[stashKey{int32(p), n.Kind, n.Seq, n.Tag}] = n
		}
	}
}

// send posts n to peer, or queues it if the ring is full.
func (g *Comm) send(peer int, n notice) {
	if len(g.outbox[peer]) == 0 && g.mb.post(peer, &n) {
		return
	}
	g.outbox[peer] = append(g.outbox[peer], n)
}

// flush posts queued notices while there is room; it reports whether it
// posted any.
func (g *Comm) flush() bool {
	moved := false
	for p, q := range g.outbox {
		i := 0
		for i < len(q) && g.mb.post(p, &q[i]) {
			i++
		}
		if i > 0 {
			moved = true
			g.outbox[p] = append(q[:0], q[i:]...)
		}
	}
	return moved
}

func (g *Comm) pendingOut() bool {
	for _, q := range g.outbox {
		if len(q) > 0 {
			return true
		}
	}
	return false
}

// export returns the allocation that holds p, with its IPC handle, and
// its buffer id.
func (g *Comm) export(c *cuda.Ctx, p cuda.DevicePtr) (export, uint64, error) {
	id, err := cuda.BufferID(p)
	if err != nil {
		return export{}, 0, err
	}
	if ex, ok := g.exports[id]; ok {
		return ex, id, nil
	}
	base, size, err := cuda.AddressRange(p)
	if err != nil {
		return export{}, 0, err
	}
	h, err := c.IPCGetMemHandle(base)
	if err != nil {
		return export{}, 0, fmt.Errorf("exporting the allocation at %#x (%d bytes): %w", uint64(base), size, err)
	}
	ex := export{base: base, size: size, mem: h}
	g.exports[id] = ex
	return ex, id, nil
}

// mapPeer returns the address here of the peer's allocation that n names.
func (g *Comm) mapPeer(c *cuda.Ctx, peer int, n *notice) (cuda.DevicePtr, error) {
	key := peerBuf{peer, n.BufID}
	if p, ok := g.mapped[key]; ok {
		return p, nil
	}
	p, err := c.IPCOpenMemHandle(n.Mem)
	if err != nil {
		return 0, fmt.Errorf("opening rank %d's buffer %d: %w", peer, n.BufID, err)
	}
	g.mapped[key] = p
	return p, nil
}

// signal records on stream s the next event of this call's messages to
// peer from pool l (g.ready with count g.nsend, or g.done with g.nrecv),
// and returns its handle for a notice.
func (g *Comm) signal(c *cuda.Ctx, l [][]ownEvent, count []int, peer int, s cuda.Stream) (cuda.IPCEventHandle, error) {
	e, err := g.ownEvent(c, l, peer, count[peer])
	if err != nil {
		return cuda.IPCEventHandle{}, err
	}
	count[peer]++
	return e.h, c.Record(e.ev, s)
}

// ownEvent returns event i of this rank's pool for peer in l (g.ready or
// g.done), creating it if needed.
func (g *Comm) ownEvent(c *cuda.Ctx, l [][]ownEvent, peer, i int) (ownEvent, error) {
	for len(l[peer]) <= i {
		ev, err := c.NewEvent(cuda.EventInterprocess | cuda.EventDisableTiming)
		if err != nil {
			return ownEvent{}, err
		}
		h, err := c.IPCGetEventHandle(ev)
		if err != nil {
			c.DestroyEvent(ev)
			return ownEvent{}, err
		}
		l[peer] = append(l[peer], ownEvent{ev, h})
	}
	return l[peer][i], nil
}

// openEvent returns a peer's event named by h, opened here once.
func (g *Comm) openEvent(c *cuda.Ctx, h cuda.IPCEventHandle) (cuda.Event, error) {
	if ev, ok := g.opened[h]; ok {
		return ev, nil
	}
	ev, err := c.IPCOpenEventHandle(h)
	if err != nil {
		return 0, fmt.Errorf("opening a peer's event: %w", err)
	}
	g.opened[h] = ev
	return ev, nil
}
