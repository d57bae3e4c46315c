package agg

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"sync"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
)

// Errors a client reports; they wrap the daemon's words.
var (
	// ErrRefused: the daemon does not hold the job's secret.
	ErrRefused = errors.New("agg: refused by the daemon")
	// ErrNoResources: the daemon has no room for the group (its memory or
	// group limits); the caller runs without it.
	ErrNoResources = errors.New("agg: no resources")
	// ErrLost: the daemon, or another member, is gone, or the group ended.
	ErrLost = errors.New("agg: aggregation lost")
)

// ClientOptions tunes a client. Zero fields take the defaults.
type ClientOptions struct {
	// Part is the partition, in bytes, that calls stream in (default
	// DefaultPart); Window the parts of a group in flight at once
	// (default DefaultWindow).
	Part   int
	Window int
}

// Defaults of ClientOptions: 1 MiB parts, 4 in flight per group. At 1
// Gbit/s a part is 8 ms on the wire, so four keep the link busy across a
// daemon's round trip; the daemon holds at most (members+5) × 4 MiB per
// group.
const (
	DefaultPart   = 1 << 20
	DefaultWindow = 4
)

// Client is a job's connections to its aggregation daemons, one per
// daemon.
type Client struct {
	job    string
	conns  []*cconn
	part   int
	window int
}

type cconn struct {
	addr string
	c    net.Conn
	wmu  sync.Mutex

	mu     sync.Mutex
	err    error
	next   uint32
	groups map[uint32]*shard
	joins  map[uint32]chan joinAnswer
	stats  chan []byte
	done   chan struct{}
}

type joinAnswer struct {
	status uint8
	msg    string
}

// Dial connects to every daemon of addrs ("host:port") and authenticates
// as job with secret. It fails with ErrRefused when a daemon does not hold
// the secret.
func Dial(ctx context.Context, addrs []string, job string, secret []byte, o ClientOptions) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("agg: no daemon addresses")
	}
	if len(job) == 0 || len(job) > maxJobLen {
		return nil, fmt.Errorf("agg: a job name of %d bytes (1 to %d)", len(job), maxJobLen)
	}
	if o.Part == 0 {
		o.Part = DefaultPart
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Part < 8 || o.Part > MaxPart || o.Part%8 != 0 || o.Window < 1 || o.Window > MaxWindow {
		return nil, fmt.Errorf("agg: partition %d, window %d: want a multiple of 8 up to %d, and 1 to %d", o.Part, o.Window, MaxPart, MaxWindow)
	}
	cl := &Client{job: job, part: o.Part, window: o.Window}
	for _, a := range addrs {
		c, err := dialOne(ctx, a, job, secret)
		if err != nil {
			cl.Close()
			return nil, err
		}
		cl.conns = append(cl.conns, c)
	}
	return cl, nil
}

func dialOne(ctx context.Context, addr, job string, secret []byte) (*cconn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: connecting to the aggregation daemon %s: %v", ErrLost, addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
		tc.SetKeepAlivePeriod(15 * time.Second)
	}
	fail := func(err error) (*cconn, error) {
		nc.Close()
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(30 * time.Second)
	}
	nc.SetDeadline(dl)
	var hello [helloLen]byte
	if _, err := io.ReadFull(nc, hello[:]); err != nil {
		return fail(fmt.Errorf("%w: the daemon %s sent no hello: %v", ErrLost, addr, err))
	}
	if string(hello[:4]) != hsMagic || hello[4] != wireVersion {
		return fail(fmt.Errorf("%w: %s is not a braid agg daemon of this version", ErrLost, addr))
	}
	ans := make([]byte, answerFixed, answerFixed+len(job))
	copy(ans, hsMagic)
	ans[4] = wireVersion
	binary.LittleEndian.PutUint16(ans[6:], uint16(len(job)))
	nonceC := ans[8 : 8+nonceLen]
	if _, err := rand.Read(nonceC); err != nil {
		return fail(err)
	}
	copy(ans[8+nonceLen:], mac(secret, roleClient, job, hello[8:]))
	ans = append(ans, job...)
	if _, err := nc.Write(ans); err != nil {
		return fail(fmt.Errorf("%w: handshake with %s: %v", ErrLost, addr, err))
	}
	var rep [replyFixed]byte
	if _, err := io.ReadFull(nc, rep[:]); err != nil {
		return fail(fmt.Errorf("%w: handshake with %s: %v", ErrLost, addr, err))
	}
	n := int(binary.LittleEndian.Uint16(rep[2:]))
	if n > maxReplyText {
		return fail(fmt.Errorf("%w: %s answered with %d bytes", ErrLost, addr, n))
	}
	msg := make([]byte, n)
	io.ReadFull(nc, msg)
	if rep[0] != hsAccepted {
		return fail(fmt.Errorf("%w: %s: %s", ErrRefused, addr, msg))
	}
	if !hmac.Equal(rep[4:], mac(secret, roleDaemon, job, nonceC)) {
		return fail(fmt.Errorf("%w: %s did not prove that it holds the job's secret", ErrRefused, addr))
	}
	nc.SetDeadline(time.Time{})
	c := &cconn{addr: addr, c: nc, groups: map[uint32]*shard{}, joins: map[uint32]chan joinAnswer{}, stats: make(chan []byte, 1), done: make(chan struct{})}
	go c.reader()
	return c, nil
}

// Close leaves the groups still joined and closes every connection (a
// daemon ends the groups of a connection that closes without leaving).
func (cl *Client) Close() error {
	for _, c := range cl.conns {
		c.mu.Lock()
		var handles []uint32
		if c.err == nil {
			for h := range c.groups {
				handles = append(handles, h)
			}
		}
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		for _, h := range handles {
			if c.write(ctx, header{typ: tLeave, handle: h}, nil) != nil {
				break
			}
		}
		cancel()
		c.c.Close()
		<-c.done
	}
	return nil
}

// Daemons returns how many daemons the client is connected to.
func (cl *Client) Daemons() int { return len(cl.conns) }

// fail ends the connection's groups with err.
func (c *cconn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	groups := c.groups
	c.groups = map[uint32]*shard{}
	joins := c.joins
	c.joins = map[uint32]chan joinAnswer{}
	c.mu.Unlock()
	for _, g := range groups {
		g.fail(err)
	}
	for _, ch := range joins {
		select {
		case ch <- joinAnswer{status: 255, msg: err.Error()}:
		default:
		}
	}
}

func (c *cconn) reader() {
	defer close(c.done)
	r := bufio.NewReaderSize(c.c, 64<<10)
	var hb [headerLen]byte
	for {
		if _, err := io.ReadFull(r, hb[:]); err != nil {
			c.fail(fmt.Errorf("%w: the aggregation daemon %s: %v", ErrLost, c.addr, err))
			return
		}
		h, err := parseHeader(hb[:], true)
		if err != nil {
			c.fail(fmt.Errorf("%w: the aggregation daemon %s: %v", ErrLost, c.addr, err))
			c.c.Close()
			return
		}
		switch h.typ {
		case tResult:
			c.mu.Lock()
			g := c.groups[h.handle]
			c.mu.Unlock()
			if g == nil {
				if _, err := io.CopyN(io.Discard, r, int64(h.length)); err != nil {
					c.fail(fmt.Errorf("%w: the aggregation daemon %s: %v", ErrLost, c.addr, err))
					return
				}
				continue
			}
			if err := g.result(h, r); err != nil {
				c.fail(fmt.Errorf("%w: the aggregation daemon %s: %v", ErrLost, c.addr, err))
				c.c.Close()
				return
			}
		default:
			p := make([]byte, h.length)
			if _, err := io.ReadFull(r, p); err != nil {
				c.fail(fmt.Errorf("%w: the aggregation daemon %s: %v", ErrLost, c.addr, err))
				return
			}
			c.mu.Lock()
			switch h.typ {
			case tJoined:
				if ch := c.joins[h.handle]; ch != nil {
					ch <- joinAnswer{h.code, string(p)}
					delete(c.joins, h.handle)
				}
			case tAbort:
				g := c.groups[h.handle]
				delete(c.groups, h.handle)
				c.mu.Unlock()
				if g != nil {
					g.fail(fmt.Errorf("%w: the aggregation daemon %s ended the group: %s", ErrLost, c.addr, p))
				}
				c.mu.Lock()
			case tStatsReply:
				select {
				case c.stats <- p:
				default:
				}
			}
			c.mu.Unlock()
		}
	}
}

// write sends one frame.
func (c *cconn) write(ctx context.Context, h header, p []byte) error {
	var hb [headerLen]byte
	h.length = uint32(len(p))
	h.put(hb[:])
	c.wmu.Lock()
	defer c.wmu.Unlock()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	c.c.SetWriteDeadline(dl)
	bufs := net.Buffers{hb[:], p}
	if _, err := bufs.WriteTo(c.c); err != nil {
		c.c.Close()
		return fmt.Errorf("%w: writing to the aggregation daemon %s: %v", ErrLost, c.addr, err)
	}
	return nil
}

// Group is this member's place in one aggregation group, on every daemon
// of the client (a shard of each call goes to each).
type Group struct {
	cl      *Client
	key     string
	members int
	shards  []*shard
	base    int
	seq     uint64
	broken  error
}

// shard is the group's membership on one daemon.
type shard struct {
	c      *cconn
	handle uint32

	mu     sync.Mutex
	err    error
	seq    uint64
	out    []byte // where results go
	code   uint8
	part   int
	parts  uint32
	got    chan struct{} // a result arrived (one token per part)
	failed chan struct{}

	// reading counts the results being read into out: a call that fails
	// closes the connection, so that no read blocks, and waits for them,
	// so that nothing writes into the caller's buffer once it returns.
	reading sync.WaitGroup
}

func (g *shard) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
		close(g.failed)
	}
}

// result reads a result frame's payload into its place.
func (g *shard) result(h header, r io.Reader) error {
	g.mu.Lock()
	out, part, seq, parts, cd, bad := g.out, g.part, g.seq, g.parts, g.code, g.err != nil
	if !bad && out != nil {
		g.reading.Add(1) // run waits for this read before it returns
	}
	g.mu.Unlock()
	if bad || out == nil {
		_, err := io.CopyN(io.Discard, r, int64(h.length))
		return err
	}
	defer g.reading.Done()
	off := int(h.part) * part
	want := min(part, len(out)-off)
	if h.seq != seq || h.parts != parts || h.code != cd || off >= len(out) || int(h.length) != want {
		return fmt.Errorf("a result for call %d part %d/%d of %d bytes, expected call %d of %d parts", h.seq, h.part, h.parts, h.length, seq, parts)
	}
	if _, err := io.ReadFull(r, out[off:off+want]); err != nil {
		return err
	}
	g.got <- struct{}{}
	return nil
}

// Join makes this client member me of the n-member group key on every
// daemon. Every member must join with the same key, n, partition and
// window. It fails with ErrNoResources when a daemon has no room, and
// ErrLost when a daemon is gone or answers otherwise.
func (cl *Client) Join(ctx context.Context, key string, n, me int) (*Group, error) {
	if len(key) == 0 || len(key) > maxKeyLen {
		return nil, fmt.Errorf("agg: a group key of %d bytes (1 to %d)", len(key), maxKeyLen)
	}
	g := &Group{cl: cl, key: key, members: n}
	h := fnv.New32a()
	h.Write([]byte(key))
	g.base = int(h.Sum32() % uint32(len(cl.conns)))
	j := join{members: n, member: me, part: cl.part, window: cl.window, key: key}
	payload := j.encode()
	for _, c := range cl.conns {
		sh := &shard{c: c, got: make(chan struct{}, cl.window+1), failed: make(chan struct{})}
		ch := make(chan joinAnswer, 1)
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			g.Leave()
			return nil, err
		}
		c.next++
		sh.handle = c.next
		c.joins[sh.handle] = ch
		c.groups[sh.handle] = sh
		c.mu.Unlock()
		g.shards = append(g.shards, sh)
		if err := c.write(ctx, header{typ: tJoin, handle: sh.handle}, payload); err != nil {
			g.Leave()
			return nil, err
		}
		var a joinAnswer
		select {
		case a = <-ch:
		case <-ctx.Done():
			g.Leave()
			return nil, fmt.Errorf("%w: joining %q on %s: %v", ErrLost, key, c.addr, ctx.Err())
		}
		switch a.status {
		case statusOK:
		case statusNoResources:
			g.Leave()
			return nil, fmt.Errorf("%w: %s: %s", ErrNoResources, c.addr, a.msg)
		default:
			g.Leave()
			return nil, fmt.Errorf("%w: joining %q on %s: %s", ErrLost, key, c.addr, a.msg)
		}
	}
	return g, nil
}

// Leave leaves the group on every daemon.
func (g *Group) Leave() {
	for _, sh := range g.shards {
		c := sh.c
		c.mu.Lock()
		_, ok := c.groups[sh.handle]
		delete(c.groups, sh.handle)
		delete(c.joins, sh.handle)
		dead := c.err != nil
		c.mu.Unlock()
		if ok && !dead {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c.write(ctx, header{typ: tLeave, handle: sh.handle}, nil)
			cancel()
		}
	}
	g.shards = nil
	if g.broken == nil {
		g.broken = fmt.Errorf("%w: the group was left", ErrLost)
	}
}

// Allreduce reduces buf, elements of d, with op over the group's members
// into res (len(res) == len(buf); res may be buf). The daemons combine the
// operands in member order, and every member receives the same bits; the
// 16-bit floating-point types are combined in float32 and rounded once.
// Avg is the caller's: it sends Sum and divides.
// Large buffers are cut into shards, one per daemon, each streamed in
// parts with at most the window of parts in flight; a buffer of one part
// or less goes to one daemon in one round trip. After an error the group
// is broken: every later call fails at once.
func (g *Group) Allreduce(ctx context.Context, d dtype.DType, op dtype.Op, buf, res []byte) error {
	if g.broken != nil {
		return g.broken
	}
	if !d.Valid() || !op.Valid() || op == dtype.Avg || !dtype.Supports(d, op) || len(buf)%d.Size() != 0 || len(res) != len(buf) {
		return fmt.Errorf("agg: allreduce of %d bytes of %v by %v into %d", len(buf), d, op, len(res))
	}
	es := d.Size()
	cd := code(d, op)
	g.seq++
	if len(buf) == 0 {
		return nil
	}
	// The shards: as many as the daemons, but none smaller than a part.
	part := g.cl.part / es * es
	ns := min(len(g.shards), max(1, (len(buf)+part-1)/part))
	count := len(buf) / es
	var wg sync.WaitGroup
	errs := make([]error, ns)
	for s := range ns {
		lo, hi := count*s/ns*es, count*(s+1)/ns*es
		sh := g.shards[(g.base+s)%len(g.shards)]
		if ns == 1 {
			errs[0] = sh.run(ctx, g.seq, cd, part, g.cl.window, buf[lo:hi], res[lo:hi])
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[s] = sh.run(ctx, g.seq, cd, part, g.cl.window, buf[lo:hi], res[lo:hi])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			g.broken = err
			return err
		}
	}
	return nil
}

// run streams one shard's parts and waits for their sums.
func (sh *shard) run(ctx context.Context, seq uint64, cd uint8, part, window int, buf, res []byte) error {
	if len(buf) == 0 {
		return nil
	}
	parts := (len(buf) + part - 1) / part
	sh.mu.Lock()
	if sh.err != nil {
		err := sh.err
		sh.mu.Unlock()
		return err
	}
	sh.seq, sh.out, sh.code, sh.part, sh.parts = seq, res, cd, part, uint32(parts)
	sh.mu.Unlock()
	defer func() {
		sh.mu.Lock()
		sh.out = nil
		failed := sh.err != nil
		sh.mu.Unlock()
		if failed {
			// A result may be on its way into res: end the connection
			// (its other groups fail too) and wait for the reader.
			sh.c.c.Close()
		}
		sh.reading.Wait()
	}()
	wait := func() error {
		select {
		case <-sh.got:
			return nil
		case <-sh.failed:
			sh.mu.Lock()
			defer sh.mu.Unlock()
			return sh.err
		case <-ctx.Done():
			err := fmt.Errorf("%w: waiting for the aggregation daemon %s: %v", ErrLost, sh.c.addr, ctx.Err())
			sh.fail(err)
			return err
		}
	}
	got := 0
	for j := range parts {
		if j-got >= window {
			if err := wait(); err != nil {
				return err
			}
			got++
		}
		lo := j * part
		hi := min(lo+part, len(buf))
		h := header{typ: tData, code: cd, handle: sh.handle, part: uint32(j), parts: uint32(parts), seq: seq}
		if err := sh.c.write(ctx, h, buf[lo:hi]); err != nil {
			sh.fail(err)
			return err
		}
	}
	for got < parts {
		if err := wait(); err != nil {
			return err
		}
		got++
	}
	return nil
}

// FetchStats asks the daemon at addr for its statistics (JSON), as job
// with secret.
func FetchStats(ctx context.Context, addr, job string, secret []byte) (Stats, error) {
	var st Stats
	c, err := dialOne(ctx, addr, job, secret)
	if err != nil {
		return st, err
	}
	defer func() {
		c.c.Close()
		<-c.done
	}()
	if err := c.write(ctx, header{typ: tStats}, nil); err != nil {
		return st, err
	}
	select {
	case p := <-c.stats:
		return st, json.Unmarshal(p, &st)
	case <-c.done:
		return st, c.err
	case <-ctx.Done():
		return st, ctx.Err()
	}
}
