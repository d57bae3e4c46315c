package emulate

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// Link is one directed link of an emulated network.
type Link struct {
	// Bandwidth is in bytes per second; it must be positive (+Inf: the
	// link never holds a message back).
	Bandwidth float64
	// Latency is added to every message that crosses the link, after its
	// last byte has gone through (a propagation delay: it does not hold
	// the link).
	Latency time.Duration
}

// Network is what an Emulator imposes: links, and the links each ordered
// pair of ranks' messages cross.
type Network struct {
	Links []Link
	// Routes[src][dst] lists the links, in order, that a message from rank
	// src to rank dst crosses. An empty route means the pair is not held
	// back at all.
	Routes [][][]int
	// Burst is how many bytes a link may let through at once after it has
	// been idle (the depth of its token bucket); 0 means none: a link's
	// messages follow one another at exactly its bandwidth.
	Burst int
}

// Pairs returns the network of one link per ordered pair of n ranks:
// bandwidth[a][b] bytes per second and latency[a][b] from a to b (entries
// on the diagonal are ignored; a nil latency means none).
func Pairs(bandwidth [][]float64, latency [][]time.Duration) (*Network, error) {
	n := len(bandwidth)
	net := &Network{Routes: make([][][]int, n)}
	for a := range n {
		if len(bandwidth[a]) != n || latency != nil && len(latency[a]) != n {
			return nil, fmt.Errorf("emulate: Pairs: row %d is not %d long", a, n)
		}
		net.Routes[a] = make([][]int, n)
		for b := range n {
			if a == b {
				continue
			}
			l := Link{Bandwidth: bandwidth[a][b]}
			if latency != nil {
				l.Latency = latency[a][b]
			}
			net.Routes[a][b] = []int{len(net.Links)}
			net.Links = append(net.Links, l)
		}
	}
	return net, net.Validate()
}

// Validate returns an error unless every link has a positive bandwidth and
// a non-negative latency, every route names links in range, and the routes
// form a square table.
func (n *Network) Validate() error {
	for i, l := range n.Links {
		if !(l.Bandwidth > 0) || l.Latency < 0 {
			return fmt.Errorf("emulate: link %d: bandwidth %g B/s, latency %v", i, l.Bandwidth, l.Latency)
		}
	}
	if n.Burst < 0 {
		return fmt.Errorf("emulate: burst %d bytes", n.Burst)
	}
	for a, row := range n.Routes {
		if len(row) != len(n.Routes) {
			return fmt.Errorf("emulate: routes of rank %d: %d entries for %d ranks", a, len(row), len(n.Routes))
		}
		for b, r := range row {
			for _, id := range r {
				if id < 0 || id >= len(n.Links) {
					return fmt.Errorf("emulate: route %d->%d: link %d outside [0,%d)", a, b, id, len(n.Links))
				}
			}
		}
	}
	return nil
}

// Emulator holds the state of the links of a Network while ranks use it:
// one token bucket per link, shared by every message that crosses it,
// whichever rank sent it. It is safe for concurrent use.
type Emulator struct {
	net  *Network
	now  func() time.Time
	mu   sync.Mutex
	free []time.Time // when each link has let through what it was given
}

// New returns an emulator of net, which it keeps: do not modify net
// afterwards.
func New(net *Network) (*Emulator, error) {
	if err := net.Validate(); err != nil {
		return nil, err
	}
	return &Emulator{net: net, now: time.Now, free: make([]time.Time, len(net.Links))}, nil
}

// NRanks returns the number of ranks of the emulated network.
func (e *Emulator) NRanks() int { return len(e.net.Routes) }

// Reserve books the links from rank src to rank dst for a message of
// bytes, sent at time at, and returns when it arrives: every link of the
// route lets messages through one after another in the order they were
// booked, at its bandwidth (with Burst bytes of credit for a link that
// has been idle); the message starts once every link of its route is
// free, keeps each busy for bytes/bandwidth, and arrives after the
// slowest of them plus the route's latencies.
func (e *Emulator) Reserve(src, dst, bytes int, at time.Time) time.Time {
	if src < 0 || src >= len(e.net.Routes) || dst < 0 || dst >= len(e.net.Routes) {
		return at
	}
	route := e.net.Routes[src][dst]
	if len(route) == 0 {
		return at
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	start := at
	var lat time.Duration
	for _, id := range route {
		l := e.net.Links[id]
		credit := seconds(float64(e.net.Burst) / l.Bandwidth)
		if f := e.free[id].Add(-credit); f.After(start) {
			start = f
		}
		lat += l.Latency
	}
	var slowest time.Duration
	for _, id := range route {
		d := seconds(float64(bytes) / e.net.Links[id].Bandwidth)
		busyFrom := start
		if e.free[id].After(busyFrom) {
			busyFrom = e.free[id]
		}
		e.free[id] = busyFrom.Add(d)
		slowest = max(slowest, d)
	}
	return start.Add(slowest + lat)
}

// seconds converts s seconds (possibly +Inf or tiny) to a Duration.
func seconds(s float64) time.Duration {
	if s > math.MaxInt64/1e9 {
		return math.MaxInt64
	}
	return time.Duration(s * 1e9)
}

// Wrap returns rank's mesh m with every message it sends held back as the
// network would: a send of b bytes to peer p is handed to m once the
// route from rank to p has let b bytes through (Reserve, from the moment
// of the Isend), so its receive completes no earlier than that. Receives,
// Abort and Close go straight to m.
func (e *Emulator) Wrap(rank int, m transport.Mesh) transport.Mesh {
	return &mesh{e: e, rank: rank, m: m}
}

// Transport returns t with every mesh it connects wrapped (Wrap) for the
// rank it connects.
func (e *Emulator) Transport(t transport.Transport) transport.Transport {
	return &wrappedTransport{Transport: t, e: e}
}

type wrappedTransport struct {
	transport.Transport
	e *Emulator
}

func (w *wrappedTransport) Name() string { return w.Transport.Name() + "+emulate" }

func (w *wrappedTransport) Connect(ctx context.Context, cfg transport.Config) (transport.Mesh, error) {
	m, err := w.Transport.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return w.e.Wrap(cfg.Self.Rank, m), nil
}

type mesh struct {
	e    *Emulator
	rank int
	m    transport.Mesh
	mu   sync.Mutex
	cs   map[int]*conn
}

func (m *mesh) Conn(peer int) transport.Conn {
	c := m.m.Conn(peer)
	if c == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.cs[peer]; ok {
		return w
	}
	if m.cs == nil {
		m.cs = map[int]*conn{}
	}
	w := &conn{m: m, c: c}
	m.cs[peer] = w
	return w
}

func (m *mesh) Abort(err error) { m.m.Abort(err) }
func (m *mesh) Close() error    { return m.m.Close() }

type conn struct {
	m *mesh
	c transport.Conn
}

func (c *conn) Peer() int { return c.c.Peer() }

func (c *conn) Irecv(tag transport.Tag, buf []byte) (transport.Request, error) {
	return c.c.Irecv(tag, buf)
}

// Isend books the route and hands the message to the wrapped connection
// when it would have arrived.
func (c *conn) Isend(tag transport.Tag, data []byte) (transport.Request, error) {
	now := c.m.e.now()
	at := c.m.e.Reserve(c.m.rank, c.c.Peer(), len(data), now)
	if !at.After(now) {
		return c.c.Isend(tag, data)
	}
	r := &request{ch: make(chan struct{})}
	time.AfterFunc(at.Sub(now), func() { r.start(c.c, tag, data) })
	return r, nil
}

// request is a send held back until its arrival time, then the wrapped
// transport's send.
type request struct {
	ch      chan struct{} // closed when the request completes
	started atomic.Bool
	mu      sync.Mutex // serialises calls to inner.Test
	inner   transport.Request
	err     error
	closed  bool
}

func (r *request) start(c transport.Conn, tag transport.Tag, data []byte) {
	inner, err := c.Isend(tag, data)
	r.mu.Lock()
	r.inner, r.err = inner, err
	r.mu.Unlock()
	r.started.Store(true)
	if err != nil {
		r.finish()
		return
	}
	if ch := inner.Done(); ch != nil {
		go func() {
			<-ch
			r.finish()
		}()
		return
	}
	// A polling transport: poll it until it completes.
	go func() {
		var b transport.Backoff
		for {
			r.mu.Lock()
			done, _ := r.inner.Test()
			r.mu.Unlock()
			if done {
				r.finish()
				return
			}
			b.Idle(nil)
		}
	}()
}

func (r *request) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.ch)
	}
}

// Test reports whether the send has been handed over and completed.
func (r *request) Test() (bool, error) {
	if !r.started.Load() {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return true, r.err
	}
	return r.inner.Test()
}

// Done returns a channel closed when the send completes.
func (r *request) Done() <-chan struct{} { return r.ch }
