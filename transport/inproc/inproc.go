package inproc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/braid-ccl/braid/transport"
)

// request is an inproc send or receive.
type request struct {
	done atomic.Bool
	err  error
	ch   chan struct{}

	// For Cancel: the box a request waits in, and its entry there.
	box  *box
	recv *postedRecv
	send *pendingSend
}

func newRequest() *request { return &request{ch: make(chan struct{})} }

func (r *request) complete(err error) {
	if r.done.Load() {
		return
	}
	r.err = err
	r.done.Store(true)
	close(r.ch)
}

// Test reports whether the request completed.
func (r *request) Test() (bool, error) {
	if r.done.Load() {
		return true, r.err
	}
	return false, nil
}

// Done returns a channel closed on completion.
func (r *request) Done() <-chan struct{} { return r.ch }

// Cancel withdraws the request (transport.Canceler): a posted receive
// leaves its box, so that no sender copies into its buffer; a send that
// waits for its receiver is given a copy of its data, so that the
// receiver no longer reads the caller's buffer.
func (r *request) Cancel() {
	b := r.box
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.done.Load() {
		return
	}
	switch {
	case r.recv != nil:
		for i, x := range b.recvs {
			if x == r.recv {
				b.recvs = append(b.recvs[:i], b.recvs[i+1:]...)
				break
			}
		}
		r.complete(fmt.Errorf("inproc: receive of %v: %w", r.recv.tag, transport.ErrCanceled))
	case r.send != nil:
		r.send.data = append([]byte(nil), r.send.data...)
		r.send.eager = true
		r.complete(fmt.Errorf("inproc: send of %v: %w", r.send.tag, transport.ErrCanceled))
	}
}

type pendingSend struct {
	tag   transport.Tag
	data  []byte
	req   *request
	eager bool // buffered: req completed at Isend
}

// EagerLimit is the largest message that Isend buffers and completes at
// once; larger ones complete when the receiver has copied them.
const EagerLimit = 64 << 10

type postedRecv struct {
	tag transport.Tag
	buf []byte
	req *request
}

// box holds the messages from one sender to one receiver.
type box struct {
	mu    sync.Mutex
	sends []*pendingSend
	recvs []*postedRecv
	dead  error // set when either side is gone; new requests fail with it
}

// deliver copies s into r and completes both; called with the box locked.
func deliver(s *pendingSend, r *postedRecv, from, to int) {
	if len(s.data) != len(r.buf) || s.tag.Sig != r.tag.Sig {
		if s.eager {
			// The sender has moved on; only the receiver can learn.
			r.req.complete(fmt.Errorf("inproc: message %v from rank %d to rank %d: sent %d bytes (sig %08x), receiver expected %d bytes (sig %08x): %w",
				s.tag, from, to, len(s.data), s.tag.Sig, len(r.buf), r.tag.Sig, transport.ErrMismatch))
			return
		}
		err := fmt.Errorf("inproc: message %v from rank %d to rank %d: sent %d bytes (sig %08x), receiver expected %d bytes (sig %08x): %w",
			s.tag, from, to, len(s.data), s.tag.Sig, len(r.buf), r.tag.Sig, transport.ErrMismatch)
		s.req.complete(err)
		r.req.complete(err)
		return
	}
	copy(r.buf, s.data)
	s.req.complete(nil)
	r.req.complete(nil)
}

// World is a set of inproc meshes that can reach each other.
type World struct {
	n      int
	boxes  [][]*box // boxes[to][from]
	meshes []*Mesh
}

// Mesh is one rank's view of a World.
type Mesh struct {
	w      *World
	rank   int
	conns  []*Conn
	lost   func(peer int, err error)
	closed atomic.Bool

	unexpected func(peer int, tag transport.Tag) // set by Connect before any traffic
}

// Conn is a connection from one rank to another in the same World.
type Conn struct {
	m    *Mesh
	peer int
}

// NewWorld returns n meshes, one per rank, already connected. lost, if not
// nil, is called as lost(rank, peer, err) when rank learns that peer aborted
// or closed.
func NewWorld(n int, lost func(rank, peer int, err error)) []*Mesh {
	w := &World{n: n, boxes: make([][]*box, n), meshes: make([]*Mesh, n)}
	for to := range n {
		w.boxes[to] = make([]*box, n)
		for from := range n {
			w.boxes[to][from] = &box{}
		}
	}
	for r := range n {
		m := &Mesh{w: w, rank: r, conns: make([]*Conn, n)}
		if lost != nil {
			rank := r
			m.lost = func(peer int, err error) { lost(rank, peer, err) }
		}
		for p := range n {
			if p != r {
				m.conns[p] = &Conn{m: m, peer: p}
			}
		}
		w.meshes[r] = m
	}
	return w.meshes
}

// Conn returns the connection to peer, or nil for self or an unknown rank.
func (m *Mesh) Conn(peer int) transport.Conn {
	if peer < 0 || peer >= len(m.conns) || m.conns[peer] == nil {
		return nil
	}
	return m.conns[peer]
}

// Abort fails every pending request that involves this rank with
// ErrAborted and tells every peer through its lost callback.
func (m *Mesh) Abort(err error) {
	m.kill(fmt.Errorf("inproc: rank %d aborted: %v: %w", m.rank, err, transport.ErrAborted))
}

// Close fails this rank's pending requests with ErrClosed; peers see the
// rank as closed (transport.ErrPeerClosed, a clean shutdown, which is also
// ErrPeerLost for a request that still needed it).
func (m *Mesh) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.kill(fmt.Errorf("inproc: rank %d %w", m.rank, transport.ErrPeerClosed))
	return nil
}

func (m *Mesh) kill(peerErr error) {
	w := m.w
	selfErr := peerErr
	if m.closed.Load() {
		selfErr = fmt.Errorf("inproc: rank %d: %w", m.rank, transport.ErrClosed)
	}
	for p := range w.n {
		if p == m.rank {
			continue
		}
		// Into this rank: the peer's sends fail (the receiver is gone),
		// this rank's receives fail.
		in := w.boxes[m.rank][p]
		in.mu.Lock()
		if in.dead == nil {
			in.dead = selfErr
		}
		for _, s := range in.sends {
			s.req.complete(peerErr)
		}
		for _, r := range in.recvs {
			r.req.complete(selfErr)
		}
		in.sends, in.recvs = nil, nil
		in.mu.Unlock()
		// Out of this rank: buffered sends stay deliverable; the others
		// fail, and so do the peer's receives that nothing will match.
		out := w.boxes[p][m.rank]
		out.mu.Lock()
		if out.dead == nil {
			out.dead = peerErr
		}
		keep := out.sends[:0]
		for _, s := range out.sends {
			if s.eager {
				keep = append(keep, s)
				continue
			}
			s.req.complete(selfErr)
		}
		out.sends = keep
		for _, r := range out.recvs {
			r.req.complete(peerErr)
		}
		out.recvs = nil
		out.mu.Unlock()
		if pm := w.meshes[p]; pm.lost != nil && !pm.closed.Load() {
			pm.lost(m.rank, peerErr)
		}
	}
}

// Peer returns the peer's rank.
func (c *Conn) Peer() int { return c.peer }

// Isend offers data to the peer. It completes when the peer has received it.
func (c *Conn) Isend(tag transport.Tag, data []byte) (transport.Request, error) {
	b := c.m.w.boxes[c.peer][c.m.rank]
	req := newRequest()
	if c.m.closed.Load() {
		req.complete(fmt.Errorf("inproc: rank %d: send after Close: %w", c.m.rank, transport.ErrClosed))
		return req, nil
	}
	b.mu.Lock()
	if b.dead != nil {
		b.mu.Unlock()
		req.complete(b.dead)
		return req, nil
	}
	k := tag.Key()
	for i, r := range b.recvs {
		if r.tag.Key() == k {
			b.recvs = append(b.recvs[:i], b.recvs[i+1:]...)
			deliver(&pendingSend{tag: tag, data: data, req: req}, r, c.m.rank, c.peer)
			b.mu.Unlock()
			return req, nil
		}
	}
	ps := &pendingSend{tag: tag, data: data, req: req}
	req.box, req.send = b, ps
	if len(data) <= EagerLimit {
		// Small messages are buffered and complete at once, like the
		// eager protocol of the process transports.
		ps.data = append([]byte(nil), data...)
		ps.eager = true
		req.complete(nil)
	}
	b.sends = append(b.sends, ps)
	b.mu.Unlock()
	if f := c.m.w.meshes[c.peer].unexpected; f != nil {
		f(c.m.rank, tag)
	}
	return req, nil
}

// Irecv posts a receive of the message with tag from the peer.
func (c *Conn) Irecv(tag transport.Tag, buf []byte) (transport.Request, error) {
	b := c.m.w.boxes[c.m.rank][c.peer]
	req := newRequest()
	if c.m.closed.Load() {
		req.complete(fmt.Errorf("inproc: rank %d: receive after Close: %w", c.m.rank, transport.ErrClosed))
		return req, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := tag.Key()
	for i, s := range b.sends {
		if s.tag.Key() == k {
			b.sends = append(b.sends[:i], b.sends[i+1:]...)
			deliver(s, &postedRecv{tag: tag, buf: buf, req: req}, c.peer, c.m.rank)
			return req, nil
		}
	}
	if b.dead != nil {
		req.complete(b.dead)
		return req, nil
	}
	pr := &postedRecv{tag: tag, buf: buf, req: req}
	req.box, req.recv = b, pr
	b.recvs = append(b.recvs, pr)
	return req, nil
}

// Transport is the inproc transport for one World. Connect hands out the
// World's meshes by rank.
type Transport struct {
	mu     sync.Mutex
	meshes []*Mesh
	lost   map[int]func(peer int, err error)
}

// New returns a Transport for n goroutine ranks.
func New(n int) *Transport {
	t := &Transport{lost: map[int]func(int, error){}}
	t.meshes = NewWorld(n, func(rank, peer int, err error) {
		t.mu.Lock()
		f := t.lost[rank]
		t.mu.Unlock()
		if f != nil {
			f(peer, err)
		}
	})
	return t
}

// Name returns "inproc".
func (t *Transport) Name() string { return "inproc" }

// CanConnect reports whether a and b are ranks of this process.
func (t *Transport) CanConnect(a, b transport.Endpoint) bool {
	return a.Rank < len(t.meshes) && b.Rank < len(t.meshes)
}

// Connect returns the mesh of cfg.Self.Rank.
func (t *Transport) Connect(_ context.Context, cfg transport.Config) (transport.Mesh, error) {
	if cfg.Self.Rank < 0 || cfg.Self.Rank >= len(t.meshes) {
		return nil, fmt.Errorf("inproc: rank %d out of range [0,%d)", cfg.Self.Rank, len(t.meshes))
	}
	t.mu.Lock()
	t.lost[cfg.Self.Rank] = cfg.Lost
	t.mu.Unlock()
	t.meshes[cfg.Self.Rank].unexpected = cfg.Unexpected
	return t.meshes[cfg.Self.Rank], nil
}
