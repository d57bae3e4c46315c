package tcp

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// DefaultStreams is the number of connections per peer when
// Options.Streams is zero.
const DefaultStreams = 2

// DefaultStripeSize is the message length from which messages are split
// across a peer's connections when Options.StripeSize is zero.
const DefaultStripeSize = 1 << 20

// Options configures the TCP transport. The zero value lets Braid choose.
type Options struct {
	// Streams is the number of TCP connections per pair of ranks (at most
	// 64); messages of at least StripeSize bytes are split across them.
	// The lower rank of a pair dials, and its value decides. Zero means
	// DefaultStreams.
	Streams int

	// StripeSize is the message length from which messages are striped
	// across the Streams connections. Zero means DefaultStripeSize.
	StripeSize int

	// ListenAddr is the address to listen on, "host:port". Empty means
	// ":0": every interface, a port chosen by the system.
	ListenAddr string

	// AdvertiseHost is the host name or address published for peers to
	// dial. Empty means the ListenAddr host if it names one, else the
	// address the machine's host name resolves to (not a loopback one),
	// else the first non-loopback interface address, else 127.0.0.1.
	AdvertiseHost string

	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF on every connection. Zero
	// leaves the kernel's automatic tuning, which on Linux grows further
	// than an explicit size may (net.core.rmem_max caps those).
	SocketBuffer int

	// HandshakeTimeout bounds one connection's authentication. Zero means
	// 10 s.
	HandshakeTimeout time.Duration

	// Logger receives refused connections and protocol errors. Nil means
	// log.Default().
	Logger *log.Logger
}

func (o *Options) streams() int {
	switch {
	case o.Streams <= 0:
		return DefaultStreams
	case o.Streams > maxStreams:
		return maxStreams
	}
	return o.Streams
}

func (o *Options) stripeMin() int {
	if o.StripeSize <= 0 {
		return DefaultStripeSize
	}
	return o.StripeSize
}

func (o *Options) logger() *log.Logger {
	if o.Logger == nil {
		return log.Default()
	}
	return o.Logger
}

func (o *Options) handshakeTimeout() time.Duration {
	if o.HandshakeTimeout <= 0 {
		return 10 * time.Second
	}
	return o.HandshakeTimeout
}

// Transport is the TCP transport. It connects any two ranks.
type Transport struct {
	opts Options
}

// New returns a TCP transport with opts.
func New(opts Options) *Transport { return &Transport{opts: opts} }

var _ transport.Transport = (*Transport)(nil)

// Name returns "tcp".
func (t *Transport) Name() string { return "tcp" }

// CanConnect reports true: TCP reaches every rank.
func (t *Transport) CanConnect(a, b transport.Endpoint) bool { return true }

// AddrKey returns the store key under which rank publishes its address.
func AddrKey(prefix string, rank int) string {
	return prefix + "/addr/" + strconv.Itoa(rank)
}

// Connect listens, publishes "host:port" under AddrKey(cfg.Prefix, rank)
// in cfg.Store, and connects to every rank in cfg.Peers: the lower rank of
// each pair dials Streams connections to the higher one, and both sides
// prove that they hold cfg.Secret. It returns when every connection is up,
// or with an error (naming the ranks still missing) when ctx ends. The
// listener is closed when Connect returns; connections that fail the
// handshake are logged and closed without disturbing the others.
func (t *Transport) Connect(ctx context.Context, cfg transport.Config) (transport.Mesh, error) {
	self := cfg.Self.Rank
	if cfg.World <= 0 || self < 0 || self >= cfg.World {
		return nil, fmt.Errorf("tcp: rank %d of a world of %d", self, cfg.World)
	}
	m := newMesh(self, cfg.World, &t.opts, cfg.Lost)
	if len(cfg.Peers) == 0 {
		return m, nil
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("tcp: rank %d: no store to exchange addresses", self)
	}
	seen := make(map[int]bool)
	for _, e := range cfg.Peers {
		if e.Rank < 0 || e.Rank >= cfg.World || e.Rank == self || seen[e.Rank] {
			return nil, fmt.Errorf("tcp: rank %d: bad peer rank %d in a world of %d", self, e.Rank, cfg.World)
		}
		seen[e.Rank] = true
	}

	lc := net.ListenConfig{}
	listen := t.opts.ListenAddr
	if listen == "" {
		listen = ":0"
	}
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d: %w", self, err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	host := t.opts.AdvertiseHost
	if host == "" {
		host = defaultHost(ctx, listen)
	}
	addr := net.JoinHostPort(host, port)
	if err := cfg.Store.Set(ctx, AddrKey(cfg.Prefix, self), []byte(addr)); err != nil {
		ln.Close()
		return nil, fmt.Errorf("tcp: rank %d: publishing address: %w", self, err)
	}
	c := &connector{t: t, m: m, cfg: &cfg, ln: ln, conns: make(map[net.Conn]bool), claimed: make(map[[2]int]bool)}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	m.start()
	return m, nil
}

// defaultHost picks the host to advertise for a listen address.
func defaultHost(ctx context.Context, listen string) string {
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			return h
		}
	}
	if name, err := os.Hostname(); err == nil {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		addrs, _ := net.DefaultResolver.LookupHost(lctx, name)
		cancel()
		for _, a := range addrs {
			if ip := net.ParseIP(a); ip != nil && !ip.IsLoopback() {
				return a
			}
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// connector sets up a mesh's connections.
type connector struct {
	t   *Transport
	m   *mesh
	cfg *transport.Config
	ln  net.Listener

	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool // connections not yet handed to the mesh
	claimed map[[2]int]bool   // (rank, stream) already accepted
	lower   map[int]bool      // ranks that dial this one
	results chan connResult
}

type connResult struct {
	id   hsIdent
	addr string
	conn *net.TCPConn
	err  error
}

func (c *connector) run(ctx context.Context) error {
	self := c.m.self
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.lower = make(map[int]bool)
	want := make(map[int]int) // rank → streams still missing; -1 until known
	nstreams := c.t.opts.streams()
	for _, e := range c.cfg.Peers {
		if e.Rank < self {
			c.lower[e.Rank] = true
			want[e.Rank] = -1
		} else {
			want[e.Rank] = nstreams
		}
	}
	c.results = make(chan connResult, len(want)*maxStreams)
	c.wg.Add(1)
	go c.acceptLoop(ctx)
	for _, e := range c.cfg.Peers {
		if e.Rank > self {
			for i := 0; i < nstreams; i++ {
				c.wg.Add(1)
				go c.dial(ctx, e.Rank, i, nstreams)
			}
		}
	}

	var err error
	left := len(want)
	for left > 0 && err == nil {
		select {
		case <-ctx.Done():
			var missing []int
			for r, n := range want {
				if n != 0 {
					missing = append(missing, r)
				}
			}
			err = fmt.Errorf("tcp: rank %d: connecting: still waiting for ranks %v: %w", self, sortInts(missing), ctx.Err())
		case res := <-c.results:
			if res.err != nil {
				err = res.err
				break
			}
			c.untrack(res.conn)
			p := c.m.peers[res.id.rank]
			if p == nil {
				p = c.m.newPeer(res.id.rank, res.addr, res.id.streams)
				want[res.id.rank] = res.id.streams
			}
			if len(p.streams) != res.id.streams {
				res.conn.Close()
				err = fmt.Errorf("tcp: rank %d: rank %d dialled with %d and %d streams", self, p.rank, len(p.streams), res.id.streams)
				break
			}
			if err = p.newStream(res.id.stream, res.conn); err != nil {
				res.conn.Close()
				break
			}
			if want[res.id.rank]--; want[res.id.rank] == 0 {
				left--
			}
		}
	}
	c.ln.Close()
	cancel()
	c.mu.Lock()
	for conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
	c.mu.Unlock()
	c.wg.Wait()
	if err != nil {
		for _, p := range c.m.peers {
			if p == nil {
				continue
			}
			for _, s := range p.streams {
				if s != nil {
					s.conn.Close()
				}
			}
		}
		for {
			select {
			case res := <-c.results:
				if res.conn != nil {
					res.conn.Close()
				}
				continue
			default:
			}
			break
		}
		return err
	}
	return nil
}

func sortInts(a []int) []int {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
	return a
}

func (c *connector) track(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns == nil {
		return false
	}
	c.conns[conn] = true
	return true
}

func (c *connector) untrack(conn net.Conn) {
	c.mu.Lock()
	if c.conns != nil {
		delete(c.conns, conn)
	}
	c.mu.Unlock()
}

func (c *connector) deliver(ctx context.Context, r connResult) {
	select {
	case c.results <- r:
	case <-ctx.Done():
		if r.conn != nil {
			r.conn.Close()
		}
	}
}

func (c *connector) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(c.t.opts.handshakeTimeout())
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	return d
}

func (c *connector) acceptLoop(ctx context.Context) {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				c.m.log.Printf("braid/tcp: rank %d: accept: %v", c.m.self, err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		if !c.track(conn) {
			conn.Close()
			return
		}
		c.wg.Add(1)
		go c.serve(ctx, conn.(*net.TCPConn))
	}
}

// serve authenticates one accepted connection.
func (c *connector) serve(ctx context.Context, conn *net.TCPConn) {
	defer c.wg.Done()
	accept := func(id hsIdent) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		k := [2]int{id.rank, id.stream}
		switch {
		case !c.lower[id.rank]:
			return fmt.Errorf("rank %d is not expected to dial rank %d", id.rank, c.m.self)
		case c.claimed[k]:
			return fmt.Errorf("rank %d dialled stream %d twice", id.rank, id.stream)
		}
		c.claimed[k] = true
		return nil
	}
	id, err := serverHandshake(conn, c.deadline(ctx), c.m.self, c.cfg.Secret, c.cfg.Prefix, accept)
	if err != nil {
		if ctx.Err() == nil {
			c.m.log.Printf("braid/tcp: rank %d: refused connection from %s: %v", c.m.self, conn.RemoteAddr(), err)
		}
		c.untrack(conn)
		conn.Close()
		return
	}
	c.setup(conn)
	c.deliver(ctx, connResult{id: id, addr: conn.RemoteAddr().String(), conn: conn})
}

// dial makes connection stream of streams to rank, retrying until ctx ends.
func (c *connector) dial(ctx context.Context, rank, stream, streams int) {
	defer c.wg.Done()
	self := c.m.self
	v, err := c.cfg.Store.Get(ctx, AddrKey(c.cfg.Prefix, rank))
	if err != nil {
		c.deliver(ctx, connResult{err: fmt.Errorf("tcp: rank %d: address of rank %d: %w", self, rank, err)})
		return
	}
	addr := string(v)
	var d net.Dialer
	wait := 5 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			if !c.track(conn) {
				conn.Close()
				return
			}
			err = clientHandshake(conn, c.deadline(ctx), self, rank, stream, streams, c.cfg.Secret, c.cfg.Prefix)
			if err == nil {
				c.setup(conn.(*net.TCPConn))
				c.deliver(ctx, connResult{id: hsIdent{rank: rank, stream: stream, streams: streams}, addr: addr, conn: conn.(*net.TCPConn)})
				return
			}
			c.untrack(conn)
			conn.Close()
			if errors.Is(err, transport.ErrAuth) && ctx.Err() == nil {
				c.deliver(ctx, connResult{err: fmt.Errorf("tcp: rank %d: connecting to rank %d at %s: %w", self, rank, addr, err)})
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// setup sets a new connection's socket options.
func (c *connector) setup(conn *net.TCPConn) {
	conn.SetNoDelay(true)
	conn.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3})
	if n := c.t.opts.SocketBuffer; n > 0 {
		conn.SetReadBuffer(n)
		conn.SetWriteBuffer(n)
	}
}
