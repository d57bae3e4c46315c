package braid

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/braid-ccl/braid/bootstrap"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/shmcoll"
	"github.com/braid-ccl/braid/transport/shmreg"
)

// Elem is the element types of the buffers Alloc returns: those of the
// collectives' typed slices.
type Elem interface {
	float32 | float64 | Half | BF16 | int8 | uint8 | int32 | uint32 | int64 | uint64
}

// Alloc returns a buffer of n elements of T, zeroed, in memory registered
// with c's job: memory that the job's other ranks on this host can read
// directly. A collective that runs through the host's shared area
// (algorithm "shm") reads a rank's input where it lies in such a buffer,
// and reduces it from there, instead of having the rank copy it into the
// area first: a single copy, where a plain slice costs two. It is Braid's
// counterpart of NCCL's ncclMemAlloc with a registered window and of MPI's
// MPI_Alloc_mem.
//
// The buffer is an ordinary slice: pass it, or any part of it, as the send
// or receive buffer of any collective on c or on a communicator split from
// c's job. Only the input of a call gains from lying in registered memory
// (allgather, reduce-scatter, bcast at the root, and allreduce and reduce
// above a few KiB: see package transport/shmcoll), and only through the
// shared area; other algorithms treat it as any memory. Whether a rank's
// buffers are registered is that rank's own affair: the ranks of a call
// need not agree on it, nor allocate alike.
//
// Ownership and lifetime: the buffer is the caller's from Alloc until it
// passes it to Free. It is not memory of the Go heap (for a rank with peers
// on its host, a shared mapping of a file under /dev/shm): the garbage
// collector neither moves nor frees it, it stays valid after c is closed,
// until Free, and it must not be touched after Free, which unmaps it. Its
// pages are allocated by Alloc, so a /dev/shm without room fails Alloc
// (with Unsupported, naming ENOSPC), never a later access. The file is
// unlinked as soon as every peer of the host has opened it, and removed by
// the next job on the host if the process dies before. Goroutine ranks
// (NewLocal), a rank with no peer on its host, and a rank whose host could
// not share its pool (logged at BRAID_DEBUG=info) get Go memory from Alloc,
// with the same rules.
//
// Alloc may be called from any goroutine. At most 4096 buffers of a rank
// are live at once.
func Alloc[T Elem](c *Comm, n int) ([]T, error) {
	var z T
	es := int(unsafe.Sizeof(z))
	if n < 0 || n > math.MaxInt/2/es {
		return nil, argError(c.rank, "alloc", "%d elements", n)
	}
	if n == 0 {
		return []T{}, nil
	}
	b, err := c.w.reg.pool.Alloc(n * es)
	if err != nil {
		kind := Unsupported
		if c.w.closed.Load() {
			kind = Aborted
		}
		return nil, &Error{Kind: kind, Rank: c.rank, Call: "alloc", Peer: -1, Err: err}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), nil
}

// Free releases a buffer that Alloc returned: buf is that slice, or any
// slice (or Raw) that starts where it does. It fails with InvalidArgument
// for other memory, for a buffer freed already, and while a collective call
// still reads the buffer. An empty buffer (Alloc of no elements) is freed
// by doing nothing.
func (c *Comm) Free(buf any) error {
	b, _, err := view(buf)
	if err != nil {
		return argError(c.rank, "free", "%v", err)
	}
	if b == nil {
		return nil
	}
	switch err := c.w.reg.pool.Free(b); {
	case errors.Is(err, shmreg.ErrInUse), errors.Is(err, shmreg.ErrNotAllocated):
		return argError(c.rank, "free", "%v", err)
	case err != nil:
		return &Error{Kind: Internal, Rank: c.rank, Call: "free", Peer: -1, Err: err}
	}
	return nil
}

// registry is a world's registered memory: this rank's pool, and the pools
// of its peers on this host that it reads through its registration cache.
type registry struct {
	pool *shmreg.Pool
	// shared says whether the peers can read pool: goroutine ranks always,
	// processes once every peer of the host has opened its file.
	shared func() bool
	peers  []regReader // by world rank; nil where none
}

// regReader is a peer's pool as this rank reads it: *shmreg.Peer (another
// process's file, through the registration cache) or *shmreg.Pool (a
// goroutine rank's).
type regReader interface {
	Get(shmreg.Ref) ([]byte, error)
}

// regDirectMin is the smallest chunk the shared area publishes by
// reference (shmcoll.Group.SetMemory); 0 means shmcoll's default. Tests
// lower it.
var regDirectMin = 0

// memRegistry returns the registry of a rank whose pool is Go memory that
// no process maps.
func memRegistry(size int) *registry {
	return &registry{pool: shmreg.NewMem(), shared: func() bool { return false }, peers: make([]regReader, size)}
}

// localRegistries returns the registries of the goroutine ranks of one
// NewLocal job, which read each other's pools in Go memory.
func localRegistries(n int) []*registry {
	pools := make([]regReader, n)
	regs := make([]*registry, n)
	for r := range regs {
		p := shmreg.NewMem()
		pools[r] = p
		regs[r] = &registry{pool: p, shared: func() bool { return true }, peers: pools}
	}
	return regs
}

// joinRegistry makes this rank's pool file, publishes its path through the
// store, and opens the pools of its peers on this host (local). A pool
// that cannot be made or opened is logged, not fatal: its owner's
// buffers are then Go memory, or copied into the shared area.
func (w *world) joinRegistry(ctx context.Context, store bootstrap.Store, prefix string, local []transport.Endpoint, secret []byte) error {
	reg := &registry{peers: make([]regReader, w.size)}
	key := func(r int) string { return fmt.Sprintf("%s/reg/%d", prefix, r) }
	pool, err := shmreg.Create("", secret, len(local))
	v := "err "
	if err != nil {
		v += err.Error()
		w.debugf("info", "no registered memory shared with the host's peers (%v): Alloc gives Go memory", err)
		reg.pool, reg.shared = shmreg.NewMem(), func() bool { return false }
	} else {
		v = "ok " + pool.Path()
		reg.pool, reg.shared = pool, pool.Shared
	}
	w.reg = reg
	w.closers = append(w.closers, reg.close)
	if err := store.Set(ctx, key(w.rank), []byte(v)); err != nil {
		return fmt.Errorf("publishing this rank's registered memory: %w", err)
	}
	for _, e := range local {
		v, err := store.Get(ctx, key(e.Rank))
		if err != nil {
			return fmt.Errorf("waiting for rank %d's registered memory: %w", e.Rank, err)
		}
		path, ok := strings.CutPrefix(string(v), "ok ")
		if !ok {
			continue // logged by its owner
		}
		p, err := shmreg.Open(path, secret)
		if err != nil {
			w.debugf("info", "opening rank %d's registered memory: %v: its buffers are copied into the shared area", e.Rank, err)
			continue
		}
		reg.peers[e.Rank] = p
	}
	return nil
}

// close closes the registry's files: the peers' mappings go, this rank's
// buffers stay until freed.
func (r *registry) close() error {
	for i, p := range r.peers {
		if p, ok := p.(*shmreg.Peer); ok {
			p.Close()
			r.peers[i] = nil
		}
	}
	if !r.pool.InMemory() {
		return r.pool.Close()
	}
	return nil
}

// nodeMemory is a communicator's view of its world's registered memory,
// for its shared area: the area's rank q is world rank members[q].
type nodeMemory struct {
	reg     *registry
	members []int
}

func (m *nodeMemory) Find(b []byte) (shmreg.Ref, uint64, bool) {
	if !m.reg.shared() {
		return shmreg.Ref{}, 0, false
	}
	return m.reg.pool.Find(b)
}

func (m *nodeMemory) Unpin(r shmreg.Ref) { m.reg.pool.Unpin(r) }

func (m *nodeMemory) Map(q int, r shmreg.Ref) ([]byte, error) {
	wr := m.members[q]
	p := m.reg.peers[wr]
	if p == nil {
		return nil, fmt.Errorf("this rank has not opened world rank %d's registered memory", wr)
	}
	return p.Get(r)
}

// setNode gives c the shared area g, reading its world's registered
// memory.
func (c *Comm) setNode(g *shmcoll.Group) {
	c.node = g
	if g != nil && c.w.reg != nil {
		g.SetMemory(&nodeMemory{reg: c.w.reg, members: c.members}, regDirectMin)
	}
}
