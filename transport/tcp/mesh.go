package tcp

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// mesh is one process's set of connections (transport.Mesh).
type mesh struct {
	self       int
	log        *log.Logger
	lost       func(peer int, err error)
	unexpected func(peer int, tag transport.Tag)
	stripeMin  int
	peers      []*peer // by world rank; nil where not connected

	wg      sync.WaitGroup // readers, writers and abort senders
	aborts  sync.WaitGroup // abort senders, which Close lets finish
	abortMu sync.Mutex     // orders Abort's start of senders and Close's wait
	aborted atomic.Bool
	closed  atomic.Bool
	inLost  atomic.Int32 // Lost callbacks running
}

// peer is the connection to one rank (transport.Conn): one or more TCP
// connections (streams) and the matching state that their readers share.
type peer struct {
	m       *mesh
	rank    int
	addr    string
	streams []*stream
	sendID  atomic.Uint32
	failed  atomic.Bool // mirrors err != nil, for the send path

	mu         sync.Mutex
	err        error // why this peer is unusable; set once
	busy       int   // frames being read into a receive's buffer
	ended      int   // streams that the peer ended cleanly
	timer      *time.Timer
	posted     map[[3]uint32][]*recvReq
	unexpected map[[3]uint32][]*message
	inflight   map[uint32]*message // by message id, until the last frame is in
}

// stream is one TCP connection to a peer.
//
// Its socket is non-blocking and every read or write on it is one
// non-blocking system call on fd, made by whoever owns that side: the
// stream's reader or writer goroutine, a caller's Isend (a direct write) or
// a caller's Test (progress). The goroutines only park, through the
// netpoller, when the socket has nothing to read or no room to write; a
// caller that leaves work undone kicks them awake with a past deadline.
type stream struct {
	p    *peer
	idx  int
	conn *net.TCPConn
	raw  syscall.RawConn
	fd   int

	// The write side, guarded by mu.
	mu      sync.Mutex
	queue   []*frame
	writing bool // someone owns the write side
	stopped bool // no more frames are accepted
	broken  bool // a frame was cut short: nothing more can be framed
	wake    chan struct{}
	wexit   chan struct{} // closed when the writer goroutine exits
	scratch []byte        // direct-send buffer, used by the write side's owner
	batch   []*frame      // push's frames, used by the write side's owner
	iov     [][]byte      // push's vector, used by the write side's owner

	wwaiting atomic.Bool // the writer goroutine waits for room in the socket
	rwaiting atomic.Bool // the reader goroutine waits for data

	// The read side, guarded by rmu.
	rmu sync.Mutex
	rd  readState

	closeOnce sync.Once
}

// aLongTimeAgo is a deadline in the past, to wake a parked goroutine.
var aLongTimeAgo = time.Unix(1, 0)

func newMesh(cfg *transport.Config, opts *Options) *mesh {
	return &mesh{
		self:       cfg.Self.Rank,
		log:        opts.logger(),
		lost:       cfg.Lost,
		unexpected: cfg.Unexpected,
		stripeMin:  opts.stripeMin(),
		peers:      make([]*peer, cfg.World),
	}
}

func (m *mesh) newPeer(rank int, addr string, n int) *peer {
	p := &peer{
		m:          m,
		rank:       rank,
		addr:       addr,
		streams:    make([]*stream, n),
		posted:     make(map[[3]uint32][]*recvReq),
		unexpected: make(map[[3]uint32][]*message),
		inflight:   make(map[uint32]*message),
	}
	m.peers[rank] = p
	return p
}

func (p *peer) newStream(idx int, c *net.TCPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	s := &stream{
		p:       p,
		idx:     idx,
		conn:    c,
		raw:     raw,
		wake:    make(chan struct{}, 1),
		wexit:   make(chan struct{}),
		scratch: make([]byte, hdrLen+smallCopy),
	}
	s.rd.buf = make([]byte, readBufSize)
	if err := raw.Control(func(fd uintptr) { s.fd = int(fd) }); err != nil {
		return err
	}
	p.streams[idx] = s
	return nil
}

// start launches every stream's reader and writer goroutines.
func (m *mesh) start() {
	for _, p := range m.peers {
		if p == nil {
			continue
		}
		for _, s := range p.streams {
			m.wg.Add(2)
			go s.readLoop()
			go s.writeLoop()
		}
	}
}

// Conn returns the connection to world rank peer, or nil.
func (m *mesh) Conn(peer int) transport.Conn {
	if peer < 0 || peer >= len(m.peers) || m.peers[peer] == nil {
		return nil
	}
	return m.peers[peer]
}

// Peer returns the peer's world rank.
func (p *peer) Peer() int { return p.rank }

// Held returns the number of unexpected messages the peers' connections
// hold (transport.Holder).
func (m *mesh) Held() int {
	n := 0
	for _, p := range m.peers {
		if p == nil {
			continue
		}
		p.mu.Lock()
		for _, l := range p.unexpected {
			n += len(l)
		}
		p.mu.Unlock()
	}
	return n
}

// currentErr returns why the peer is unusable, or nil.
func (p *peer) currentErr() error {
	if !p.failed.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *peer) lostErr(cause error) error {
	if errors.Is(cause, io.EOF) {
		cause = errors.New("connection closed by the peer")
	}
	return fmt.Errorf("tcp: rank %d: peer %d at %s: %w: %v", p.m.self, p.rank, p.addr, transport.ErrPeerLost, cause)
}

// fail makes the peer unusable with err: sends stop, and pending receives
// fail once no frame is being read into one. remote tells that the peer
// went away (Lost is called); closeConns closes the sockets at once.
// The caller must not own a stream's read or write side.
func (p *peer) fail(err error, remote, closeConns bool) {
	p.mu.Lock()
	first := p.err == nil
	if first {
		p.err = err
		p.failed.Store(true)
	}
	p.mu.Unlock()
	if first && remote && p.m.lost != nil {
		p.m.inLost.Add(1)
		p.m.lost(p.rank, err)
		p.m.inLost.Add(-1)
	}
	if first {
		for _, s := range p.streams {
			s.stop()
		}
	}
	if closeConns {
		p.closeConns()
	}
	p.mu.Lock()
	p.failRequestsLocked()
	p.mu.Unlock()
}

func (p *peer) closeConns() {
	for _, s := range p.streams {
		s.closeConn()
	}
	p.mu.Lock()
	p.failRequestsLocked()
	p.mu.Unlock()
}

// failRequestsLocked fails every pending receive with p.err, unless a frame
// is being read into one (the reader calls it again when done).
func (p *peer) failRequestsLocked() {
	if p.err == nil || p.busy > 0 {
		return
	}
	for k, list := range p.posted {
		for _, r := range list {
			r.finish(p.err)
		}
		delete(p.posted, k)
	}
	for id, e := range p.inflight {
		if e.req != nil {
			e.req.finish(p.err)
			e.req = nil
		}
		e.discard = true
		delete(p.inflight, id)
	}
	// Messages that arrived in full before the failure can still be received.
	for k, list := range p.unexpected {
		keep := list[:0]
		for _, e := range list {
			if e.complete {
				keep = append(keep, e)
			}
		}
		if len(keep) == 0 {
			delete(p.unexpected, k)
		} else {
			p.unexpected[k] = keep
		}
	}
}

// streamEnded records that the peer ended one stream cleanly (a close
// frame, or end of file between frames). The peer is lost when all its
// streams have ended, so that what it sent on the others before is still
// read; or a second after the first ended, if some stay open.
func (p *peer) streamEnded(s *stream, reason string) {
	p.mu.Lock()
	p.ended++
	all := p.ended == len(p.streams)
	failed := p.err != nil
	if !all && !failed && p.timer == nil {
		p.timer = time.AfterFunc(time.Second, func() {
			p.fail(p.lostErr(errors.New(reason+" on some connections")), true, true)
		})
	}
	p.mu.Unlock()
	switch {
	case all && reason == reasonClosed:
		// A clean shutdown: what the peer sent before has been read.
		p.fail(fmt.Errorf("tcp: rank %d: peer %d at %s %w", p.m.self, p.rank, p.addr, transport.ErrPeerClosed), true, true)
	case all:
		p.fail(p.lostErr(errors.New(reason)), true, true)
	case failed:
		s.closeConn()
	}
}

// stop refuses new frames on s, fails the queued ones unless someone owns
// the write side (it fails them when it lets go), and wakes the writer
// goroutine so that it exits.
func (s *stream) stop() {
	s.mu.Lock()
	s.stopped = true
	var q []*frame
	if !s.writing {
		q, s.queue = s.queue, nil
	}
	s.mu.Unlock()
	s.failFrames(q)
	s.signal()
	s.conn.SetWriteDeadline(aLongTimeAgo)
}

func (s *stream) failFrames(q []*frame) {
	if len(q) == 0 {
		return
	}
	err := s.p.currentErr()
	for _, f := range q {
		f.req.frameDone(err)
	}
}

// closeConn closes the socket once nobody is in a system call on it.
// The caller must not own either side of s.
func (s *stream) closeConn() {
	s.closeOnce.Do(func() {
		s.conn.SetWriteDeadline(aLongTimeAgo)
		s.mu.Lock()
		s.stopped = true
		s.broken = true
		for s.writing {
			s.mu.Unlock()
			time.Sleep(20 * time.Microsecond)
			s.mu.Lock()
		}
		s.writing = true // for good
		q := s.queue
		s.queue = nil
		s.mu.Unlock()
		s.failFrames(q)
		s.rmu.Lock()
		s.rd.closed = true
		if !s.rd.dead {
			s.die(event{kind: evDead}) // a frame cut short no longer holds its receive
		}
		s.rmu.Unlock()
		s.conn.Close()
		s.signal()
	})
}

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Abort tells every peer that this process gave up with err, without
// blocking: a goroutine per peer writes the abort frame on each connection
// once the frame in progress there is out. Local requests fail with
// ErrAborted; Lost is not called.
func (m *mesh) Abort(err error) {
	// Under abortMu, so that Close either sees every abort sender counted
	// or keeps Abort from starting any (a WaitGroup's Add may not race its
	// Wait).
	m.abortMu.Lock()
	defer m.abortMu.Unlock()
	if m.closed.Load() || !m.aborted.CompareAndSwap(false, true) {
		return
	}
	if err == nil {
		err = errors.New("no reason given")
	}
	reason := err.Error()
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	local := fmt.Errorf("tcp: rank %d: %w by this process: %w", m.self, transport.ErrAborted, err)
	for _, p := range m.peers {
		if p == nil {
			continue
		}
		p.fail(local, false, false)
		m.wg.Add(1)
		m.aborts.Add(1)
		go p.sendAbort(reason)
	}
}

// sendAbort writes an abort frame on every stream of p that can carry one
// and shuts down its write side. The readers drain what the peer still
// sends until it closes, or for a second, so that the frame is delivered
// (closing a socket with unread data would reset the connection).
func (p *peer) sendAbort(reason string) {
	defer p.m.wg.Done()
	defer p.m.aborts.Done()
	for _, s := range p.streams {
		<-s.wexit
		if !s.acquireFinal(time.Second) {
			continue
		}
		h := header{typ: frameAbort, length: uint32(len(reason))}
		var hb [hdrLen]byte
		h.encode(hb[:])
		s.conn.SetWriteDeadline(time.Now().Add(time.Second))
		bufs := net.Buffers{hb[:], []byte(reason)}
		bufs.WriteTo(s.conn)
		s.conn.CloseWrite()
		s.mu.Lock()
		s.writing = false
		s.mu.Unlock()
	}
	p.mu.Lock()
	if p.timer == nil && !p.m.closed.Load() {
		p.timer = time.AfterFunc(time.Second, p.closeConns)
	}
	p.mu.Unlock()
}

// acquireFinal takes the write side of a stopped stream to write its last
// frame, waiting up to d for the current owner. It reports false if the
// stream cannot carry another frame.
func (s *stream) acquireFinal(d time.Duration) bool {
	deadline := time.Now().Add(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.writing && !s.broken {
		s.mu.Unlock()
		if time.Now().After(deadline) {
			s.mu.Lock()
			return false
		}
		time.Sleep(100 * time.Microsecond)
		s.mu.Lock()
	}
	if s.broken {
		return false
	}
	s.writing = true
	s.broken = true // the next frame is the last
	return true
}

// abortWait bounds how long Close waits for the abort frames of an
// aborted mesh to be written.
const abortWait = 2 * time.Second

// Close closes every connection; pending requests fail with ErrClosed.
// It waits for the mesh's own goroutines, which exit as their sockets
// close, but not for peers; from inside a Lost callback it does not wait.
// After Abort it first lets the abort frames be written (up to
// abortWait), so that the peers learn the reason before the close.
func (m *mesh) Close() error {
	m.abortMu.Lock()
	first := m.closed.CompareAndSwap(false, true)
	aborted := m.aborted.Load()
	m.abortMu.Unlock()
	if !first {
		return nil
	}
	if aborted {
		// Let the abort frames go out first: a process that closes (and
		// exits) right after a failure would otherwise reach its peers
		// as a connection closed without a reason, and they would name
		// it rather than the rank that failed first. The senders never
		// call Lost, so this waits from inside a Lost callback too.
		done := make(chan struct{})
		go func() { m.aborts.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(abortWait):
		}
	}
	err := fmt.Errorf("tcp: rank %d: mesh %w", m.self, transport.ErrClosed)
	for _, p := range m.peers {
		if p == nil {
			continue
		}
		open := !p.failed.Load()
		p.fail(err, false, false)
		p.mu.Lock()
		if p.timer != nil {
			p.timer.Stop()
		}
		p.mu.Unlock()
		for _, s := range p.streams {
			if open {
				s.sendClose()
			}
		}
		p.closeConns()
	}
	if m.inLost.Load() == 0 {
		m.wg.Wait()
	}
	return nil
}

// sendClose tells the peer that this side closes, if the socket is free
// and has room right now; it never blocks.
func (s *stream) sendClose() {
	s.mu.Lock()
	if s.writing || s.broken {
		s.mu.Unlock()
		return
	}
	s.writing = true
	s.mu.Unlock()
	h := header{typ: frameClose}
	var hb [hdrLen]byte
	h.encode(hb[:])
	n, _ := s.writeDirect(hb[:], nil)
	s.mu.Lock()
	if n != 0 && n != hdrLen {
		s.broken = true
	}
	s.writing = false
	s.mu.Unlock()
}
