// Package inproc connects ranks that are goroutines of one process. It is the
// transport of Braid's unit tests and of braid.NewLocal: a send and its
// receive meet in a mailbox and the data is copied once, directly from the
// sender's buffer into the receiver's.
//
// Example:
//
//	meshes := inproc.NewWorld(4, nil) // meshes[r] is rank r's Mesh
//	c := meshes[0].Conn(1)
//	req, _ := c.Isend(tag, data)
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

type pendingSend struct {
	tag  transport.Tag
	data []byte
	req  *request
}

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

// sameCall reports whether two tags belong to the same collective call: a
// message of that call with another signature proves the ranks disagree.
// Point-to-point messages are exempt: their Seq is the user's tag.
func sameCall(a, b transport.Tag) bool {
	return a.Comm == b.Comm && a.Seq == b.Seq && a.Step&transport.P2PBit == 0 && b.Step&transport.P2PBit == 0
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
// rank as lost.
func (m *Mesh) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.kill(fmt.Errorf("inproc: rank %d closed: %w", m.rank, transport.ErrPeerLost))
	return nil
}

func (m *Mesh) kill(peerErr error) {
	w := m.w
	selfErr := fmt.Errorf("inproc: rank %d: %w", m.rank, transport.ErrClosed)
	if !m.closed.Load() {
		selfErr = peerErr
	}
	for p := range w.n {
		if p == m.rank {
			continue
		}
		// Messages into this rank and out of it.
		for _, b := range []*box{w.boxes[m.rank][p], w.boxes[p][m.rank]} {
			b.mu.Lock()
			if b.dead == nil {
				b.dead = peerErr
			}
			for _, s := range b.sends {
				s.req.complete(pick(selfErr, peerErr, b == w.boxes[p][m.rank]))
			}
			for _, r := range b.recvs {
				r.req.complete(pick(selfErr, peerErr, b == w.boxes[m.rank][p]))
			}
			b.sends, b.recvs = nil, nil
			b.mu.Unlock()
		}
		if pm := w.meshes[p]; pm.lost != nil && !pm.closed.Load() {
			pm.lost(m.rank, peerErr)
		}
	}
}

// pick returns selfErr for requests this rank owns and peerErr otherwise.
func pick(selfErr, peerErr error, own bool) error {
	if own {
		return selfErr
	}
	return peerErr
}

// Peer returns the peer's rank.
func (c *Conn) Peer() int { return c.peer }

// Isend offers data to the peer. It completes when the peer has received it.
func (c *Conn) Isend(tag transport.Tag, data []byte) (transport.Request, error) {
	b := c.m.w.boxes[c.peer][c.m.rank]
	req := newRequest()
	b.mu.Lock()
	if b.dead != nil {
		b.mu.Unlock()
		req.complete(b.dead)
		return req, nil
	}
	k := tag.Key()
	for i, r := range b.recvs {
		if r.tag.Key() == k || (sameCall(r.tag, tag) && r.tag.Sig != tag.Sig) {
			// A match, or another step of the same call that expects other
			// arguments (deliver reports the mismatch).
			b.recvs = append(b.recvs[:i], b.recvs[i+1:]...)
			deliver(&pendingSend{tag: tag, data: data, req: req}, r, c.m.rank, c.peer)
			b.mu.Unlock()
			return req, nil
		}
	}
	b.sends = append(b.sends, &pendingSend{tag: tag, data: data, req: req})
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
	b.mu.Lock()
	defer b.mu.Unlock()
	k := tag.Key()
	for i, s := range b.sends {
		if s.tag.Key() == k || (sameCall(s.tag, tag) && s.tag.Sig != tag.Sig) {
			b.sends = append(b.sends[:i], b.sends[i+1:]...)
			deliver(s, &postedRecv{tag: tag, buf: buf, req: req}, c.peer, c.m.rank)
			return req, nil
		}
	}
	if b.dead != nil {
		req.complete(b.dead)
		return req, nil
	}
	b.recvs = append(b.recvs, &postedRecv{tag: tag, buf: buf, req: req})
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
