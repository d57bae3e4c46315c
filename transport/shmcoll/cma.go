package shmcoll

import (
	"errors"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/braid-ccl/braid/internal/cma"
)

// Single copy between processes (cross-memory attach). A broadcast's root
// or an allgather's writer whose input is not in registered memory may
// still publish a chunk by reference: its flag line then carries the
// address of its input in its own process, with flagCMA beside flagDirect
// in the length word, and each reader copies the chunk straight into its
// output with process_vm_readv(2) instead of out of the writer's slot.
// The writer skips its copy into the slot and waits, as for registered
// memory, until every rank has read its last such chunk (endDirect). So
// a 2-rank broadcast moves its data once where the slots move it twice,
// as Open MPI's vader does above its eager limit: on the 16-core node a
// 2-rank broadcast of 16–256 KiB through the slots took 1.08–1.27 times
// Open MPI's time (docs/PERFORMANCE.md, session 27).
//
// Only the broadcast and the allgather publish so: their readers copy the
// chunk out unchanged. Where a reduction would read it, the copy into the
// slot is needed anyway (the reader reduces from it), and registered
// memory (direct.go) is the way to a single copy.
//
// Whether a rank may read another's memory is the kernel's decision
// (ptrace access, Yama's ptrace_scope, seccomp). Every rank publishes its
// pid and the address of its mapping of the area in its block (lineCMA);
// at its calls, until it knows, a rank reads the area's magic number out
// of every other rank's process, once all have published, and publishes
// whether it could read them all (every rank tries at its calls, writer
// or not, until it knows). A writer publishes by address only once every
// rank said that it could: each writer decides for itself, and readers
// take either form, so the ranks need not agree on when. Groups out of
// scope (more than CMARanks ranks, CMAMin negative, goroutine ranks)
// never probe.

// lineCMA is the line of a rank's block that says how to read its
// process: its pid, the address of the area's magic in its mapping, a
// word that says the two are there, and whether it could read every other
// rank's process (cmaYes, cmaNo; 0 while it does not know).
const (
	lineCMA  = lineVer + 1
	cmaPID   = 0
	cmaAddr  = 8
	cmaReady = 16
	cmaCan   = 24
	cmaYes   = 1
	cmaNo    = 2
)

var _ = [1]struct{}{}[lineCMA/(dataOff/lineSize)] // before the slots

// flagCMA, with flagDirect in an input flag line's length word, says that
// the chunk is published by its address in the writer's process (at
// dirBase), for readers to copy with process_vm_readv.
const flagCMA = 1 << 30

// errReduceByAddr: a reduction found a chunk published by address, which
// only broadcasts and allgathers publish (their signatures differ, so a
// reader meets one only if the signatures collide).
var errReduceByAddr = errors.New("published by its address in the writer's process, which a reduction does not read: the ranks called with different collectives")

// DefaultCMAMin is the smallest input (a broadcast's, or a rank's block
// of an allgather) that is published by address, cmaMax the largest, and
// DefaultCMARanks the largest group that does it. On the 16-core node
// (session 28, m3, two alternated rounds) 2 ranks allgathered 64 KiB and
// 256 KiB (blocks of 32 and 128 KiB) in 5.1–5.5 and 13.6–13.9 µs by
// address against 7.6–7.7 and 15.4–15.7 through the slots and Bruck's
// (Open MPI 5.5–5.9 and 12.8–16.8), and broadcast 16 KiB in 2.5–2.7
// against 2.8–2.9; but 1 MiB (blocks of 512 KiB) took 123–135 by
// address against Bruck's 58–88 over the shm transport, and a 256 KiB
// broadcast gained nothing (20–22 against binomial's 17–21). On 4 ranks
// the allgather of 256 KiB gained (23.7–24.5 against 30.7–33.6) and
// other cells moved within their spread; 8 and 16 ranks, which read the
// slots in parallel, were already 0.3–0.7 of the peers' time there.
const (
	DefaultCMAMin   = 16 << 10
	cmaMax          = 256 << 10
	DefaultCMARanks = 2
)

// ByAddress reports whether a broadcast's root or an allgather's writer
// publishes its input of nbytes (the broadcast's buffer, the rank's block)
// by its address (cma.go) where the ranks may read each other's
// processes: in scope, in a group of processes. It does
// not depend on the probe, which ends at different calls on different
// ranks, so that the planner, which prices the area by it, chooses alike
// on every rank.
func (g *Group) ByAddress(nbytes int) bool {
	return g.cmaScope() && nbytes >= g.cmaMin && nbytes <= cmaMax
}

// cmaScope reports whether the group may publish by address at all: 2 to
// CMARanks ranks in processes of their own (not goroutine ranks), CMAMin
// not negative. Groups out of it never probe (newGroup, NewLocal).
func (g *Group) cmaScope() bool {
	return g.cmaMin >= 0 && g.n > 1 && g.n <= g.cmaRanks && g.wake == nil
}

// publishCMA says in this rank's block how to read its process: pid and
// the address of the area's magic word in its mapping (magic).
func (g *Group) publishCMA(magic *uint64) {
	l := g.line(g.rank, lineCMA)
	*u64(l[cmaPID:]) = uint64(os.Getpid())
	*u64(l[cmaAddr:]) = uint64(uintptr(unsafe.Pointer(magic)))
	atomic.StoreUint64(u64(l[cmaReady:]), 1)
}

// cmaOn reports whether this rank may publish a chunk by address: every
// rank said that it could read every other rank's process. Until every
// rank has published how to read it, or said whether it could, it
// reports false, and tries again at the next call (probeCMA).
func (g *Group) cmaOn() bool {
	switch g.cma.Load() {
	case cmaYes:
		return true
	case cmaNo:
		return false
	}
	g.probeCMA()
	if atomic.LoadUint64(u64(g.line(g.rank, lineCMA)[cmaCan:])) == 0 {
		return false
	}
	for q := range g.n {
		switch atomic.LoadUint64(u64(g.line(q, lineCMA)[cmaCan:])) {
		case 0:
			return false
		case cmaNo:
			g.cma.Store(cmaNo)
			return false
		}
	}
	g.cma.Store(cmaYes)
	return true
}

// probeCMA, once every rank has published how to read its process, reads
// the area's magic out of every other rank's and publishes whether it
// could read them all. Groups out of scope never get here: they start
// with cma set to cmaNo (newGroup, NewLocal).
func (g *Group) probeCMA() {
	mine := u64(g.line(g.rank, lineCMA)[cmaCan:])
	if atomic.LoadUint64(mine) != 0 {
		return
	}
	for q := range g.n {
		if atomic.LoadUint64(u64(g.line(q, lineCMA)[cmaReady:])) == 0 {
			return
		}
	}
	v := uint64(cmaYes)
	for q := range g.n {
		if q == g.rank {
			continue
		}
		l := g.line(q, lineCMA)
		var w [8]byte
		if cma.Read(int(*u64(l[cmaPID:])), w[:], *u64(l[cmaAddr:])) != nil || *(*uint64)(unsafe.Pointer(&w[0])) != areaMagic {
			v = cmaNo
			break
		}
	}
	atomic.StoreUint64(mine, v)
}

// copyFrom copies into dst the len(dst) bytes at addr in rank q's
// process.
func (g *Group) copyFrom(q int, dst []byte, addr uint64) error {
	return cma.Read(int(*u64(g.line(q, lineCMA)[cmaPID:])), dst, addr)
}
