package shm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/internal/cma"
	"github.com/braid-ccl/braid/internal/shmfile"
	"github.com/braid-ccl/braid/internal/size"
	"github.com/braid-ccl/braid/transport"
)

// Defaults of Options.
const (
	DefaultRingSize   = 1 << 20
	DefaultEagerLimit = 64 << 10
	DefaultSlots      = 256
	DefaultWatchdog   = 50 * time.Millisecond
	DefaultDir        = "/dev/shm"
)

// EnvCMA is the environment variable that, set to 0, turns single copy off
// as Options.NoCMA does, and set to split turns Options.SplitCMA on.
// Connect reads it.
const EnvCMA = "BRAID_SHM_CMA"

// EnvEager is the environment variable that sets Options.EagerLimit (a
// size: 4096, 16K, 64K), in place of the options' own. Connect reads it;
// ParseEager checks it.
const EnvEager = "BRAID_SHM_EAGER"

// ParseEager parses a value of EnvEager: a size of at least 1 byte and at
// most a quarter of the default ring.
func ParseEager(v string) (int, error) {
	n, err := size.Parse(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %v", EnvEager, v, err)
	}
	if n < 1 || n > DefaultRingSize/4 {
		return 0, fmt.Errorf("%s=%q: want a size from 1 byte to %d KiB (the largest message copied through the ring; larger ones are copied once, out of the sender's memory)", EnvEager, v, DefaultRingSize/4>>10)
	}
	return int(n), nil
}

// Options tunes the shm transport. The zero value means the defaults.
type Options struct {
	// RingSize is the size in bytes of the ring that carries one peer's
	// frames to this rank; it is rounded up to a multiple of 4 KiB, and to
	// 16 KiB at least.
	RingSize int
	// EagerLimit is the largest message copied through the ring when single
	// copy is available; larger ones are copied once, by the receiver, out of
	// the sender's memory. It is at most a quarter of RingSize. Without
	// single copy, messages go through the ring in chunks of
	// max(EagerLimit, min(RingSize/4, 64 KiB)) bytes at most.
	EagerLimit int
	// Slots is the number of rendezvous sends to one peer that may be
	// outstanding at once; further ones wait in Test.
	Slots int
	// NoCMA turns single copy (process_vm_readv) off, as if the kernel
	// refused it.
	NoCMA bool
	// SplitCMA makes a receiver copy a single-copy message of 256 KiB or
	// more (par.MinSize) with several process_vm_readv calls at once, one
	// share of its pages on each of the rank's threads (package par).
	// Off by default: on a 2-core VM, where the peer's poller needs the
	// other core, a ping-pong of 1-4 MiB between processes lost a third
	// to a half of its bandwidth, and 16-64 MiB changed by -20 % to +10 %.
	SplitCMA bool
	// Dir is where segment files are made; it should be a tmpfs.
	Dir string
	// Watchdog is the period at which peers' processes are checked.
	Watchdog time.Duration

	chunk int
}

func (o Options) withDefaults() Options {
	if o.RingSize <= 0 {
		o.RingSize = DefaultRingSize
	}
	o.RingSize = max(roundUp(o.RingSize, pageBytes), 4*pageBytes)
	if o.EagerLimit <= 0 {
		o.EagerLimit = DefaultEagerLimit
	}
	o.EagerLimit = min(o.EagerLimit, o.RingSize/4-hdrSize)
	if o.Slots <= 0 {
		o.Slots = DefaultSlots
	}
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Watchdog <= 0 {
		o.Watchdog = DefaultWatchdog
	}
	o.chunk = max(o.EagerLimit, min(o.RingSize/4-hdrSize, 64<<10))
	return o
}

type shmTransport struct{ opts Options }

// New returns the shm transport with default options.
func New() transport.Transport { return NewWithOptions(Options{}) }

// NewWithOptions returns the shm transport tuned by opts.
func NewWithOptions(opts Options) transport.Transport {
	return &shmTransport{opts: opts.withDefaults()}
}

// Name returns "shm".
func (*shmTransport) Name() string { return "shm" }

// CanConnect reports whether a and b are on the same host.
func (*shmTransport) CanConnect(a, b transport.Endpoint) bool { return a.Host == b.Host }

// Connect makes this rank's segment, publishes it through cfg.Store, maps
// every peer's segment and waits until every peer has mapped this one; then
// it unlinks the segment's file, so that nothing is left behind whatever
// happens later. See transport.Transport.
func (t *shmTransport) Connect(ctx context.Context, cfg transport.Config) (transport.Mesh, error) {
	opts := t.opts
	switch os.Getenv(EnvCMA) {
	case "0":
		opts.NoCMA = true
	case "split":
		opts.SplitCMA = true
	}
	if v := os.Getenv(EnvEager); v != "" {
		n, err := ParseEager(v)
		if err != nil {
			return nil, err
		}
		opts.EagerLimit = n
		opts = opts.withDefaults()
	}
	self := cfg.Self.Rank
	if cfg.Store == nil {
		return nil, fmt.Errorf("shm: rank %d: Config.Store is nil", self)
	}
	size := max(cfg.World, self+1)
	for _, p := range cfg.Peers {
		size = max(size, p.Rank+1)
	}
	m := &mesh{
		rank:    self,
		pid:     os.Getpid(),
		cfg:     cfg,
		opts:    opts,
		conns:   make([]*conn, size),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	for _, p := range cfg.Peers {
		if p.Rank < 0 || p.Rank == self || m.conns[p.Rank] != nil {
			return nil, fmt.Errorf("shm: rank %d: bad or repeated peer rank %d", self, p.Rank)
		}
		m.conns[p.Rank] = &conn{} // placeholder for the check above
	}
	if err := m.connect(ctx); err != nil {
		m.release()
		// A peer killed during Connect leaves its segment: remove it
		// now that its maker is dead, rather than at the next Connect.
		ReapStale(opts.Dir)
		return nil, err
	}
	go m.watch()
	return m, nil
}

// secretHash is what a segment's header holds of the job's secret.
func secretHash(secret []byte) [16]byte {
	h := sha256.Sum256(append([]byte("braid-shm\x00"), secret...))
	return [16]byte(h[:16])
}

func (m *mesh) storeKey(rank int) string { return fmt.Sprintf("%sshm/%d", m.cfg.Prefix, rank) }

// connect does Connect's work; on error the caller releases what it made.
func (m *mesh) connect(ctx context.Context) error {
	cfg, opts := m.cfg, m.opts
	n := len(cfg.Peers)
	l := newLayout(n, opts.Slots, opts.RingSize)
	ReapStale(opts.Dir)
	if err := m.create(l); err != nil {
		return err
	}
	seg := m.seg
	*seg.u32(offVersion) = version
	*seg.u32(offNPeers) = uint32(n)
	*seg.u32(offRank) = uint32(m.rank)
	*seg.u32(offPID) = uint32(m.pid)
	*seg.u64(offRingSize) = uint64(l.ringSize)
	*seg.u32(offNSlots) = uint32(l.nSlots)
	h := secretHash(cfg.Secret)
	copy(seg.mem[offSecret:offSecret+16], h[:])
	for i, p := range cfg.Peers {
		*seg.u32(offPeers + 4*i) = uint32(p.Rank)
	}
	atomic.StoreUint64(seg.u64(offMagic), magic)
	base := uintptr(unsafe.Pointer(&seg.mem[0]))
	val := fmt.Sprintf("%d %d %s", m.pid, base, m.path)
	if err := cfg.Store.Set(ctx, m.storeKey(m.rank), []byte(val)); err != nil {
		return fmt.Errorf("shm: rank %d: publish segment: %w", m.rank, err)
	}
	for i, p := range cfg.Peers {
		c, err := m.mapPeer(ctx, i, p.Rank)
		if err != nil {
			return err
		}
		m.conns[p.Rank] = c
		m.list = append(m.list, c)
	}
	// Every flag we set is in place: tell the peers, then wait for them.
	for _, c := range m.list {
		atomic.StoreUint32(c.peerSeg.u32(c.peerSeg.l.mapped(c.peerIdx)), 1)
		atomic.AddUint64(c.peerSeg.u64(offMapped), 1)
	}
	var b transport.Backoff
	last := time.Now()
	for atomic.LoadUint64(seg.u64(offMapped)) < uint64(n) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("shm: rank %d: waiting for peers to map its segment: %s: %w", m.rank, m.unmapped(), err)
		}
		if time.Since(last) > opts.Watchdog {
			last = time.Now()
			for _, c := range m.list {
				if !c.alive() {
					return fmt.Errorf("shm: rank %d: peer rank %d (pid %d) died during connect: %w", m.rank, c.peer, c.peerPID, transport.ErrPeerLost)
				}
			}
		}
		b.Idle(ctx.Done())
	}
	unix.Unlink(m.path)
	m.path = ""
	for _, c := range m.list {
		c.cma = atomic.LoadUint64(c.out.CMA) == 1
	}
	return nil
}

// unmapped names the peers that have not said that they mapped this
// rank's segment (layout.mapped), for the error of a wait for them: "rank 2
// (pid 4242, stopped) has not". A peer stopped by a signal, which the
// watchdog's liveness check takes for alive, says so.
func (m *mesh) unmapped() string {
	var names []string
	for i, c := range m.list {
		if atomic.LoadUint32(m.seg.u32(m.seg.l.mapped(i))) != 0 {
			continue
		}
		s := fmt.Sprintf("%d (pid %d", c.peer, c.peerPID)
		if st, _, err := procStat(c.peerPID); err == nil && (st == 'T' || st == 't') {
			s += ", stopped"
		}
		names = append(names, s+")")
	}
	switch len(names) {
	case 0:
		return "every peer has said so, but not counted itself yet"
	case 1:
		return "rank " + names[0] + " has not"
	}
	return "ranks " + strings.Join(names, ", ") + " have not"
}

// create makes, sizes and maps this rank's segment file. Its pages are
// allocated here (fallocate), so that a full /dev/shm fails the mesh's
// creation with ENOSPC rather than killing the rank with SIGBUS at its
// first write to a page that tmpfs cannot supply.
func (m *mesh) create(l layout) error {
	var rnd [4]byte
	rand.Read(rnd[:])
	h := fnv.New64a()
	h.Write([]byte(m.cfg.Prefix))
	m.path = filepath.Join(m.opts.Dir, segmentName(h.Sum64(), m.rank, m.pid, pidNS(), rnd))
	mem, err := shmfile.Create(m.path, l.size)
	if err != nil {
		m.path = "" // removed
		return fmt.Errorf("shm: rank %d: segment in %s: %w", m.rank, m.opts.Dir, err)
	}
	m.seg = &segment{mem: mem, l: l}
	return nil
}

// mapPeer maps the segment of peer (our i-th) and makes the conn to it.
func (m *mesh) mapPeer(ctx context.Context, i, peer int) (*conn, error) {
	v, err := m.cfg.Store.Get(ctx, m.storeKey(peer))
	if err != nil {
		return nil, fmt.Errorf("shm: rank %d: look up rank %d: %w", m.rank, peer, err)
	}
	f := strings.SplitN(string(v), " ", 3)
	if len(f) != 3 {
		return nil, fmt.Errorf("shm: rank %d: bad store entry for rank %d: %q", m.rank, peer, v)
	}
	pid, err1 := strconv.Atoi(f[0])
	base, err2 := strconv.ParseUint(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("shm: rank %d: bad store entry for rank %d: %w", m.rank, peer, err)
	}
	path := f[2]
	mem, err := shmfile.Open(path, nil)
	if err != nil {
		return nil, fmt.Errorf("shm: rank %d: segment of rank %d: %w", m.rank, peer, err)
	}
	l, ok := readLayout(mem)
	seg := &segment{mem: mem, l: l}
	c := &conn{m: m, peer: peer, peerPID: pid, peerSeg: seg}
	m.mapped = append(m.mapped, mem)
	if !ok || *seg.u32(offRank) != uint32(peer) || *seg.u32(offPID) != uint32(pid) {
		return nil, fmt.Errorf("shm: rank %d: %s is not the segment of rank %d", m.rank, path, peer)
	}
	if [16]byte(mem[offSecret:offSecret+16]) != secretHash(m.cfg.Secret) {
		return nil, fmt.Errorf("shm: rank %d: segment of rank %d was made with another job secret: %w", m.rank, peer, transport.ErrAuth)
	}
	j := -1
	for k := range l.nPeers {
		if seg.peerRank(k) == m.rank {
			j = k
		}
	}
	if j < 0 {
		return nil, fmt.Errorf("shm: rank %d: rank %d does not list it as a peer", m.rank, peer)
	}
	c.peerIdx = j
	c.in = rx{Ring: m.seg.ring(i)}
	c.out = tx{Ring: seg.ring(j)}
	c.acks = l.slot(j, 0)
	c.mySlots = m.seg.l.slot(i, 0)
	c.unexp = make(map[key]*unexpMsg)
	c.partial = make(map[key]partial)
	c.slots = make([]*sendReq, m.seg.l.nSlots)
	for s := m.seg.l.nSlots - 1; s >= 0; s-- {
		c.freeSlots = append(c.freeSlots, uint32(s))
	}
	if pid != m.pid {
		if _, start, err := procStat(pid); err == nil {
			c.peerStart = start
		}
	}
	// Can we copy out of the peer's memory? Read its segment's magic where
	// the peer has it mapped.
	if !m.opts.NoCMA {
		var probe [8]byte
		if cma.Read(pid, probe[:], base) == nil && *(*uint64)(unsafe.Pointer(&probe[0])) == magic {
			atomic.StoreUint64(c.in.CMA, 1)
		}
	}
	return c, nil
}

// pidNS returns the inode of this process's PID namespace, or 0.
func pidNS() uint64 { return shmfile.PIDNamespace() }

// segmentName is the name of a segment file: the job's prefix hash, the
// rank, and the maker's pid and PID namespace, by which ReapStale judges
// the file without opening it (a rank killed while making it leaves a
// file without a whole header).
func segmentName(prefix uint64, rank, pid int, ns uint64, rnd [4]byte) string {
	return fmt.Sprintf("braid-%016x-%d-p%d-n%d-%x", prefix, rank, pid, ns, rnd)
}

var segmentRe = regexp.MustCompile(`^braid-[0-9a-f]{16}-[0-9]+-p([0-9]+)-n([0-9]+)-[0-9a-f]+$`)

// ReapStale removes the segment files in dir that dead processes of this
// PID namespace made and left: a rank killed during Connect (a launcher's
// death signal does that) leaves its file, since it unlinks it only once
// every peer has mapped it. It judges only files it owns whose name
// names its PID namespace, so that a process it cannot see is never taken
// for dead; a pid that was reused keeps its file, which the next reaper
// judges again. Shared-area files (braid-coll-*) are package shmcoll's.
func ReapStale(dir string) { shmfile.ReapStale(dir, segmentRe) }
