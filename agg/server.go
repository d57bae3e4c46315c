package agg

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
)

// Config configures a daemon. Zero fields take the defaults named.
type Config struct {
	// Secrets are the jobs' secrets the daemon accepts: a client must
	// prove that it holds one of them. SecretFile, if set, names a file of
	// more (one hex secret per line, # comments), read again whenever it
	// changes, so that a launcher can add a job's secret while the daemon
	// runs. A daemon with no secret at all refuses every client.
	Secrets    [][]byte
	SecretFile string

	// MaxMemory bounds the memory all groups may reserve (default 1 GiB);
	// MaxJobMemory what the groups of one job may (default MaxMemory/2);
	// MaxJobGroups the groups of one job (default 256). A join beyond them
	// is answered "no resources", and the client falls back to host
	// algorithms.
	MaxMemory    int64
	MaxJobMemory int64
	MaxJobGroups int

	// IOTimeout bounds one write to a client (default 60 s): a client that
	// stops reading loses its groups. JoinTimeout bounds the time between
	// a group's first join and its last (default 60 s): a group whose
	// members never all come is ended.
	IOTimeout   time.Duration
	JoinTimeout time.Duration

	// Log receives one line per refused connection, lost member and ended
	// group (default: standard error). Refusals are capped at a few lines
	// a second, then counted.
	Log *log.Logger
}

func (c *Config) fill() {
	if c.MaxMemory <= 0 {
		c.MaxMemory = 1 << 30
	}
	if c.MaxJobMemory <= 0 {
		c.MaxJobMemory = c.MaxMemory / 2
	}
	if c.MaxJobGroups <= 0 {
		c.MaxJobGroups = 256
	}
	if c.IOTimeout <= 0 {
		c.IOTimeout = 60 * time.Second
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = 60 * time.Second
	}
	if c.Log == nil {
		c.Log = log.New(os.Stderr, "braid agg: ", log.LstdFlags|log.Lmicroseconds)
	}
}

// Server is an aggregation daemon: it sums the parts that the members of
// each group send and returns every sum to every member.
type Server struct {
	cfg Config

	mu       sync.Mutex
	groups   map[string]*group // by job scope and key
	jobs     map[string]*jobUse
	reserved int64
	conns    map[*sconn]struct{}
	lns      []net.Listener
	closed   bool

	secretMu   sync.Mutex
	fileMod    time.Time
	fileSize   int64
	fileSecret [][]byte

	refuseMu  sync.Mutex
	refuseWin time.Time
	refuseN   int

	start time.Time
	st    counters
	wg    sync.WaitGroup
}

type jobUse struct {
	groups   int
	reserved int64
}

type counters struct {
	conns, refused, joins, full, aborted atomic.Int64
	bytesIn, bytesOut, parts, calls      atomic.Int64
	latNanos, latCount                   atomic.Int64 // from a part's first operand to its sum
}

// Stats is what a daemon reports on request (braid agg --stats).
type Stats struct {
	Uptime       string  `json:"uptime"`
	Connections  int     `json:"connections"`
	Groups       int     `json:"groups"`
	Jobs         int     `json:"jobs"`
	Reserved     int64   `json:"reserved_bytes"`
	MaxMemory    int64   `json:"max_memory_bytes"`
	Accepted     int64   `json:"connections_accepted"`
	Refused      int64   `json:"connections_refused"`
	Joins        int64   `json:"joins"`
	NoResources  int64   `json:"joins_refused_no_resources"`
	Aborted      int64   `json:"groups_ended_by_failure"`
	BytesIn      int64   `json:"bytes_in"`
	BytesOut     int64   `json:"bytes_out"`
	Parts        int64   `json:"parts_summed"`
	Calls        int64   `json:"calls"`
	MeanPartTime float64 `json:"mean_part_latency_us"`
}

// NewServer returns a daemon with cfg; Serve runs it on a listener.
func NewServer(cfg Config) *Server {
	cfg.fill()
	return &Server{cfg: cfg, groups: map[string]*group{}, jobs: map[string]*jobUse{}, conns: map[*sconn]struct{}{}, start: time.Now()}
}

// Serve accepts connections on l until Close. It returns nil after Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return errors.New("agg: server closed")
	}
	s.lns = append(s.lns, l)
	s.mu.Unlock()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(err.Error(), "too many open files") {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
		}()
	}
}

// Close stops the listeners, drops every connection (their groups end)
// and waits for the daemon's goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for _, l := range s.lns {
		l.Close()
	}
	for c := range s.conns {
		c.c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Stats returns the daemon's statistics.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	st := Stats{Uptime: time.Since(s.start).Round(time.Second).String(), Connections: len(s.conns), Groups: len(s.groups),
		Jobs: len(s.jobs), Reserved: s.reserved, MaxMemory: s.cfg.MaxMemory}
	s.mu.Unlock()
	st.Accepted, st.Refused = s.st.conns.Load(), s.st.refused.Load()
	st.Joins, st.NoResources, st.Aborted = s.st.joins.Load(), s.st.full.Load(), s.st.aborted.Load()
	st.BytesIn, st.BytesOut, st.Parts, st.Calls = s.st.bytesIn.Load(), s.st.bytesOut.Load(), s.st.parts.Load(), s.st.calls.Load()
	if n := s.st.latCount.Load(); n > 0 {
		st.MeanPartTime = float64(s.st.latNanos.Load()) / float64(n) / 1e3
	}
	return st
}

// secrets returns the secrets the daemon holds now.
func (s *Server) secrets() [][]byte {
	out := s.cfg.Secrets
	if s.cfg.SecretFile == "" {
		return out
	}
	s.secretMu.Lock()
	defer s.secretMu.Unlock()
	if fi, err := os.Stat(s.cfg.SecretFile); err == nil && (!fi.ModTime().Equal(s.fileMod) || fi.Size() != s.fileSize) {
		if list, err := ReadSecretFile(s.cfg.SecretFile); err == nil {
			s.fileSecret, s.fileMod, s.fileSize = list, fi.ModTime(), fi.Size()
		} else {
			s.cfg.Log.Printf("reading %s: %v (keeping the secrets read before)", s.cfg.SecretFile, err)
		}
	}
	return append(append([][]byte(nil), out...), s.fileSecret...)
}

// refuse logs a refused connection, at most 5 lines a second.
func (s *Server) refuse(addr net.Addr, why string) {
	s.st.refused.Add(1)
	s.refuseMu.Lock()
	defer s.refuseMu.Unlock()
	now := time.Now()
	if now.Sub(s.refuseWin) > time.Second {
		if s.refuseN > 5 {
			s.cfg.Log.Printf("refused %d more connections in the last second", s.refuseN-5)
		}
		s.refuseWin, s.refuseN = now, 0
	}
	if s.refuseN++; s.refuseN <= 5 {
		s.cfg.Log.Printf("refused a connection from %v: %s", addr, why)
	}
}

// sconn is one client connection.
type sconn struct {
	s     *Server
	c     net.Conn
	addr  string
	scope string // the job: which secret matched, and its name
	job   string

	qmu    sync.Mutex
	queue  []out
	wake   chan struct{}
	dead   bool
	handle map[uint32]*membership
}

// out is a frame waiting for the connection's writer.
type out struct {
	h    header
	p    []byte
	done func()
}

type membership struct {
	g      *group
	member int
}

// handle serves one connection.
func (s *Server) handle(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
		tc.SetKeepAlivePeriod(15 * time.Second)
	}
	sc := &sconn{s: s, c: c, addr: c.RemoteAddr().String(), wake: make(chan struct{}, 1), handle: map[uint32]*membership{}}
	if err := sc.handshake(); err != nil {
		if err != errRefusedLogged {
			s.refuse(c.RemoteAddr(), err.Error())
		}
		c.Close()
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	s.st.conns.Add(1)
	done := make(chan struct{})
	go func() {
		sc.writer()
		close(done)
	}()
	err := sc.reader()
	c.Close()
	sc.qmu.Lock()
	sc.dead = true
	q := sc.queue
	sc.queue = nil
	mems := sc.handle
	sc.handle = nil
	sc.qmu.Unlock()
	for _, o := range q {
		if o.done != nil {
			o.done()
		}
	}
	select {
	case sc.wake <- struct{}{}:
	default:
	}
	<-done
	for h, m := range mems {
		m.g.lost(m.member, fmt.Sprintf("member %d (%s, handle %d) of job %q disconnected: %v", m.member, sc.addr, h, sc.job, err))
	}
	s.mu.Lock()
	delete(s.conns, sc)
	s.mu.Unlock()
}

// errRefusedLogged is handshake's error for a refusal it logged itself.
var errRefusedLogged = errors.New("agg: refused (logged)")

func (sc *sconn) handshake() error {
	s := sc.s
	c := sc.c
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	var hello [helloLen]byte
	copy(hello[:], hsMagic)
	hello[4] = wireVersion
	nonceD := hello[8:]
	if _, err := rand.Read(nonceD); err != nil {
		return err
	}
	if _, err := c.Write(hello[:]); err != nil {
		return fmt.Errorf("writing the hello: %v", err)
	}
	var ans [answerFixed]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		return fmt.Errorf("no handshake answer: %v", err)
	}
	jobLen, nonceC, sum, err := parseAnswerFixed(ans[:])
	if err != nil {
		return err
	}
	job := make([]byte, jobLen)
	if _, err := io.ReadFull(c, job); err != nil {
		return fmt.Errorf("no job name: %v", err)
	}
	idx := -1
	secrets := s.secrets()
	for i, sec := range secrets {
		if hmac.Equal(sum, mac(sec, roleClient, string(job), nonceD)) {
			idx = i
			break
		}
	}
	reply := make([]byte, replyFixed)
	if idx < 0 {
		msg := "refused: the job's secret is not one this daemon holds (give the daemon BRAID_SECRET or --secret-file)"
		reply[0] = hsRefused
		binary.LittleEndian.PutUint16(reply[2:], uint16(len(msg)))
		err := fmt.Errorf("job %q: no secret of the daemon's %d matches (a client without the job's secret)", job, len(secrets))
		// Logged before the client hears of it, so that whoever sees the
		// refusal finds it in the daemon's log (handle does not log it
		// again).
		s.refuse(c.RemoteAddr(), err.Error())
		c.Write(append(reply, msg...))
		return errRefusedLogged
	}
	reply[0] = hsAccepted
	copy(reply[4:], mac(secrets[idx], roleDaemon, string(job), nonceC))
	if _, err := c.Write(reply); err != nil {
		return err
	}
	sc.job = string(job)
	sc.scope = fmt.Sprintf("%x\x00%s", mac(secrets[idx], "braid/agg scope", "", nil)[:8], job)
	return nil
}

// send queues a frame for the writer; done, if not nil, runs once it is
// written or dropped.
func (sc *sconn) send(h header, p []byte, done func()) {
	h.length = uint32(len(p))
	sc.qmu.Lock()
	if sc.dead {
		sc.qmu.Unlock()
		if done != nil {
			done()
		}
		return
	}
	sc.queue = append(sc.queue, out{h, p, done})
	sc.qmu.Unlock()
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

func (sc *sconn) writer() {
	var hb [headerLen]byte
	for {
		sc.qmu.Lock()
		for len(sc.queue) == 0 && !sc.dead {
			sc.qmu.Unlock()
			<-sc.wake
			sc.qmu.Lock()
		}
		if sc.dead {
			sc.qmu.Unlock()
			return
		}
		o := sc.queue[0]
		sc.queue[0] = out{}
		sc.queue = sc.queue[1:]
		sc.qmu.Unlock()
		o.h.put(hb[:])
		sc.c.SetWriteDeadline(time.Now().Add(sc.s.cfg.IOTimeout))
		bufs := net.Buffers{hb[:], o.p}
		// Counted before the write: a client can read its result and ask
		// for the stats before this goroutine returns from WriteTo, and
		// must see the bytes it received. Taken back if the write fails.
		sc.s.st.bytesOut.Add(int64(len(o.p)))
		_, err := bufs.WriteTo(sc.c)
		if o.done != nil {
			o.done()
		}
		if err != nil {
			sc.s.st.bytesOut.Add(-int64(len(o.p)))
			sc.c.Close() // the reader ends and cleans up
			return
		}
	}
}

func (sc *sconn) reader() error {
	s := sc.s
	r := bufio.NewReaderSize(sc.c, 64<<10)
	var hb [headerLen]byte
	for {
		if _, err := io.ReadFull(r, hb[:]); err != nil {
			return err
		}
		h, err := parseHeader(hb[:], false)
		if err != nil {
			s.cfg.Log.Printf("dropping %s (job %q): %v", sc.addr, sc.job, err)
			return err
		}
		switch h.typ {
		case tJoin:
			p := make([]byte, h.length)
			if _, err := io.ReadFull(r, p); err != nil {
				return err
			}
			sc.join(h.handle, p)
		case tLeave:
			sc.qmu.Lock()
			m := sc.handle[h.handle]
			delete(sc.handle, h.handle)
			sc.qmu.Unlock()
			if m != nil {
				m.g.leave(m.member)
			}
		case tStats:
			b, _ := json.Marshal(s.Stats())
			sc.send(header{typ: tStatsReply}, b, nil)
		case tData:
			sc.qmu.Lock()
			m := sc.handle[h.handle]
			sc.qmu.Unlock()
			if m == nil {
				// A group that ended: drop the payload.
				if _, err := io.CopyN(io.Discard, r, int64(h.length)); err != nil {
					return err
				}
				continue
			}
			if err := m.g.data(m.member, h, r); err != nil {
				return err
			}
		}
	}
}

// join answers a join request.
func (sc *sconn) join(handle uint32, p []byte) {
	s := sc.s
	s.st.joins.Add(1)
	answer := func(status uint8, msg string) {
		sc.send(header{typ: tJoined, code: status, handle: handle}, []byte(msg), nil)
	}
	j, err := parseJoin(p)
	if err != nil {
		answer(statusBad, err.Error())
		return
	}
	sc.qmu.Lock()
	_, taken := sc.handle[handle]
	sc.qmu.Unlock()
	if taken || handle == 0 {
		answer(statusBad, fmt.Sprintf("handle %d is in use on this connection", handle))
		return
	}
	g, status, msg := s.joinGroup(sc, j)
	if g == nil {
		if status == statusNoResources {
			s.st.full.Add(1)
			s.cfg.Log.Printf("job %q from %s: no resources for group %q: %s", sc.job, sc.addr, j.key, msg)
		}
		answer(status, msg)
		return
	}
	sc.qmu.Lock()
	sc.handle[handle] = &membership{g: g, member: j.member}
	sc.qmu.Unlock()
	g.mu.Lock()
	g.handles[j.member] = handle
	g.mu.Unlock()
	answer(statusOK, "")
}

// joinGroup adds sc as member j.member of the group j.key of sc's job,
// making the group (and reserving its memory) on its first join.
func (s *Server) joinGroup(sc *sconn, j join) (*group, uint8, string) {
	key := sc.scope + "\x00" + j.key
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, statusNoResources, "the daemon is closing"
	}
	g := s.groups[key]
	if g == nil {
		need := reservation(j.members, j.part, j.window)
		ju := s.jobs[sc.scope]
		if ju == nil {
			ju = &jobUse{}
		}
		switch {
		case ju.groups+1 > s.cfg.MaxJobGroups:
			return nil, statusNoResources, fmt.Sprintf("no resources: job %q has %d groups, the daemon's limit per job", sc.job, ju.groups)
		case ju.reserved+need > s.cfg.MaxJobMemory:
			return nil, statusNoResources, fmt.Sprintf("no resources: the group needs %d MiB and job %q holds %d MiB of its %d MiB", need>>20, sc.job, ju.reserved>>20, s.cfg.MaxJobMemory>>20)
		case s.reserved+need > s.cfg.MaxMemory:
			return nil, statusNoResources, fmt.Sprintf("no resources: the group needs %d MiB and the daemon has %d MiB of %d MiB left", need>>20, (s.cfg.MaxMemory-s.reserved)>>20, s.cfg.MaxMemory>>20)
		}
		ju.groups++
		ju.reserved += need
		s.jobs[sc.scope] = ju
		s.reserved += need
		g = newGroup(s, key, sc.scope, j, need)
		s.groups[key] = g
		g.timer = time.AfterFunc(s.cfg.JoinTimeout, func() {
			g.mu.Lock()
			complete := g.joined == g.n
			g.mu.Unlock()
			if !complete {
				g.abort(fmt.Sprintf("not every member joined within %v", s.cfg.JoinTimeout))
			}
		})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.over:
		return nil, statusBad, "the group has ended"
	case g.n != j.members || g.part != j.part || g.window != j.window:
		return nil, statusBad, fmt.Sprintf("group %q has %d members, partition %d, window %d; this join says %d, %d, %d",
			j.key, g.n, g.part, g.window, j.members, j.part, j.window)
	case g.conns[j.member] != nil:
		return nil, statusBad, fmt.Sprintf("member %d of group %q has joined already (from %s)", j.member, j.key, g.conns[j.member].addr)
	}
	g.conns[j.member] = sc
	g.joined++
	if g.joined == g.n {
		g.timer.Stop()
	}
	return g, statusOK, ""
}

// reservation is the memory a group may hold: every member's window of
// parts waiting to be added and two more windows (the 16-bit types' sums
// being sent), and accumulators of twice the part (the 16-bit types'
// float32) for one window being summed and up to three being sent: a
// member may receive a sum, and send the part that takes its slot, before
// the daemon's writer has marked the sum sent to the last member.
func reservation(members, part, window int) int64 {
	return int64(part) * int64(window) * int64(members+2+8)
}

// release gives back g's reservation.
func (s *Server) release(g *group) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups[g.key] != g {
		return
	}
	delete(s.groups, g.key)
	s.reserved -= g.reserved
	if ju := s.jobs[g.scope]; ju != nil {
		ju.groups--
		ju.reserved -= g.reserved
		if ju.groups == 0 {
			delete(s.jobs, g.scope)
		}
	}
}

// group is one aggregation group: n members that sum parts together.
type group struct {
	s        *Server
	key      string
	scope    string
	name     string
	n        int
	part     int
	window   int
	reserved int64
	timer    *time.Timer

	mu      sync.Mutex
	conns   []*sconn
	handles []uint32
	joined  int
	left    int
	over    bool
	sent    []uint64 // parts each member has sent (over the group's life)
	slots   []slot
	free    [][]byte // operand buffers (part bytes)
	nbuf    int
	accFree [][]byte // accumulators (2 × part bytes)
	nacc    int
}

// slot holds one part being summed: part g of the group's life goes in
// slot g mod window. A member sends part g+window only after it has
// received the sum of part g... or of as many parts: since each member
// sends its parts in order on one connection, a part's operands have all
// arrived before any later part's sum exists, so the slot is free.
type slot struct {
	used    bool
	gpart   uint64
	seq     uint64
	part    uint32
	parts   uint32
	code    uint8
	d       dtype.DType
	op      dtype.Op
	length  int
	next    int      // the next member to add, in member order
	pending [][]byte // operands that came before their turn
	acc     []byte
	t0      time.Time
}

func newGroup(s *Server, key, scope string, j join, need int64) *group {
	g := &group{s: s, key: key, scope: scope, name: j.key, n: j.members, part: j.part, window: j.window, reserved: need,
		conns: make([]*sconn, j.members), handles: make([]uint32, j.members), sent: make([]uint64, j.members),
		slots: make([]slot, j.window)}
	for i := range g.slots {
		g.slots[i].pending = make([][]byte, j.members)
	}
	return g
}

func (g *group) getBuf() []byte {
	if n := len(g.free); n > 0 {
		b := g.free[n-1]
		g.free = g.free[:n-1]
		return b
	}
	if g.nbuf >= g.n*g.window+2*g.window {
		return nil
	}
	g.nbuf++
	return make([]byte, g.part)
}

func (g *group) putBuf(b []byte) {
	if !g.over && b != nil {
		g.free = append(g.free, b[:g.part])
	}
}

func (g *group) getAcc() []byte {
	if n := len(g.accFree); n > 0 {
		b := g.accFree[n-1]
		g.accFree = g.accFree[:n-1]
		return b
	}
	if g.nacc >= 4*g.window {
		return nil
	}
	g.nacc++
	return make([]byte, 2*g.part)
}

func (g *group) putAcc(b []byte) {
	if !g.over && b != nil {
		g.accFree = append(g.accFree, b[:2*g.part])
	}
}

// data receives member m's next part (header h, payload in r) and adds
// what it can. It returns an error only when r fails; a member that breaks
// the protocol ends the group.
func (g *group) data(m int, h header, r io.Reader) error {
	g.mu.Lock()
	if g.over {
		g.mu.Unlock()
		_, err := io.CopyN(io.Discard, r, int64(h.length))
		return err
	}
	gp := g.sent[m]
	sl := &g.slots[gp%uint64(g.window)]
	bad := ""
	switch {
	case g.left > 0:
		bad = fmt.Sprintf("member %d sent data after another member left the group", m)
	case int(h.length) > g.part:
		bad = fmt.Sprintf("member %d sent a part of %d bytes, more than the group's partition of %d", m, h.length, g.part)
	case sl.used && sl.gpart != gp:
		bad = fmt.Sprintf("member %d sent more than its window of %d parts ahead", m, g.window)
	case sl.used && (sl.seq != h.seq || sl.part != h.part || sl.parts != h.parts || sl.code != h.code || sl.length != int(h.length)):
		hd, hop := codeOf(h.code)
		bad = fmt.Sprintf("members disagree: member %d sent call %d part %d of %d, %v %v, %d bytes where another sent call %d part %d of %d, %v %v, %d bytes",
			m, h.seq, h.part, h.parts, hd, hop, h.length, sl.seq, sl.part, sl.parts, sl.d, sl.op, sl.length)
	}
	var buf []byte
	if bad == "" {
		if buf = g.getBuf(); buf == nil {
			bad = fmt.Sprintf("member %d overran the group's buffers", m)
		}
	}
	g.mu.Unlock()
	if bad != "" {
		g.abort(bad)
		_, err := io.CopyN(io.Discard, r, int64(h.length))
		return err
	}
	buf = buf[:h.length]
	if _, err := io.ReadFull(r, buf); err != nil {
		return err
	}
	g.s.st.bytesIn.Add(int64(h.length))

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.over {
		return nil
	}
	g.sent[m]++
	if !sl.used {
		d, op := codeOf(h.code)
		*sl = slot{used: true, gpart: gp, seq: h.seq, part: h.part, parts: h.parts, code: h.code, d: d, op: op, length: int(h.length), pending: sl.pending, t0: time.Now()}
		clear(sl.pending)
	}
	sl.pending[m] = buf
	for sl.next < g.n && sl.pending[sl.next] != nil {
		op := sl.pending[sl.next]
		sl.pending[sl.next] = nil
		if sl.next == 0 {
			if sl.acc = g.getAcc(); sl.acc == nil {
				g.putBuf(op)
				g.mu.Unlock()
				g.abort("the group ran out of accumulators")
				g.mu.Lock()
				return nil
			}
			accFirst(sl.d, sl.acc, op)
		} else {
			accAdd(sl.d, sl.op, sl.acc, op)
		}
		g.putBuf(op)
		sl.next++
	}
	if sl.next < g.n {
		return nil
	}
	// Every operand is in: send the sum to every member.
	var res, acc []byte
	if isHalf(sl.d) {
		res = g.getBuf()
		if res == nil {
			g.mu.Unlock()
			g.abort("the group ran out of buffers")
			g.mu.Lock()
			return nil
		}
		res = accResult(sl.d, sl.acc, res, sl.length)
		g.putAcc(sl.acc)
	} else {
		acc = sl.acc
		res = accResult(sl.d, sl.acc, nil, sl.length)
	}
	refs := g.n
	release := func() {
		g.mu.Lock()
		if refs--; refs == 0 {
			if acc != nil {
				g.putAcc(acc)
			} else {
				g.putBuf(res)
			}
		}
		g.mu.Unlock()
	}
	hdr := header{typ: tResult, code: sl.code, part: sl.part, parts: sl.parts, seq: sl.seq}
	g.s.st.parts.Add(1)
	if sl.part == sl.parts-1 {
		g.s.st.calls.Add(1)
	}
	g.s.st.latNanos.Add(int64(time.Since(sl.t0)))
	g.s.st.latCount.Add(1)
	sl.used, sl.acc, sl.next = false, nil, 0
	conns, handles := slices.Clone(g.conns), slices.Clone(g.handles)
	g.mu.Unlock()
	for i, c := range conns {
		if c == nil {
			release()
			continue
		}
		h := hdr
		h.handle = handles[i]
		c.send(h, res, release)
	}
	g.mu.Lock()
	return nil
}

// abort ends the group: every member still connected hears why, and the
// group's memory is released.
func (g *group) abort(why string) {
	g.mu.Lock()
	if g.over {
		g.mu.Unlock()
		return
	}
	g.over = true
	conns, handles := slices.Clone(g.conns), slices.Clone(g.handles)
	g.free, g.accFree = nil, nil
	for i := range g.slots {
		g.slots[i] = slot{}
	}
	g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
	g.s.st.aborted.Add(1)
	g.s.cfg.Log.Printf("group %q of job %q ended: %s", g.name, strings.SplitN(g.scope, "\x00", 2)[1], why)
	for i, c := range conns {
		if c != nil {
			c.qmu.Lock()
			delete(c.handle, handles[i])
			c.qmu.Unlock()
			c.send(header{typ: tAbort, handle: handles[i]}, []byte(why), nil)
		}
	}
	g.s.release(g)
}

// lost is called when member m's connection is gone.
func (g *group) lost(m int, why string) {
	g.mu.Lock()
	g.conns[m] = nil
	g.mu.Unlock()
	g.abort(why)
}

// leave is member m leaving the group in good order: once every member
// has left, the group is gone; a member that leaves while the others may
// still send ends it for them.
func (g *group) leave(m int) {
	g.mu.Lock()
	if g.over {
		g.mu.Unlock()
		return
	}
	g.conns[m] = nil
	g.left++
	all := g.left == g.n
	busy := false
	for i := range g.slots {
		busy = busy || g.slots[i].used
	}
	g.mu.Unlock()
	switch {
	case all:
		g.mu.Lock()
		g.over = true
		g.free, g.accFree = nil, nil
		g.mu.Unlock()
		if g.timer != nil {
			g.timer.Stop()
		}
		g.s.release(g)
	case busy:
		g.abort(fmt.Sprintf("member %d left in the middle of a call", m))
	}
}
