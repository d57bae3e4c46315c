package shmreg

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The pool file's header.
const (
	hdrMagic   = 0
	hdrVersion = 8
	hdrPID     = 16
	hdrReaders = 24 // how many peers the owner expects to open the pool
	hdrSecret  = 32 // 16 bytes
	hdrOpened  = 64 // own line: how many peers opened the pool (added to by them)
	hdrFrees   = 128
	tableOff   = 4096 // the generation of each id's allocation, 8 bytes an id

	// HeaderSize is the size of a pool file's header; the allocations
	// follow it.
	HeaderSize = 64 << 10
	// MaxAllocs is the most allocations a pool holds at once.
	MaxAllocs = 4096

	pageSize  = 4096
	poolMagic = 0x4745524449415242 // "BRAIDREG"
	version   = 1
	// maxFile bounds the file offsets a reader accepts in a Ref.
	maxFile = 1 << 46
)

// Ref names one allocation of a pool: what its owner publishes so that a
// reader can map it.
type Ref struct {
	ID   uint32 // the allocation's slot in its pool's table
	Gen  uint64 // its generation: never zero, never handed out twice by a pool
	Base uint64 // its first byte's offset in the pool's file (zero in Go memory)
	Size uint64 // its bytes (whole pages in a file)
}

// ErrInUse is returned by Free for an allocation that a collective has
// pinned as its input.
var ErrInUse = errors.New("shmreg: the buffer is in use by a collective call")

// ErrNotAllocated is returned by Free for memory that is not the start of a
// live allocation of the pool.
var ErrNotAllocated = errors.New("shmreg: not the start of a live allocation (never allocated, or freed already)")

// StaleError reports a Ref whose allocation its pool no longer holds.
type StaleError struct {
	Ref   Ref
	Holds uint64 // the generation the pool's slot holds now (zero: free)
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("shmreg: allocation %d generation %d is not live (its slot holds generation %d)", e.Ref.ID, e.Ref.Gen, e.Holds)
}

// Pool is one process's registered memory in one job. Its methods are safe
// for concurrent use.
type Pool struct {
	mu      sync.Mutex
	fd      int    // the pool's file; -1 for Go memory or once closed
	path    string // "" for Go memory
	hdr     []byte // the file's header, mapped; nil for Go memory
	table   []uint64
	frees   *uint64
	readers int
	spans   []span // free ranges of the file below end, by offset
	end     uint64
	gen     uint64
	live    int
	file    bool // a file pool (Create), not Go memory
	closed  bool

	everyone atomic.Bool // every reader opened the file (Shared)
	slots    [MaxAllocs]atomic.Pointer[alloc]
	byAddr   atomic.Pointer[[]*alloc] // the live allocations by address, for Find
}

type alloc struct {
	ref  Ref
	mem  []byte // the owner's memory: its mapping of the range, or Go memory
	addr uintptr
	pins atomic.Int32
	dead atomic.Bool
}

type span struct{ off, size uint64 }

func secretHash(secret []byte) [16]byte {
	h := sha256.Sum256(append([]byte("braid-shmreg\x00"), secret...))
	return [16]byte(h[:16])
}

func u64(b []byte) *uint64 { return (*uint64)(unsafe.Pointer(&b[0])) }

// NewMem returns a pool in Go memory, for ranks that are goroutines of this
// process: a reader reaches it through Get.
func NewMem() *Pool {
	p := &Pool{fd: -1, table: make([]uint64, MaxAllocs), frees: new(uint64)}
	return p
}

// Create makes a pool file in dir ("" means /dev/shm) that readers peers
// are expected to open: the last of them to open it unlinks it. It first
// removes the pool files that dead processes of this PID namespace left
// in dir.
func Create(dir string, secret []byte, readers int) (*Pool, error) {
	if dir == "" {
		dir = "/dev/shm"
	}
	if readers < 0 {
		return nil, fmt.Errorf("shmreg: %d readers", readers)
	}
	ReapStale(dir)
	var rnd [6]byte
	if _, err := unix.Getrandom(rnd[:], 0); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, poolName(os.Getpid(), pidNS(), rnd))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shmreg: create %s: %w", path, err)
	}
	fail := func(what string, err error) (*Pool, error) {
		unix.Close(fd)
		unix.Unlink(path)
		return nil, fmt.Errorf("shmreg: %s %s: %w", what, path, err)
	}
	if err := allocate(fd, 0, HeaderSize); err != nil {
		return fail("allocate the header of", err)
	}
	hdr, err := unix.Mmap(fd, 0, HeaderSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map", err)
	}
	*u64(hdr[hdrVersion:]) = version
	*u64(hdr[hdrPID:]) = uint64(os.Getpid())
	*u64(hdr[hdrReaders:]) = uint64(readers)
	h := secretHash(secret)
	copy(hdr[hdrSecret:hdrSecret+16], h[:])
	atomic.StoreUint64(u64(hdr[hdrMagic:]), poolMagic)
	p := &Pool{fd: fd, path: path, hdr: hdr, readers: readers, end: HeaderSize, file: true,
		table: unsafe.Slice((*uint64)(unsafe.Pointer(&hdr[tableOff])), MaxAllocs),
		frees: u64(hdr[hdrFrees:])}
	if readers == 0 {
		unix.Unlink(path)
	}
	return p, nil
}

// allocate gives the file [off, off+size) its pages, or, where the file
// system cannot (not tmpfs), at least the size.
func allocate(fd int, off, size int64) error {
	err := unix.Fallocate(fd, 0, off, size)
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Size >= off+size {
		return nil
	}
	return unix.Ftruncate(fd, off+size)
}

// Path returns the pool file's path ("" for Go memory). Readers pass it to
// Open; it may be unlinked already.
func (p *Pool) Path() string { return p.path }

// InMemory reports whether the pool is Go memory (NewMem).
func (p *Pool) InMemory() bool { return p.path == "" }

// Shared reports whether every reader the pool was made for has opened it
// (always for Go memory): only then may its owner publish Refs to them.
func (p *Pool) Shared() bool {
	if !p.file || p.everyone.Load() {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || atomic.LoadUint64(u64(p.hdr[hdrOpened:])) < uint64(p.readers) {
		return false
	}
	p.everyone.Store(true)
	return true
}

// Live returns the number of live allocations.
func (p *Pool) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// Alloc returns n bytes (n > 0) of new memory, zeroed, aligned to a page in
// a file pool. It fails if the pool holds MaxAllocs allocations, or if the
// file system has no room for the pages (ENOSPC). The memory is valid until
// Free.
func (p *Pool) Alloc(n int) ([]byte, error) {
	if n <= 0 || uint64(n) > maxFile/2 {
		return nil, fmt.Errorf("shmreg: allocation of %d bytes", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("shmreg: the pool is closed")
	}
	id := -1
	for i := range p.slots {
		if p.slots[i].Load() == nil {
			id = i
			break
		}
	}
	if id < 0 {
		return nil, fmt.Errorf("shmreg: %d allocations are live: free some first", MaxAllocs)
	}
	a := &alloc{}
	if !p.file {
		size := (uint64(n) + 63) &^ 63
		words := make([]uint64, size/8)
		a.mem = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), size)
		a.ref = Ref{ID: uint32(id), Size: size}
	} else {
		size := (uint64(n) + pageSize - 1) &^ (pageSize - 1)
		base := p.take(size)
		if err := allocate(p.fd, int64(base), int64(size)); err != nil {
			p.give(base, size)
			return nil, fmt.Errorf("shmreg: allocating %d bytes in %s: %w", size, p.path, err)
		}
		mem, err := unix.Mmap(p.fd, int64(base), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			p.punch(base, size)
			p.give(base, size)
			return nil, fmt.Errorf("shmreg: mapping %d bytes of %s: %w", size, p.path, err)
		}
		a.mem = mem
		a.ref = Ref{ID: uint32(id), Base: base, Size: size}
	}
	p.gen++
	a.ref.Gen = p.gen
	a.addr = uintptr(unsafe.Pointer(&a.mem[0]))
	atomic.StoreUint64(&p.table[id], a.ref.Gen)
	p.slots[id].Store(a)
	p.live++
	p.index()
	return a.mem[:n:n], nil
}

// Free releases the allocation that starts where b does: its memory must
// not be used after. It fails with ErrInUse while a collective has it
// pinned, and with ErrNotAllocated for anything else than the start of a
// live allocation.
func (p *Pool) Free(b []byte) error {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.at(addr)
	if a == nil || a.addr != addr {
		return ErrNotAllocated
	}
	a.dead.Store(true)
	if a.pins.Load() > 0 {
		a.dead.Store(false)
		return ErrInUse
	}
	id := a.ref.ID
	p.slots[id].Store(nil)
	// The slot's generation goes before the count of frees moves: a
	// reader that sees the new count sees the slot free.
	atomic.StoreUint64(&p.table[id], 0)
	atomic.AddUint64(p.frees, 1)
	p.live--
	p.index()
	if p.file {
		unix.Munmap(a.mem)
		if p.fd >= 0 {
			p.punch(a.ref.Base, a.ref.Size)
			p.give(a.ref.Base, a.ref.Size)
		}
		if p.closed && p.live == 0 && p.hdr != nil {
			unix.Munmap(p.hdr)
			p.hdr, p.table, p.frees = nil, make([]uint64, MaxAllocs), new(uint64)
		}
	}
	return nil
}

// Find reports whether b lies whole in a live allocation, and returns the
// allocation's Ref and b's offset in it. A found allocation is pinned:
// Free fails until Unpin.
func (p *Pool) Find(b []byte) (r Ref, off uint64, ok bool) {
	if len(b) == 0 {
		return Ref{}, 0, false
	}
	addr := uintptr(unsafe.Pointer(&b[0]))
	a := p.at(addr)
	if a == nil || addr+uintptr(len(b)) > a.addr+uintptr(len(a.mem)) {
		return Ref{}, 0, false
	}
	// Pin, then look: Free marks dead, then looks at the pins, so one of
	// the two sees the other.
	a.pins.Add(1)
	if a.dead.Load() {
		a.pins.Add(-1)
		return Ref{}, 0, false
	}
	return a.ref, uint64(addr - a.addr), true
}

// Unpin releases a pin that Find took.
func (p *Pool) Unpin(r Ref) {
	if r.ID >= MaxAllocs {
		return
	}
	if a := p.slots[r.ID].Load(); a != nil && a.ref == r {
		a.pins.Add(-1)
	}
}

// Get returns the memory of the allocation r names, if the pool holds it
// now (a StaleError otherwise): how goroutine ranks read each other's
// pools in Go memory.
func (p *Pool) Get(r Ref) ([]byte, error) {
	if r.ID >= MaxAllocs {
		return nil, fmt.Errorf("shmreg: allocation id %d out of range", r.ID)
	}
	a := p.slots[r.ID].Load()
	if a == nil || a.ref != r {
		return nil, &StaleError{Ref: r, Holds: atomic.LoadUint64(&p.table[r.ID])}
	}
	return a.mem, nil
}

// at returns the live allocation with the greatest address not above
// addr, or nil.
func (p *Pool) at(addr uintptr) *alloc {
	s := p.byAddr.Load()
	if s == nil {
		return nil
	}
	as := *s
	lo, hi := 0, len(as)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if as[m].addr <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return nil
	}
	return as[lo-1]
}

// index publishes a new list of the live allocations by address (under mu).
func (p *Pool) index() {
	as := make([]*alloc, 0, p.live)
	for i := range p.slots {
		if a := p.slots[i].Load(); a != nil {
			as = append(as, a)
		}
	}
	for i := 1; i < len(as); i++ {
		for j := i; j > 0 && as[j].addr < as[j-1].addr; j-- {
			as[j], as[j-1] = as[j-1], as[j]
		}
	}
	p.byAddr.Store(&as)
}

// take returns the offset of a free range of size bytes (under mu):
// the first free span that fits, else the end of the file.
func (p *Pool) take(size uint64) uint64 {
	for i, s := range p.spans {
		if s.size >= size {
			if s.size == size {
				p.spans = append(p.spans[:i], p.spans[i+1:]...)
			} else {
				p.spans[i] = span{s.off + size, s.size - size}
			}
			return s.off
		}
	}
	off := p.end
	p.end += size
	return off
}

// give returns a range to the free spans, merging it with its neighbours
// (under mu).
func (p *Pool) give(off, size uint64) {
	i := 0
	for i < len(p.spans) && p.spans[i].off < off {
		i++
	}
	p.spans = append(p.spans, span{})
	copy(p.spans[i+1:], p.spans[i:])
	p.spans[i] = span{off, size}
	if i+1 < len(p.spans) && p.spans[i].off+p.spans[i].size == p.spans[i+1].off {
		p.spans[i].size += p.spans[i+1].size
		p.spans = append(p.spans[:i+1], p.spans[i+2:]...)
	}
	if i > 0 && p.spans[i-1].off+p.spans[i-1].size == p.spans[i].off {
		p.spans[i-1].size += p.spans[i].size
		p.spans = append(p.spans[:i], p.spans[i+1:]...)
	}
	if last := p.spans[len(p.spans)-1]; last.off+last.size == p.end {
		p.end = last.off
		p.spans = p.spans[:len(p.spans)-1]
	}
}

// punch gives a range's pages back to the file system; readers that still
// map it keep the mapping but no memory.
func (p *Pool) punch(off, size uint64) {
	unix.Fallocate(p.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(size))
}

// Unlink removes the pool's file if it is still there: readers that have
// opened it keep it.
func (p *Pool) Unlink() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.path != "" {
		unix.Unlink(p.path)
	}
}

// Close unlinks the pool's file and closes it. Live allocations stay
// mapped, and valid, until Free; Alloc fails from now on.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if !p.file {
		return nil
	}
	unix.Unlink(p.path)
	err := unix.Close(p.fd)
	p.fd = -1
	if p.live == 0 {
		unix.Munmap(p.hdr)
		p.hdr, p.table, p.frees = nil, make([]uint64, MaxAllocs), new(uint64)
	}
	return err
}
