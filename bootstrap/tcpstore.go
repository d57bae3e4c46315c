package bootstrap

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// handshakeTimeout bounds the client's side of the handshake.
const handshakeTimeout = 10 * time.Second

// StoreServer serves a TCP store: the ranks' clients (DialTCPStore) set
// and get keys in a table that lives in the server's memory. A Get waits in
// the server until the key is set, so clients never poll.
type StoreServer struct {
	ln     net.Listener
	secret []byte
	logf   func(format string, args ...any)
	lim    StoreLimits
	refuse *refusalLog
	t      *table
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	pending map[net.Conn]*pendingConn // conns still in the handshake
	perAddr map[string]int            // pending conns per client address
	seq     uint64
	closed  bool // set by shutdown: accept adds no more conns
	wg      sync.WaitGroup
	once    sync.Once
}

// pendingConn is a connection whose client has not proved the secret yet.
type pendingConn struct {
	addr    string // the client's IP address
	seq     uint64 // arrival order
	evicted string // why the server closed it, if it did
}

// StoreLimits bounds what a TCP store server gives to clients, above all
// to those that have not proved that they know the job's secret. The zero
// value of a field means its default.
type StoreLimits struct {
	// PendingPerAddr bounds the connections from one IP address that are
	// still in the handshake: a new one beyond it makes the server close
	// the oldest of them, so that a flood of connections that never
	// authenticate cannot lock a rank on the same address out for long
	// (its handshake takes a millisecond; it retries if it is closed).
	// Default 16.
	PendingPerAddr int
	// Pending bounds the connections in the handshake over every address,
	// likewise. Default 128.
	Pending int
	// Conns bounds every connection, authenticated or not: beyond it a
	// new one is closed at once. Default 65536.
	Conns int
	// HandshakeTimeout is how long a client has to prove the secret.
	// Default 3 s.
	HandshakeTimeout time.Duration
	// LogBurst refusals are logged one by one each LogInterval; the
	// others are counted and summed up in one line at the end of the
	// interval. Defaults 5 and 10 s.
	LogBurst    int
	LogInterval time.Duration
}

func (l StoreLimits) withDefaults() StoreLimits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.PendingPerAddr, 16)
	def(&l.Pending, 128)
	def(&l.Conns, 1<<16)
	def(&l.LogBurst, 5)
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = 3 * time.Second
	}
	if l.LogInterval <= 0 {
		l.LogInterval = 10 * time.Second
	}
	return l
}

// ServeTCPStore serves a store on ln until ctx ends or Close is called; it
// takes ownership of ln. Every connection must prove that it knows secret
// (an HMAC-SHA256 challenge-response over a fresh nonce, in both
// directions); one that does not is refused and logged through logf (nil
// discards), and the server goes on serving the others. An empty secret
// refuses every client. The default StoreLimits apply: refusals are
// logged a few at a time, then summed up.
func ServeTCPStore(ctx context.Context, ln net.Listener, secret []byte, logf func(format string, args ...any)) *StoreServer {
	return ServeTCPStoreLimits(ctx, ln, secret, logf, StoreLimits{})
}

// ServeTCPStoreLimits is ServeTCPStore with limits.
func ServeTCPStoreLimits(ctx context.Context, ln net.Listener, secret []byte, logf func(format string, args ...any), limits StoreLimits) *StoreServer {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	limits = limits.withDefaults()
	s := &StoreServer{
		ln:      ln,
		secret:  append([]byte{}, secret...),
		logf:    logf,
		lim:     limits,
		refuse:  newRefusalLog(logf, limits.LogBurst, limits.LogInterval),
		t:       newTable(),
		conns:   map[net.Conn]struct{}{},
		pending: map[net.Conn]*pendingConn{},
		perAddr: map[string]int{},
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(1)
	go s.accept()
	context.AfterFunc(s.ctx, func() { s.shutdown() })
	return s
}

// Addr returns the address the server listens on.
func (s *StoreServer) Addr() net.Addr { return s.ln.Addr() }

// Local returns a Store that reads and writes the server's table directly,
// for the process that serves it. Closing it leaves the server running.
func (s *StoreServer) Local() Store { return &memStore{t: s.t, done: make(chan struct{})} }

// Close stops the server: it closes the listener and every connection
// (their pending calls fail) and waits until its goroutines end.
func (s *StoreServer) Close() error {
	s.shutdown()
	s.cancel()
	s.wg.Wait()
	s.refuse.stop()
	return nil
}

// StoreStats counts a server's connections.
type StoreStats struct {
	Conns   int // open connections, authenticated or not
	Pending int // of which still in the handshake
	Refused int // connections refused or closed before authentication so far
}

// Stats returns the server's connection counts.
func (s *StoreServer) Stats() StoreStats {
	s.mu.Lock()
	st := StoreStats{Conns: len(s.conns), Pending: len(s.pending)}
	s.mu.Unlock()
	st.Refused = s.refuse.total()
	return st
}

func (s *StoreServer) shutdown() {
	s.once.Do(func() {
		// Connections first: the Gets that the table's closing wakes must
		// not answer; their clients see the connection end instead.
		s.ln.Close()
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.t.close()
	})
}

func (s *StoreServer) accept() {
	defer s.wg.Done()
	delay := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait and retry.
			s.logf("bootstrap: store: accept: %v", err)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			}
			delay = min(2*delay, time.Second)
			continue
		}
		delay = 5 * time.Millisecond
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		if len(s.conns) >= s.lim.Conns {
			s.mu.Unlock()
			c.Close()
			s.refuse.add(c.RemoteAddr(), fmt.Sprintf("already %d connections (the most it takes)", s.lim.Conns))
			continue
		}
		addr := clientIP(c.RemoteAddr())
		if s.perAddr[addr] >= s.lim.PendingPerAddr {
			s.evictLocked(addr, fmt.Sprintf("more than %d connections from %s still in the handshake", s.lim.PendingPerAddr, addr))
		}
		if len(s.pending) >= s.lim.Pending {
			s.evictLocked("", fmt.Sprintf("more than %d connections still in the handshake", s.lim.Pending))
		}
		s.seq++
		pc := &pendingConn{addr: addr, seq: s.seq}
		s.pending[c] = pc
		s.perAddr[addr]++
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(c, pc)
			s.mu.Lock()
			delete(s.conns, c)
			s.unpendLocked(c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// clientIP returns the IP address of a client's address, without port.
func clientIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// evictLocked closes the oldest connection in the handshake (from addr,
// or from anywhere if addr is ""), marking why.
func (s *StoreServer) evictLocked(addr, why string) {
	var (
		oldest net.Conn
		best   *pendingConn
	)
	for c, p := range s.pending {
		if (addr == "" || p.addr == addr) && p.evicted == "" && (best == nil || p.seq < best.seq) {
			oldest, best = c, p
		}
	}
	if oldest == nil {
		return
	}
	best.evicted = why
	s.unpendLocked(oldest)
	oldest.Close()
}

// unpendLocked forgets that c is in the handshake.
func (s *StoreServer) unpendLocked(c net.Conn) {
	p, ok := s.pending[c]
	if !ok {
		return
	}
	delete(s.pending, c)
	if s.perAddr[p.addr]--; s.perAddr[p.addr] <= 0 {
		delete(s.perAddr, p.addr)
	}
}

// mac computes the handshake's HMAC for one side.
func mac(secret []byte, side string, a, b []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(side))
	h.Write(a)
	h.Write(b)
	return h.Sum(nil)
}

// connWriter serialises frames onto a connection.
type connWriter struct {
	mu  sync.Mutex
	c   net.Conn
	buf []byte
}

func (w *connWriter) write(f frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = appendFrame(w.buf[:0], f)
	_, err := w.c.Write(w.buf)
	if cap(w.buf) > 1<<16 {
		w.buf = nil
	}
	return err
}

// handle serves one connection; p is its entry among the pending ones.
func (s *StoreServer) handle(c net.Conn, p *pendingConn) {
	br := bufio.NewReader(c)
	w := &connWriter{c: c}
	err := s.handshake(c, br, w)
	s.mu.Lock()
	why := p.evicted
	if err == nil && why == "" {
		s.unpendLocked(c)
	}
	s.mu.Unlock()
	switch {
	case s.ctx.Err() != nil:
		return
	case why != "":
		s.refuse.add(c.RemoteAddr(), why)
		return
	case err != nil:
		s.refuse.add(c.RemoteAddr(), err.Error())
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	var (
		mu   sync.Mutex
		gets = map[uint32]context.CancelFunc{}
		wg   sync.WaitGroup
		m    = member{rank: -1}
	)
	defer func() {
		cancel()
		c.Close()
		wg.Wait()
		s.connEnded(&m)
	}()
	for {
		f, err := readFrame(br, maxFrame)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && s.ctx.Err() == nil {
				s.logf("bootstrap: store: client %s: %v", c.RemoteAddr(), err)
			}
			return
		}
		switch f.op {
		case opSet:
			err := s.t.set(f.key, f.value)
			if err == nil {
				s.noteSet(&m, f.key, f.value)
			}
			reply(w, f.id, nil, err)
		case opAdd:
			n, err := s.t.add(f.key, f.delta)
			if err == nil && f.key == closedKey {
				m.counted = true
			}
			reply(w, f.id, binary.BigEndian.AppendUint64(nil, uint64(n)), err)
		case opGet:
			gctx, gcancel := context.WithCancel(ctx)
			mu.Lock()
			gets[f.id] = gcancel // ids are unique on a connection
			mu.Unlock()
			wg.Add(1)
			go func(id uint32, key string) {
				defer wg.Done()
				v, err := s.t.get(gctx, key)
				mu.Lock()
				delete(gets, id)
				mu.Unlock()
				gcancel()
				if s.ctx.Err() == nil { // else the server is going away
					reply(w, id, v, err)
				}
			}(f.id, f.key)
		case opCancel:
			mu.Lock()
			if g := gets[f.id]; g != nil {
				g()
				delete(gets, f.id)
			}
			mu.Unlock()
		default:
			s.logf("bootstrap: store: client %s: unexpected op %d", c.RemoteAddr(), f.op)
			return
		}
	}
}

func reply(w *connWriter, id uint32, value []byte, err error) {
	if err != nil {
		msg := err.Error()
		if len(msg) > maxErrLen {
			msg = msg[:maxErrLen]
		}
		w.write(frame{op: opErr, id: id, value: []byte(msg)})
		return
	}
	w.write(frame{op: opOK, id: id, value: value})
}

func (s *StoreServer) handshake(c net.Conn, br *bufio.Reader, w *connWriter) error {
	c.SetDeadline(time.Now().Add(s.lim.HandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	nonce := make([]byte, nonceLen)
	rand.Read(nonce)
	if err := w.write(frame{op: opHello, value: nonce}); err != nil {
		return err
	}
	f, err := readFrame(br, maxHandshakeFrame)
	if err != nil {
		return err
	}
	if f.op != opAuth {
		return fmt.Errorf("%w: op %d instead of authentication", errFrame, f.op)
	}
	cnonce, got := f.value[:nonceLen], f.value[nonceLen:]
	if len(s.secret) == 0 || !hmac.Equal(got, mac(s.secret, "braid-store-client", nonce, cnonce)) {
		w.write(frame{op: opErr, value: []byte(transport.ErrAuth.Error())})
		if len(s.secret) == 0 {
			return fmt.Errorf("%w: the store has no secret", transport.ErrAuth)
		}
		return fmt.Errorf("%w: the client does not know the job's secret", transport.ErrAuth)
	}
	return w.write(frame{op: opWelcome, value: mac(s.secret, "braid-store-server", cnonce, nonce)})
}

// tcpStore is a client of a StoreServer.
type tcpStore struct {
	addr string
	c    net.Conn
	w    *connWriter

	mu      sync.Mutex
	next    uint32
	pending map[uint32]chan frame
	err     error         // why the connection ended
	done    chan struct{} // closed when err is set
}

// DialTCPStore connects to the TCP store at addr ("host:port") and proves
// that it knows secret; the server proves the same in return. It retries
// until ctx ends while the server does not answer, since rank 0 may start
// it after the others dial. A refusal of the secret is returned at once,
// wrapping transport.ErrAuth.
//
// When the connection is lost, pending and later calls fail with an
// error wrapping transport.ErrPeerLost.
func DialTCPStore(ctx context.Context, addr string, secret []byte) (Store, error) {
	if len(secret) == 0 {
		return nil, fmt.Errorf("bootstrap: dial store %s: no secret", addr)
	}
	var (
		// Keepalive notices a server whose host vanished without closing
		// the connection (Lost then fires) within about 30 s.
		d       = net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}}
		lastErr error
		delay   = 5 * time.Millisecond
	)
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			var s *tcpStore
			if s, err = clientHandshake(ctx, c, addr, secret); err == nil {
				return s, nil
			}
			c.Close()
			if errors.Is(err, transport.ErrAuth) {
				return nil, err
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bootstrap: dial store %s: %w (last error: %v)", addr, ctx.Err(), lastErr)
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

func clientHandshake(ctx context.Context, c net.Conn, addr string, secret []byte) (*tcpStore, error) {
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	br := bufio.NewReader(c)
	w := &connWriter{c: c}
	f, err := readFrame(br, maxHandshakeFrame)
	if err != nil {
		return nil, err
	}
	if f.op != opHello {
		return nil, fmt.Errorf("%w: op %d instead of hello", errFrame, f.op)
	}
	snonce := f.value
	cnonce := make([]byte, nonceLen)
	rand.Read(cnonce)
	auth := append(append([]byte{}, cnonce...), mac(secret, "braid-store-client", snonce, cnonce)...)
	if err := w.write(frame{op: opAuth, value: auth}); err != nil {
		return nil, err
	}
	if f, err = readFrame(br, maxHandshakeFrame); err != nil {
		return nil, err
	}
	switch {
	case f.op == opErr:
		return nil, fmt.Errorf("bootstrap: store %s refused this client: %w", addr, transport.ErrAuth)
	case f.op != opWelcome:
		return nil, fmt.Errorf("%w: op %d instead of welcome", errFrame, f.op)
	case !hmac.Equal(f.value, mac(secret, "braid-store-server", cnonce, snonce)):
		return nil, fmt.Errorf("bootstrap: store %s does not know the job's secret: %w", addr, transport.ErrAuth)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	c.SetDeadline(time.Time{})
	s := &tcpStore{addr: addr, c: c, w: w, pending: map[uint32]chan frame{}, done: make(chan struct{})}
	go s.read(br)
	return s, nil
}

func (s *tcpStore) read(br *bufio.Reader) {
	for {
		f, err := readFrame(br, maxFrame)
		if err == nil && f.op != opOK && f.op != opErr {
			err = fmt.Errorf("%w: op %d in a reply", errFrame, f.op)
		}
		if err != nil {
			s.fail(fmt.Errorf("bootstrap: store %s: connection lost (%v): %w", s.addr, err, transport.ErrPeerLost))
			return
		}
		s.mu.Lock()
		ch := s.pending[f.id]
		delete(s.pending, f.id)
		s.mu.Unlock()
		if ch != nil {
			ch <- f
		}
	}
}

// fail ends the connection with err; the first error stays.
func (s *tcpStore) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
		close(s.done)
	}
	s.mu.Unlock()
	s.c.Close()
}

// call sends a request and waits for its reply.
func (s *tcpStore) call(ctx context.Context, f frame) ([]byte, error) {
	if err := checkKey(f.key); err != nil {
		return nil, err
	}
	if len(f.value) > MaxValueLen {
		return nil, fmt.Errorf("bootstrap: value of %d bytes for key %q: at most %d", len(f.value), f.key, MaxValueLen)
	}
	ch := make(chan frame, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	s.next++
	f.id = s.next
	s.pending[f.id] = ch
	s.mu.Unlock()
	if err := s.w.write(f); err != nil {
		s.fail(fmt.Errorf("bootstrap: store %s: connection lost (%v): %w", s.addr, err, transport.ErrPeerLost))
	}
	select {
	case r := <-ch:
		if r.op == opErr {
			return nil, fmt.Errorf("bootstrap: store %s: %s", s.addr, r.value)
		}
		return r.value, nil
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return nil, s.err
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pending, f.id)
		s.mu.Unlock()
		if f.op == opGet {
			s.w.write(frame{op: opCancel, id: f.id})
		}
		return nil, fmt.Errorf("bootstrap: store %s: %s %q: %w", s.addr, opName(f.op), f.key, ctx.Err())
	}
}

func opName(op byte) string {
	switch op {
	case opSet:
		return "set"
	case opGet:
		return "waiting for key"
	case opAdd:
		return "add to"
	}
	return fmt.Sprintf("op %d", op)
}

func (s *tcpStore) Set(ctx context.Context, key string, value []byte) error {
	_, err := s.call(ctx, frame{op: opSet, key: key, value: value})
	return err
}

func (s *tcpStore) Get(ctx context.Context, key string) ([]byte, error) {
	return s.call(ctx, frame{op: opGet, key: key})
}

func (s *tcpStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	v, err := s.call(ctx, frame{op: opAdd, key: key, delta: delta})
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("bootstrap: store %s: add reply of %d bytes", s.addr, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func (s *tcpStore) Close() error {
	s.fail(errClosed)
	return nil
}
