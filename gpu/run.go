package gpu

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// Step states. A Send is posted once its notice is out, and done once the
// reader's "read done" event is waited for on this rank's stream; every
// other step is done once its work is queued on the stream (the stream
// runs it after everything queued before, its dependencies included).
const (
	stPending uint8 = iota
	stPosted
	stDone
)

// Waiting for peers: poll without pause until spinFor has passed, then
// yield the thread between rounds until yieldFor has passed, then sleep
// sleepFor between rounds. The ranks of a collective arrive within
// microseconds of each other when they are in step, so the spin covers
// the common case; a rank that waits for a late peer gives the core away.
const (
	spinFor  = 100 * time.Microsecond
	yieldFor = 2 * time.Millisecond
	sleepFor = 50 * time.Microsecond
)

// run executes k on the worker's thread.
func (g *Comm) run(ctx context.Context, c *cuda.Ctx, k *Call, seq uint32) error {
	prog := k.Prog
	es := k.DType.Size()
	if need := prog.TmpLen * es; need > g.tmpSize {
		p, err := c.Alloc(need)
		if err != nil {
			return fmt.Errorf("gpu: scratch of %d bytes: %w", need, err)
		}
		if g.tmp != 0 {
			g.oldTmp = append(g.oldTmp, g.tmp)
		}
		g.tmp, g.tmpSize = p, need
	}
	bases := [3]cuda.DevicePtr{sched.In: k.In, sched.Out: k.Out, sched.Tmp: g.tmp}
	addr := func(ch sched.Chunk) cuda.DevicePtr { return bases[ch.Buf].Add(ch.Off * es) }
	steps := prog.Steps
	if cap(g.state) < len(steps) {
		g.state = make([]uint8, len(steps))
	}
	state := g.state[:len(steps)]
	clear(state)
	clear(g.nsend)
	clear(g.nrecv)

	first := 0 // steps before first are done
	idle := 0
	var idleSince time.Time
	var t0 time.Time
	if g.stats != nil {
		t0 = time.Now()
	}
	for first < len(steps) || g.pendingOut() {
		g.drain()
		progress := g.flush()
		for i := first; i < len(steps); i++ {
			if state[i] == stDone {
				if i == first {
					first++
				}
				continue
			}
			st := &steps[i]
			if !depsDone(st, state) {
				continue
			}
			moved, err := g.step(c, k, steps, state, i, seq, es, addr)
			if err != nil {
				return fmt.Errorf("gpu: rank %d, step %d (%v): %w", g.rank, i, st, err)
			}
			progress = progress || moved
			if state[i] == stDone && i == first {
				first++
			}
		}
		if progress {
			if idle > 0 && g.stats != nil {
				g.stats.wait += time.Since(idleSince)
			}
			idle = 0
			continue
		}
		idle++
		if idle == 1 {
			idleSince = time.Now()
		}
		if idle%64 == 0 {
			switch waited := time.Since(idleSince); {
			case waited < spinFor:
			case waited < yieldFor:
				runtime.Gosched()
			default:
				time.Sleep(sleepFor)
			}
		}
		if idle%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("gpu: rank %d waited for its peers until the call's context ended (%d of %d steps done): %w",
					g.rank, countDone(state), len(steps), err)
			}
		}
	}
	if k.Op == dtype.Avg && k.Params.Coll.Reduces() {
		for _, ch := range prog.Final {
			p := addr(ch)
			if err := c.Divide(g.s, k.DType, p, p, ch.Len, g.n); err != nil {
				return err
			}
		}
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

// step issues what it can of steps[i] and reports whether anything moved.
func (g *Comm) step(c *cuda.Ctx, k *Call, steps []sched.Step, state []uint8, i int, seq uint32, es int, addr func(sched.Chunk) cuda.DevicePtr) (bool, error) {
	st := &steps[i]
	switch st.Kind {
	case sched.KindCopy:
		src, dst := addr(st.Src), addr(st.Dst)
		if st.Dst.Len == 0 || src == dst {
			state[i] = stDone
			return true, nil
		}
		if fusesAfter(steps, state, i) {
			// The reduction into the copy's destination reads the copy's
			// source instead: one kernel for both steps.
			moved, err := g.reduce(c, k, steps, state, i+1, src, seq, es, addr)
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
		return g.reduce(c, k, steps, state, i, addr(st.Dst), seq, es, addr)
	case sched.KindSend:
		peer := st.Peer
		if state[i] == stPending {
			n := notice{Kind: noticeReady, Seq: seq, Tag: st.Tag}
			if st.Src.Len > 0 {
				p := addr(st.Src)
				ex, id, err := g.export(c, p)
				if err != nil {
					return false, err
				}
				n.Flags |= flagBuf
				n.BufID, n.Mem, n.Off = id, ex.mem, uint64(p-ex.base)
			}
			if len(st.Deps) > 0 {
				e, err := g.ownEvent(c, g.ready, peer, g.nsend[peer])
				if err != nil {
					return false, err
				}
				g.nsend[peer]++
				if err := c.Record(e.ev, g.s); err != nil {
					return false, err
				}
				n.Flags |= flagEvent
				n.Event = e.h
			}
			g.send(peer, n)
			state[i] = stPosted
			return true, nil
		}
		key := stashKey{int32(peer), noticeDone, seq, st.Tag}
		n, ok := g.stash[key]
		if !ok {
			return false, nil
		}
		delete(g.stash, key)
		if err := g.waitFor(c, &n); err != nil {
			return false, err
		}
		state[i] = stDone
		return true, nil
	case sched.KindRecv:
		n, ok := g.takeReady(st, seq)
		if !ok {
			return false, nil
		}
		src, err := g.source(c, st, &n)
		if err != nil {
			return false, err
		}
		if st.Dst.Len > 0 {
			if err := c.Copy(addr(st.Dst), src, st.Dst.Len*es, g.s); err != nil {
				return false, err
			}
		}
		if err := g.readDone(c, st, seq); err != nil {
			return false, err
		}
		state[i] = stDone
		return true, nil
	}
	return false, fmt.Errorf("unknown step kind %v", st.Kind)
}

// reduce issues the Reduce or RecvReduce steps[j], dst = a op src, where a
// is dst itself or, fused with the copy before it, that copy's source. If
// the next step copies dst elsewhere and may run now, the kernel writes
// that copy too (its second destination).
func (g *Comm) reduce(c *cuda.Ctx, k *Call, steps []sched.Step, state []uint8, j int, a cuda.DevicePtr, seq uint32, es int, addr func(sched.Chunk) cuda.DevicePtr) (bool, error) {
	st := &steps[j]
	var n notice
	if st.Kind == sched.KindRecvReduce {
		var ok bool
		if n, ok = g.takeReady(st, seq); !ok {
			return false, nil
		}
	}
	var b cuda.DevicePtr
	if st.Kind == sched.KindRecvReduce {
		var err error
		if b, err = g.source(c, st, &n); err != nil {
			return false, err
		}
	} else {
		b = addr(st.Src)
	}
	dst := addr(st.Dst)
	var dst2 cuda.DevicePtr
	fused2 := false
	if j+1 < len(steps) && fusesBefore(steps, state, j) {
		d2 := addr(steps[j+1].Dst)
		size := st.Dst.Len * es
		if d2 == dst || (apart(d2, a, size) || d2 == a) && (apart(d2, b, size) || d2 == b) {
			dst2, fused2 = d2, true
			if d2 == dst {
				dst2 = 0
			}
		}
	}
	if st.Dst.Len > 0 {
		if err := c.Reduce(g.s, cuda.Reduction{DType: k.DType, Op: k.Op, Dst: dst, Dst2: dst2, A: a, B: b, Count: st.Dst.Len}); err != nil {
			return false, err
		}
	}
	if st.Kind == sched.KindRecvReduce {
		if err := g.readDone(c, st, seq); err != nil {
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

// takeReady removes the ready notice for the receive st from the stash.
func (g *Comm) takeReady(st *sched.Step, seq uint32) (notice, bool) {
	key := stashKey{int32(st.Peer), noticeReady, seq, st.Tag}
	n, ok := g.stash[key]
	if ok {
		delete(g.stash, key)
	}
	return n, ok
}

// waitFor makes the stream wait for the event a notice carries.
func (g *Comm) waitFor(c *cuda.Ctx, n *notice) error {
	if n.Flags&flagEvent == 0 {
		return nil
	}
	ev, err := g.openEvent(c, n.Event)
	if err != nil {
		return err
	}
	return c.StreamWaitEvent(g.s, ev)
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

// readDone tells the sender of st that its chunk has been read, after an
// event recorded behind the read.
func (g *Comm) readDone(c *cuda.Ctx, st *sched.Step, seq uint32) error {
	done := notice{Kind: noticeDone, Seq: seq, Tag: st.Tag}
	if st.Dst.Len > 0 {
		e, err := g.ownEvent(c, g.done, st.Peer, g.nrecv[st.Peer])
		if err != nil {
			return err
		}
		g.nrecv[st.Peer]++
		if err := c.Record(e.ev, g.s); err != nil {
			return err
		}
		done.Flags |= flagEvent
		done.Event = e.h
	}
	g.send(st.Peer, done)
	return nil
}

func depsDone(st *sched.Step, state []uint8) bool {
	for _, d := range st.Deps {
		if state[d] != stDone {
			return false
		}
	}
	return true
}

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
	id, err := bufferID(p)
	if err != nil {
		return export{}, 0, err
	}
	if ex, ok := g.exports[id]; ok {
		return ex, id, nil
	}
	base, size, err := addressRange(p)
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
