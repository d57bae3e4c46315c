package shmcoll

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/internal/par"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/shmreg"
)

// Single copy from registered memory. A writer whose input of a call lies
// in registered memory (package shmreg) that every rank of the group can
// map publishes, for each chunk, where the input lies instead of copying
// it into its slot: the input flag line carries the allocation's Ref and
// the input's offset in it in place of inline data, with flagDirect set in
// its length word. The readers read (and reduce) the chunk straight from
// the writer's memory, mapped through their registration cache. The
// writer does not return before every rank has finished reading its last
// such chunk (endDirect), so that the caller may then reuse or free its
// buffer. Whether to publish by reference is each writer's own decision,
// chunk by chunk: a reader takes either form.
//
// Allgather, ReduceScatter, Bcast (the root), and the two-phase chunks of
// Allreduce and Reduce publish by reference; the one-phase chunks of
// Allreduce and Reduce, and the arrival-aware reductions, always copy.

// Memory is how a group reaches registered memory.
type Memory interface {
	// Find reports whether b lies whole in this rank's registered memory
	// that every rank of the group can map, and where: the allocation and
	// b's offset in it. A found allocation is pinned (its owner cannot
	// free it) until Unpin.
	Find(b []byte) (r shmreg.Ref, off uint64, ok bool)
	// Unpin releases what Find pinned.
	Unpin(r shmreg.Ref)
	// Map returns rank q's allocation r (r.Size bytes) as this process
	// sees it, after checking that q holds r now (its generation); the
	// memory is only read. It is safe for concurrent use.
	Map(q int, r shmreg.Ref) ([]byte, error)
}

// DefaultDirectMin is the smallest chunk (the bytes a writer publishes for
// it) that a writer publishes by reference: below, the copy into its slot
// costs less than the wait for the readers at the end of the call.
const DefaultDirectMin = 16 << 10

// flagDirect, in an input flag line's length word, says that the chunk is
// published by reference.
const flagDirect = 1 << 31

// Where an input flag line of a chunk published by reference holds the
// Ref and the offset of the writer's input in the allocation.
const (
	dirID   = flagBytes
	dirGen  = flagBytes + 8
	dirBase = flagBytes + 16
	dirSize = flagBytes + 24
	dirOff  = flagBytes + 32
)

var _ [flagArrive - dirOff - 8]byte // the reference fits before the arrival stamp

// errorDrain bounds how long a failed call waits for the readers of its
// input published by reference.
const errorDrain = 250 * time.Millisecond

// SetMemory gives the group registered memory, with chunks of at least
// min bytes published by reference (0 means DefaultDirectMin, a negative
// min never). Call it before the group's first collective.
func (g *Group) SetMemory(m Memory, min int) {
	if min == 0 {
		min = DefaultDirectMin
	}
	g.mem, g.directMin = m, min
}

// DirectStats returns how many chunks this rank published by reference
// and how many it read from another rank's registered memory.
func (g *Group) DirectStats() (published, read uint64) {
	return g.published.Load(), g.readDirect.Load()
}

// directIn is the writer's side of the current call.
type directIn struct {
	ok   bool
	ref  shmreg.Ref
	off  uint64 // the offset of the call's input in the allocation
	last uint64 // the last chunk published by reference
	cma  bool   // by its address in this process instead (cma.go)
	addr uint64 // the address of the call's input, if cma
}

// startDirect looks for the call's input in registered memory; whole is
// the bytes of every rank's input of the call, which readers of chunks
// published by reference check the reference against. byAddr says that
// the readers copy the input out unchanged (a broadcast, an allgather), so
// that it may be published by its address where it is not registered
// (cma.go).
func (g *Group) startDirect(c *Call, in []byte, whole int, byAddr bool) {
	c.whole = whole
	if g.n == 1 || len(in) == 0 {
		return
	}
	if g.mem != nil && g.directMin >= 0 && len(in) >= g.directMin {
		if r, off, ok := g.mem.Find(in); ok {
			g.dir = directIn{ok: true, ref: r, off: off}
			return
		}
	}
	if byAddr && g.ByAddress(len(in)) && g.cmaOn() {
		g.dir = directIn{ok: true, cma: true, addr: uint64(uintptr(unsafe.Pointer(&in[0])))}
	}
}

// direct reports whether this rank publishes a chunk of nbytes by
// reference.
func (g *Group) direct(nbytes int) bool {
	switch {
	case !g.dir.ok || nbytes <= 0:
		return false
	case g.dir.cma:
		return nbytes >= g.cmaMin
	}
	return nbytes >= g.directMin
}

// commitDirect publishes chunk f, of nbytes, by reference to the call's
// input.
func (g *Group) commitDirect(f uint64, sig uint32, nbytes int) {
	l := g.flag(g.rank, slotIn, f)
	g.dir.last, g.lastPub = f, f
	g.published.Add(1)
	if g.dir.cma {
		*u64(l[dirBase:]) = g.dir.addr
		*u64(l[flagArrive:]) = g.stamp
		g.publishLine(l, f, sig, uint32(nbytes)|flagDirect|flagCMA)
		return
	}
	r := g.dir.ref
	*u32(l[dirID:]) = r.ID
	*u64(l[dirGen:]) = r.Gen
	*u64(l[dirBase:]) = r.Base
	*u64(l[dirSize:]) = r.Size
	*u64(l[dirOff:]) = g.dir.off
	*u64(l[flagArrive:]) = g.stamp
	g.publishLine(l, f, sig, uint32(nbytes)|flagDirect)
}

// input is one rank's input of a chunk as a reader finds it: the chunk's
// bytes in the writer's slot (or flag line), the writer's whole input of
// the call in its registered memory, or the address of its whole input in
// its process (byAddr: copyOut reads it, at does not).
type input struct {
	slot   []byte
	all    []byte
	byAddr bool
	q      int    // the writer, if byAddr
	addr   uint64 // the address of its whole input, if byAddr
}

// copyOut copies the input into dst (total bytes of output, for
// par.CopyOut): from slotLo in the slot, or from allLo in the whole input,
// in memory or in the writer's process.
func (g *Group) copyOut(c *Call, f uint64, s input, dst []byte, slotLo, allLo, total int) error {
	if !s.byAddr {
		par.CopyOut(dst, s.at(slotLo, allLo, len(dst)), total)
		return nil
	}
	if err := g.copyFrom(s.q, dst, s.addr+uint64(allLo)); err != nil {
		return &DirectError{Peer: s.q, Chunk: f - c.chunk0, ByAddr: true, Err: err}
	}
	return nil
}

// at returns n bytes of the input: from slotLo in the slot, or from allLo
// in the whole input.
func (s input) at(slotLo, allLo, n int) []byte {
	if s.all != nil {
		return s.all[allLo : allLo+n]
	}
	return s.slot[slotLo : slotLo+n]
}

// DirectError reports a rank's input published by reference that this
// rank could not read: in its registered memory, or out of its process
// (ByAddr, cma.go).
type DirectError struct {
	Peer   int
	Chunk  uint64 // the call's chunk, counted from 1
	ByAddr bool
	Err    error
}

func (e *DirectError) Error() string {
	where := "in its registered memory"
	if e.ByAddr {
		where = "out of its process (process_vm_readv)"
	}
	return fmt.Sprintf("reading rank %d's input of chunk %d %s: %v", e.Peer, e.Chunk, where, e.Err)
}

func (e *DirectError) Unwrap() error { return e.Err }

// readIn waits for rank q's input of chunk f, nbytes published, and
// returns it wherever its writer put it: in the flag line, in its slot
// where the flag line says (flagPos: see slotAt, part and Bcast), or in its
// registered memory.
func (g *Group) readIn(c *Call, q int, f uint64, nbytes int) (input, error) {
	l, err := g.await(c, q, slotIn, f, nbytes)
	if err != nil {
		return input{}, err
	}
	if *u32(l[flagLen:])&flagDirect == 0 {
		if nbytes <= inline {
			return input{slot: l[flagBytes : flagBytes+nbytes]}, nil
		}
		pos := int(*u32(l[flagPos:]))
		if pos > g.slot-nbytes {
			return input{}, &MismatchError{Peer: q, Sig: *u32(l[flagSig:]), Want: c.Sig}
		}
		return input{slot: g.slotBuf(q, slotIn, int(f&1))[pos : pos+nbytes]}, nil
	}
	if *u32(l[flagLen:])&flagCMA != 0 {
		g.readDirect.Add(1)
		return input{byAddr: true, q: q, addr: *u64(l[dirBase:])}, nil
	}
	fail := func(err error) (input, error) {
		return input{}, &DirectError{Peer: q, Chunk: f - c.chunk0, Err: err}
	}
	if g.mem == nil {
		return fail(fmt.Errorf("this rank has no registered memory"))
	}
	r := shmreg.Ref{ID: *u32(l[dirID:]), Gen: *u64(l[dirGen:]), Base: *u64(l[dirBase:]), Size: *u64(l[dirSize:])}
	off := *u64(l[dirOff:])
	mem, err := g.mem.Map(q, r)
	if err != nil {
		return fail(err)
	}
	if off > uint64(len(mem)) || uint64(c.whole) > uint64(len(mem))-off {
		return fail(fmt.Errorf("an input of %d bytes at %d does not fit its allocation of %d", c.whole, off, len(mem)))
	}
	g.readDirect.Add(1)
	return input{all: mem[off : off+uint64(c.whole)]}, nil
}

// readInMem is readIn for a reader that reduces the input where it lies,
// which it cannot in another process: a chunk published by address (which
// only broadcasts and allgathers publish) is an error there.
func (g *Group) readInMem(c *Call, q int, f uint64, nbytes int) (input, error) {
	s, err := g.readIn(c, q, f, nbytes)
	if err == nil && s.byAddr {
		err = &DirectError{Peer: q, Chunk: f - c.chunk0, ByAddr: true, Err: errReduceByAddr}
	}
	return s, err
}

// endDirect waits until every rank has finished the last chunk this rank
// published by reference, so that its caller may reuse or free the input
// once the call returns, and unpins it. After a failed call it waits at
// most errorDrain: the job is failing, and a rank that waits elsewhere
// will not come.
func (g *Group) endDirect(c *Call, failed bool) error {
	if !g.dir.ok {
		return nil
	}
	d := g.dir
	g.dir = directIn{}
	if !d.cma {
		defer g.mem.Unpin(d.ref)
	}
	f := d.last
	if f == 0 || g.known >= f {
		return nil
	}
	what := "the end of its reading of this rank's registered buffer"
	if d.cma {
		what = "the end of its reading of this rank's buffer (single copy)"
	}
	var bo transport.Backoff
	t0 := time.Now()
	low := ^uint64(0)
	for q := range g.n {
		if q == g.rank {
			continue
		}
		done := u64(g.line(q, lineDone))
		if c.wake != nil {
			c.recheck = reached(done, f)
		}
		v := atomic.LoadUint64(done)
		for v < f {
			if failed {
				if time.Since(t0) > errorDrain {
					return nil
				}
				bo.Idle(nil)
			} else if err := c.idle(q, what, f-c.chunk0); err != nil {
				return err
			}
			v = atomic.LoadUint64(done)
		}
		c.arrived()
		low = min(low, v)
	}
	g.known = max(g.known, low)
	return nil
}

// overlaps reports whether a and b share a byte.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}
