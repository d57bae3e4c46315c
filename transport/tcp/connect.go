package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// connector sets up a mesh's connections.
type connector struct {
	t    *Transport
	m    *mesh
	cfg  *transport.Config
	ln   net.Listener
	addr string // the address this rank advertises

	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool  // connections not yet handed to the mesh
	claimed map[[2]int]bool    // (rank, stream) already accepted
	lower   map[int]bool       // ranks that dial this one
	dials   map[int]*dialState // what dialling each higher rank met
	results chan connResult
}

// dialState is what dialling a rank has met so far, for the error that
// reports a rank that could not be reached.
type dialState struct {
	addr  string // the rank's published address; "" until read
	tries int
	last  error
}

// connResult is an authenticated connection, or a fatal error.
type connResult struct {
	id   hsIdent
	addr string
	conn *net.TCPConn
	err  error
}

// run makes every connection of the mesh: it accepts those of the lower
// ranks, dials those of the higher ones, and waits for all of them (or for
// ctx to end, or a fatal error). It cleans up whatever it started.
func (c *connector) run(ctx context.Context) error {
	self := c.m.self
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.lower = make(map[int]bool)
	c.dials = make(map[int]*dialState)
	want := make(map[int]int) // rank → streams still missing; -1 until known
	nstreams := c.t.opts.streams()
	for _, e := range c.cfg.Peers {
		if e.Rank < self {
			c.lower[e.Rank] = true
			want[e.Rank] = -1
		} else {
			want[e.Rank] = nstreams
			c.dials[e.Rank] = &dialState{}
		}
	}
	c.results = make(chan connResult, 64)
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
			missing = slices.Sorted(slices.Values(missing))
			err = fmt.Errorf("tcp: rank %d (at %s): connecting: still waiting for ranks %v: %s: %w",
				self, c.addr, missing, c.diagnose(missing), ctx.Err())
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
	if err == nil {
		// Name the ranks that dialled by their published addresses.
		for r := range c.lower {
			if v, gerr := c.cfg.Store.Get(ctx, AddrKey(c.cfg.Prefix, r)); gerr == nil {
				c.m.peers[r].addr = string(v)
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
		for len(c.results) > 0 { // the senders are done
			if res := <-c.results; res.conn != nil {
				res.conn.Close()
			}
		}
		return err
	}
	return nil
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
	c.mu.Lock()
	st := c.dials[rank]
	st.addr = addr
	c.mu.Unlock()
	var d net.Dialer
	wait := 5 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil && ctx.Err() == nil {
			c.mu.Lock()
			st.tries++
			st.last = err
			c.mu.Unlock()
		}
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
				msg := ""
				if h := c.hint(rank, addr); h != "" {
					msg = " (" + h + ")"
				}
				c.deliver(ctx, connResult{err: fmt.Errorf("tcp: rank %d: connecting to rank %d at %s%s: %w", self, rank, addr, msg, err)})
				return
			}
			c.mu.Lock()
			st.tries++
			st.last = err
			c.mu.Unlock()
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

// diagnose says, for each rank still missing, what connecting to it met,
// and hints at the cause: "rank 1 at 127.0.0.1:4242: 31 dials, the last
// one: ... connection refused; ranks 0 and 1 both advertise 127.0.0.1 but
// ...".
func (c *connector) diagnose(missing []int) string {
	var parts []string
	for _, r := range missing {
		var s, addr string
		if c.lower[r] {
			// r dials this rank: where did it say it was?
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			v, err := c.cfg.Store.Get(ctx, AddrKey(c.cfg.Prefix, r))
			cancel()
			if err != nil {
				s = fmt.Sprintf("rank %d has not published its address", r)
			} else {
				addr = string(v)
				s = fmt.Sprintf("rank %d (at %s) has not connected to %s", r, addr, c.addr)
			}
		} else {
			c.mu.Lock()
			st := *c.dials[r]
			c.mu.Unlock()
			switch {
			case st.addr == "":
				s = fmt.Sprintf("rank %d has not published its address", r)
			case st.tries == 0:
				s = fmt.Sprintf("rank %d at %s: no answer to the handshake", r, st.addr)
			default:
				s = fmt.Sprintf("rank %d at %s: %d dials, the last one: %v", r, st.addr, st.tries, st.last)
			}
			addr = st.addr
		}
		if h := c.hint(r, addr); h != "" {
			s += "; " + h
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// hint guesses why rank could not be reached at addr when the two ranks
// run on different hosts (host identities, transport.Endpoint.Host), or ""
// when it cannot tell.
func (c *connector) hint(rank int, addr string) string {
	self := c.cfg.Self
	var peer transport.Endpoint
	for _, e := range c.cfg.Peers {
		if e.Rank == rank {
			peer = e
		}
	}
	if addr == "" || peer.Host == "" || self.Host == "" || peer.Host == self.Host {
		return ""
	}
	sh, _, _ := net.SplitHostPort(c.addr)
	ph, _, _ := net.SplitHostPort(addr)
	where := fmt.Sprintf("on different hosts (%s and %s)", self.Host, peer.Host)
	if n, _, _ := strings.Cut(self.Host, "#"); strings.HasPrefix(peer.Host, n+"#") {
		where = fmt.Sprintf("on different machines or network namespaces that share the host name %s (host identities %s and %s)", n, self.Host, peer.Host)
	}
	const fix = "set BRAID_SOCKET_IFNAME to an interface through which the ranks reach each other, or BRAID_ADVERTISE_ADDR"
	a, b := min(self.Rank, rank), max(self.Rank, rank)
	switch {
	case sh == ph:
		return fmt.Sprintf("ranks %d and %d both advertise %s but are %s; %s", a, b, ph, where, fix)
	case isLoopback(ph):
		return fmt.Sprintf("rank %d advertises the loopback address %s but rank %d is %s; %s", rank, ph, self.Rank, where, fix)
	case isLoopback(sh):
		return fmt.Sprintf("this rank advertises the loopback address %s but rank %d is %s; %s", sh, rank, where, fix)
	}
	return fmt.Sprintf("check that ranks %d and %d can reach each other's address (routes, firewalls), or %s", a, b, fix)
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}
