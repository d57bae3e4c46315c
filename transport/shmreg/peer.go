package shmreg

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peer is another process's pool, opened by a reader, with the reader's
// registration cache of its allocations. Its methods are safe for
// concurrent use.
type Peer struct {
	mu    sync.Mutex
	fd    int
	path  string
	hdr   []byte
	table []uint64
	frees *uint64
	seen  uint64 // the peer's count of frees at the last sweep
	cache map[uint32]*entry
	stats Stats
}

type entry struct {
	ref Ref
	mem []byte
}

// Stats counts what a Peer's cache did.
type Stats struct {
	Entries int // mappings held now
	Maps    int // allocations mapped
	Unmaps  int // mappings dropped: freed (or replaced) by their owner
	Hits    int // lookups that found their mapping
}

// ErrAuth is returned by Open for a pool made with another job's secret.
var ErrAuth = errors.New("shmreg: the pool was made with another job secret")

// Open opens the pool file at path that Create made with the same secret,
// and counts this reader in its header: the last of the readers the owner
// expects unlinks the file.
func Open(path string, secret []byte) (*Peer, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("shmreg: open %s: %w", path, err)
	}
	fail := func(err error) (*Peer, error) {
		unix.Close(fd)
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(fmt.Errorf("shmreg: stat %s: %w", path, err))
	}
	if st.Size < HeaderSize {
		return fail(fmt.Errorf("shmreg: %s has %d bytes, less than a pool's header", path, st.Size))
	}
	hdr, err := unix.Mmap(fd, 0, HeaderSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("shmreg: map %s: %w", path, err))
	}
	if atomic.LoadUint64(u64(hdr[hdrMagic:])) != poolMagic || *u64(hdr[hdrVersion:]) != version {
		unix.Munmap(hdr)
		return fail(fmt.Errorf("shmreg: %s is not a pool of this version", path))
	}
	if [16]byte(hdr[hdrSecret:hdrSecret+16]) != secretHash(secret) {
		unix.Munmap(hdr)
		return fail(fmt.Errorf("%w: %s", ErrAuth, path))
	}
	if atomic.AddUint64(u64(hdr[hdrOpened:]), 1) == *u64(hdr[hdrReaders:]) {
		unix.Unlink(path)
	}
	p := &Peer{fd: fd, path: path, hdr: hdr, cache: map[uint32]*entry{},
		table: unsafe.Slice((*uint64)(unsafe.Pointer(&hdr[tableOff])), MaxAllocs),
		frees: u64(hdr[hdrFrees:])}
	p.seen = atomic.LoadUint64(p.frees)
	return p, nil
}

// Get returns the memory of the peer's allocation r (r.Size bytes, read
// only), mapped here. It maps r on its first use and reuses the mapping
// while the peer publishes the same generation for r's id; a Ref of
// another generation (the peer freed the allocation and made another with
// that id) replaces the mapping. It fails with a StaleError if the peer's
// table does not give r's id r's generation: the peer does not hold r.
func (p *Peer) Get(r Ref) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return nil, errors.New("shmreg: the peer's pool is closed here")
	}
	if f := atomic.LoadUint64(p.frees); f != p.seen {
		p.seen = f
		p.sweep()
	}
	if e := p.cache[r.ID]; e != nil {
		if e.ref == r {
			p.stats.Hits++
			return e.mem, nil
		}
		p.drop(r.ID, e)
	}
	if r.ID >= MaxAllocs || r.Gen == 0 || r.Base < HeaderSize || r.Base%pageSize != 0 ||
		r.Size == 0 || r.Size%pageSize != 0 || r.Base+r.Size > maxFile || r.Base+r.Size < r.Base {
		return nil, fmt.Errorf("shmreg: %s: malformed reference %+v", p.path, r)
	}
	if g := atomic.LoadUint64(&p.table[r.ID]); g != r.Gen {
		return nil, &StaleError{Ref: r, Holds: g}
	}
	var st unix.Stat_t
	if err := unix.Fstat(p.fd, &st); err != nil {
		return nil, fmt.Errorf("shmreg: stat %s: %w", p.path, err)
	}
	if uint64(st.Size) < r.Base+r.Size {
		return nil, fmt.Errorf("shmreg: %s has %d bytes, allocation %d ends at %d", p.path, st.Size, r.ID, r.Base+r.Size)
	}
	mem, err := unix.Mmap(p.fd, int64(r.Base), int(r.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shmreg: mapping allocation %d (%d bytes) of %s: %w", r.ID, r.Size, p.path, err)
	}
	p.cache[r.ID] = &entry{ref: r, mem: mem}
	p.stats.Maps++
	return mem, nil
}

// sweep drops the mappings of allocations the peer has freed (under mu).
func (p *Peer) sweep() {
	for id, e := range p.cache {
		if atomic.LoadUint64(&p.table[id]) != e.ref.Gen {
			p.drop(id, e)
		}
	}
}

func (p *Peer) drop(id uint32, e *entry) {
	unix.Munmap(e.mem)
	delete(p.cache, id)
	p.stats.Unmaps++
}

// Stats returns what the cache did so far.
func (p *Peer) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Entries = len(p.cache)
	return s
}

// Close unmaps everything the reader mapped of the peer's pool and closes
// the file. No memory that Get returned may be used after.
func (p *Peer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return nil
	}
	for id, e := range p.cache {
		p.drop(id, e)
	}
	unix.Munmap(p.hdr)
	err := unix.Close(p.fd)
	p.fd = -1
	return err
}
