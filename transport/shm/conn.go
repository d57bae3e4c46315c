package shm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/braid-ccl/braid/transport"
)

// maxMessage bounds a message's length as a frame announces it (as over
// TCP): a larger one is a corrupt frame.
const maxMessage = 1 << 42

// key is the part of a tag that matching uses.
type key [3]uint32

// conn is the connection to one peer. Its receive side (the inbound ring,
// posted receives, unexpected messages) is guarded by rmu; its send side
// (the outbound ring in the peer's segment, the completion slots) by smu.
// Every access to a mapping happens under one of the two with closed false,
// so Close, which takes both, can unmap safely.
type conn struct {
	m         *mesh
	peer      int // world rank
	peerPID   int
	peerStart uint64   // the peer process's start time, against pid reuse
	peerSeg   *segment // our mapping of the peer's segment
	peerIdx   int      // this rank's index in the peer's segment's list of peers
	cma       bool     // the peer copies our large messages out of our memory

	closed atomic.Bool
	err    atomic.Pointer[error] // the first failure: peer lost, aborted

	rmu      sync.Mutex
	in       rx
	posted   []*recvReq // in the order posted; few, so a scan beats a map
	unexp    map[key]*unexpMsg
	partial  map[key]partial // messages received in chunks, not yet complete
	freeMsgs *unexpMsg
	acks     int // offset of our completion slots in the peer's segment

	smu       sync.Mutex
	out       tx
	slots     []*sendReq // outstanding rendezvous sends by slot
	freeSlots []uint32
	gen       uint32
	mySlots   int // offset of the completion slots for this peer in our segment
}

// partial is where the rest of a chunked message goes: a receive, an
// unexpected message, or nowhere (drop). A receive that does not match a
// chunked message is dropping it: it fails, with the error already in its
// err, only when the last chunk is read, so that its owner keeps draining
// the ring for the sender until then.
type partial struct {
	r    *recvReq
	u    *unexpMsg
	drop bool
}

// unexpMsg is a message, or a rendezvous descriptor, that arrived before its
// receive was posted. Its data grows as its chunks arrive (add), rather
// than being allocated at the length its first frame announces, so that a
// corrupt length costs nothing until its bytes come.
type unexpMsg struct {
	next  *unexpMsg
	sig   uint32
	total uint64
	got   uint64 // len(data)
	data  []byte
	rndv  bool
	addr  uint64
	slot  uint32
	gen   uint32
}

// Completion word values: gen<<8 | status.
const (
	ackOK       = 1
	ackMismatch = 2
	ackFailed   = 3
	ackBusy     = 4 // the receiver is copying: the send completes soon
)

// Peer returns the peer's world rank.
func (c *conn) Peer() int { return c.peer }

// failure returns the error that requests on the conn fail with, or nil.
func (c *conn) failure() error {
	if c.closed.Load() {
		return c.closedErr()
	}
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *conn) closedErr() error {
	return fmt.Errorf("shm: rank %d: connection to rank %d: %w", c.m.rank, c.peer, transport.ErrClosed)
}

// fail records the conn's first failure and, if lost, tells the Lost
// callback (in its own goroutine, as fail may run under a lock).
func (c *conn) fail(err error, lost bool) {
	if !c.err.CompareAndSwap(nil, &err) {
		return
	}
	if lost && c.m.cfg.Lost != nil {
		go c.m.cfg.Lost(c.peer, err)
	}
}

// mismatch returns the error for a message that does not fit a receive.
func (c *conn) mismatch(tag transport.Tag, buf []byte, sig uint32, total uint64) error {
	if uint64(len(buf)) != total {
		return fmt.Errorf("shm: rank %d: message %v from rank %d has %d bytes, receive expects %d: %w",
			c.m.rank, tag, c.peer, total, len(buf), transport.ErrMismatch)
	}
	if sig != tag.Sig {
		return fmt.Errorf("shm: rank %d: message %v from rank %d has signature %08x, receive expects %08x: %w",
			c.m.rank, tag, c.peer, sig, tag.Sig, transport.ErrMismatch)
	}
	return nil
}

// Irecv posts a receive; see transport.Conn.
func (c *conn) Irecv(tag transport.Tag, buf []byte) (transport.Request, error) {
	k := tag.Key()
	c.rmu.Lock()
	if c.closed.Load() {
		c.rmu.Unlock()
		return nil, c.closedErr()
	}
	if u := c.popUnexp(k); u != nil {
		req, err := c.takeUnexp(tag, buf, u)
		c.rmu.Unlock()
		return req, err
	}
	r := &recvReq{c: c, tag: tag, buf: buf}
	c.post(r)
	c.progress()
	c.rmu.Unlock()
	return r, nil
}

// takeUnexp receives the unexpected message u into buf. Called under rmu.
func (c *conn) takeUnexp(tag transport.Tag, buf []byte, u *unexpMsg) (transport.Request, error) {
	defer c.freeUnexp(u)
	k := tag.Key()
	if err := c.mismatch(tag, buf, u.sig, u.total); err != nil {
		if u.rndv {
			c.ack(u.slot, u.gen, ackMismatch)
		} else if u.got < u.total {
			r := &recvReq{c: c, tag: tag, buf: buf, err: err}
			c.partial[k] = partial{r: r, drop: true}
			return r, nil
		}
		return transport.DoneRequest{Err: err}, nil
	}
	if u.rndv {
		r := &recvReq{c: c, tag: tag, buf: buf, addr: u.addr, slot: u.slot, gen: u.gen}
		r.state.Store(recvRndv)
		return r, nil
	}
	copy(buf, u.data)
	if u.got == u.total {
		return doneOK, nil
	}
	r := &recvReq{c: c, tag: tag, buf: buf, got: u.got}
	c.partial[k] = partial{r: r}
	return r, nil
}

// post appends r to the posted receives.
func (c *conn) post(r *recvReq) { c.posted = append(c.posted, r) }

// popPosted removes and returns the oldest posted receive of k, or nil.
func (c *conn) popPosted(k key) *recvReq {
	for i, r := range c.posted {
		if r.tag.Comm == k[0] && r.tag.Seq == k[1] && r.tag.Step == k[2] {
			c.removePosted(i)
			return r
		}
	}
	return nil
}

func (c *conn) removePosted(i int) {
	n := len(c.posted)
	copy(c.posted[i:], c.posted[i+1:])
	c.posted[n-1] = nil
	c.posted = c.posted[:n-1]
}

// unpost removes r from the posted receives, if it is there.
func (c *conn) unpost(r *recvReq) {
	for i, p := range c.posted {
		if p == r {
			c.removePosted(i)
			return
		}
	}
}

// popUnexp removes and returns the oldest unexpected message of k, or nil.
func (c *conn) popUnexp(k key) *unexpMsg {
	if len(c.unexp) == 0 {
		return nil
	}
	u := c.unexp[k]
	if u == nil {
		return nil
	}
	if u.next == nil {
		delete(c.unexp, k)
	} else {
		c.unexp[k] = u.next
		u.next = nil
	}
	return u
}

// pushUnexp appends u to the unexpected messages of k and calls the
// Config's Unexpected hook (with rmu held: the hook must not use the Conn).
func (c *conn) pushUnexp(k key, u *unexpMsg) {
	if f := c.m.cfg.Unexpected; f != nil {
		f(c.peer, transport.Tag{Comm: k[0], Seq: k[1], Step: k[2], Sig: u.sig})
	}
	p := c.unexp[k]
	if p == nil {
		c.unexp[k] = u
		return
	}
	for p.next != nil {
		p = p.next
	}
	p.next = u
}

// newUnexp returns an unexpected message of kind without data, reusing a
// freed one (and its buffer) where possible.
func (c *conn) newUnexp(kind uint32, sig uint32, total uint64) *unexpMsg {
	u := c.freeMsgs
	if u != nil {
		c.freeMsgs = u.next
		u.next = nil
	} else {
		u = &unexpMsg{}
	}
	u.sig, u.total, u.got = sig, total, 0
	u.rndv = kind == kindRndv
	u.data = u.data[:0]
	return u
}

// add appends the next chunk p of u's data. The buffer grows to what has
// arrived, at least doubling, never past u.total: at most about twice the
// bytes received are allocated.
func (u *unexpMsg) add(p []byte) {
	if need := len(u.data) + len(p); need > cap(u.data) {
		n := uint64(max(need, 2*cap(u.data), 256))
		d := make([]byte, len(u.data), min(n, u.total))
		copy(d, u.data)
		u.data = d
	}
	u.data = append(u.data, p...)
	u.got = uint64(len(u.data))
}

func (c *conn) freeUnexp(u *unexpMsg) {
	if cap(u.data) > c.m.opts.EagerLimit {
		u.data = nil
	}
	u.next = c.freeMsgs
	c.freeMsgs = u
}

// progress drains the inbound ring and notices the peer's abort or close.
// It reports whether it read any frame. Called under rmu.
func (c *conn) progress() bool {
	if c.closed.Load() {
		return false
	}
	st := c.peerSeg.state() // before draining: what the peer wrote before closing is in the ring
	moved := c.drain()
	if st != stateAlive && c.err.Load() == nil {
		if st == stateAborted {
			c.fail(fmt.Errorf("shm: rank %d: peer rank %d (pid %d) aborted (%s): %w", c.m.rank, c.peer, c.peerPID, c.peerSeg.reason(), transport.ErrAborted), true)
		} else {
			c.fail(fmt.Errorf("shm: rank %d: peer rank %d (pid %d) %w", c.m.rank, c.peer, c.peerPID, transport.ErrPeerClosed), true)
		}
	}
	if p := c.err.Load(); p != nil {
		c.failAll(*p)
	}
	return moved
}

// drain handles every frame in the inbound ring. Called under rmu.
func (c *conn) drain() (moved bool) {
	defer c.in.Flush()
	// At most one ring's worth per call, so that a sender that keeps
	// writing cannot keep the caller here.
	for stop := c.in.Pos() + uint64(len(c.in.Data)); c.in.Pos() < stop; {
		h, payload := c.in.Next()
		if h == nil {
			return moved
		}
		moved = true
		chunk := h.Chunk
		switch {
		case h.Kind == kindData && len(payload) == int(chunk) && c.onData(h, payload):
		case h.Kind == kindRndv && c.onRndv(h):
		default:
			c.fail(fmt.Errorf("shm: rank %d: corrupt frame (kind %d) from rank %d: %w", c.m.rank, h.Kind, c.peer, transport.ErrPeerLost), true)
			return moved
		}
		c.in.Release(chunk)
	}
	return moved
}

// onData handles a data frame: a whole message or one chunk of one. It
// returns false if the frame contradicts the frames before it.
func (c *conn) onData(h *frameHdr, p []byte) bool {
	k := key{h.Comm, h.Seq, h.Step}
	sig, total, off := h.Sig, h.Total, h.Off
	n := uint64(len(p))
	if total > maxMessage || off > total || total-off < n {
		return false
	}
	last := off+n == total
	if off == 0 {
		if r := c.popPosted(k); r != nil {
			if err := c.mismatch(r.tag, r.buf, sig, total); err != nil {
				if last {
					r.complete(err)
				} else {
					r.err = err
					c.partial[k] = partial{r: r, drop: true}
				}
				return true
			}
			copy(r.buf, p)
			if last {
				r.complete(nil)
				return true
			}
			r.got = n
			c.partial[k] = partial{r: r}
			return true
		}
		u := c.newUnexp(kindData, sig, total)
		u.add(p)
		c.pushUnexp(k, u)
		if !last {
			c.partial[k] = partial{u: u}
		}
		return true
	}
	ref, ok := c.partial[k]
	if !ok {
		return false
	}
	switch {
	case ref.drop:
		if last && ref.r != nil {
			ref.r.complete(ref.r.err)
		}
	case ref.r != nil:
		if uint64(len(ref.r.buf)) != total {
			return false
		}
		copy(ref.r.buf[off:], p)
		ref.r.got += n
		if last {
			ref.r.complete(nil)
		}
	case ref.u != nil:
		if ref.u.total != total || off != ref.u.got {
			return false // a sender writes a message's chunks in order
		}
		ref.u.add(p)
	}
	if last {
		delete(c.partial, k)
	}
	return true
}

// onRndv handles a rendezvous descriptor. It returns false if the frame
// is corrupt: a completion slot outside the peer's, which the receiver
// would write to, or an impossible length.
func (c *conn) onRndv(h *frameHdr) bool {
	if h.Slot >= uint32(c.peerSeg.l.nSlots) || h.Total > maxMessage {
		return false
	}
	k := key{h.Comm, h.Seq, h.Step}
	r := c.popPosted(k)
	if r == nil {
		u := c.newUnexp(kindRndv, h.Sig, h.Total)
		u.addr, u.slot, u.gen = h.Off, h.Slot, h.Gen
		c.pushUnexp(k, u)
		return true
	}
	if err := c.mismatch(r.tag, r.buf, h.Sig, h.Total); err != nil {
		c.ack(h.Slot, h.Gen, ackMismatch)
		r.complete(err)
		return true
	}
	r.addr, r.slot, r.gen = h.Off, h.Slot, h.Gen
	r.state.Store(recvRndv) // the receive's owner copies in Test
	return true
}

// ack tells the peer that its rendezvous send in slot completed. Called
// under rmu with closed false.
func (c *conn) ack(slot, gen uint32, status uint64) {
	atomic.StoreUint64(c.peerSeg.u64(c.acks+8*int(slot)), uint64(gen)<<8|status)
}

// failAll fails the posted and partly received receives with err. Called
// under rmu.
func (c *conn) failAll(err error) {
	for i, r := range c.posted {
		r.complete(err)
		c.posted[i] = nil
	}
	c.posted = c.posted[:0]
	for k, p := range c.partial {
		if p.r != nil && p.r.state.Load() != recvDone {
			p.r.complete(err)
		}
		delete(c.partial, k)
	}
}

// pollRecv makes receive-side progress if no one else is, so that a rank
// that only sends still empties its inbound ring and sees failures.
func (c *conn) pollRecv() (moved bool) {
	if c.rmu.TryLock() {
		moved = c.progress()
		c.rmu.Unlock()
	}
	return moved
}

// Isend starts a send; see transport.Conn.
func (c *conn) Isend(tag transport.Tag, data []byte) (transport.Request, error) {
	if err := c.failure(); err != nil {
		return nil, err
	}
	c.smu.Lock()
	if c.closed.Load() {
		c.smu.Unlock()
		return nil, c.closedErr()
	}
	if len(data) <= c.m.opts.EagerLimit || !c.cma {
		var p progress
		if c.pushData(tag, data, &p) {
			c.smu.Unlock()
			return doneOK, nil
		}
		c.smu.Unlock()
		return &sendReq{c: c, tag: tag, data: data, progress: p}, nil
	}
	s := &sendReq{c: c, tag: tag, data: data, rndv: true}
	c.pushRndv(s)
	c.smu.Unlock()
	return s, nil
}

// progress is how far a send got.
type progress struct {
	sent    int  // bytes written into the ring
	started bool // the first frame is written
}

// pushData writes as much of a message into the ring as fits, continuing
// from p, and reports whether all of it is written. Called under smu.
func (c *conn) pushData(tag transport.Tag, data []byte, p *progress) bool {
	limit := c.m.opts.EagerLimit
	if !c.cma {
		limit = c.m.opts.chunk
	}
	h := frameHdr{Kind: kindData, Comm: tag.Comm, Seq: tag.Seq, Step: tag.Step, Sig: tag.Sig, Total: uint64(len(data))}
	for !p.started || p.sent < len(data) {
		n := min(len(data)-p.sent, limit)
		h.Chunk, h.Off = uint32(n), uint64(p.sent)
		if !c.out.Write(&h, data[p.sent:p.sent+n]) {
			return false
		}
		p.started = true
		p.sent += n
	}
	return true
}

// pushRndv takes a completion slot for s and writes its descriptor, as far
// as resources allow. Called under smu.
func (c *conn) pushRndv(s *sendReq) {
	if !s.hasSlot {
		n := len(c.freeSlots)
		if n == 0 {
			return
		}
		s.slot = c.freeSlots[n-1]
		c.freeSlots = c.freeSlots[:n-1]
		c.gen++
		s.gen = c.gen
		s.hasSlot = true
		c.slots[s.slot] = s
	}
	h := frameHdr{Kind: kindRndv, Comm: s.tag.Comm, Seq: s.tag.Seq, Step: s.tag.Step, Sig: s.tag.Sig,
		Total: uint64(len(s.data)), Slot: s.slot, Gen: s.gen}
	h.Off = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s.data))))
	if c.out.Write(&h, nil) {
		s.started = true
	}
}

// releaseSlot frees s's completion slot. Called under smu.
func (c *conn) releaseSlot(s *sendReq) {
	if s.hasSlot {
		c.slots[s.slot] = nil
		c.freeSlots = append(c.freeSlots, s.slot)
		s.hasSlot = false
	}
}
