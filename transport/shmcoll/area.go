package shmcoll

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/internal/shmfile"
	"github.com/braid-ccl/braid/transport"
)

// The area's file starts with a header page; the blocks follow.
const (
	hdrMagic  = 0
	hdrRanks  = 8
	hdrSlot   = 16
	hdrSecret = 24 // 16 bytes
	// hdrRD holds the maker's Options.RDMax (low 32 bits, signed) and
	// RDRanks: the ranks that map the area take the maker's, so that all
	// double the same calls whatever each was given (a rank's view of the
	// cores, which decides it, can differ).
	hdrRD      = 40
	hdrMapped  = 64 // own line: ranks that mapped the file
	headerSize = 4096

	areaMagic = 0x4c4c4f4344494152 // "RAIDCOLL"
)

// Options of a group.
type Options struct {
	Slot    int // bytes of a data slot; 0 means SlotFor(the group's size)
	FlatMax int // largest one-phase allreduce chunk; 0 means FlatMaxFor(n)
	// ChainMin is the smallest allreduce chunk that goes along the
	// rank-order chain, on ChainRanks ranks and more; 0 means
	// DefaultChainMin (DefaultChainRanks), negative never.
	ChainMin, ChainRanks int
	// BcastSeg, if positive, is the chunk in which a broadcast moves
	// (at most the slot; see Group.Bcast); 0 takes BRAID_SHM_BCAST_SEG,
	// else chunks by the call's size. Every rank of a group must be given
	// the same: ranks that cut a call differently fail it with a
	// mismatch.
	BcastSeg int
	// RDMax is the largest allreduce (of one chunk) that goes by recursive
	// doubling (doubling.go), on RDRanks ranks or more; 0 means
	// DefaultRDMax (DefaultRDRanks), negative never. Every rank of a group
	// must be given the same.
	RDMax, RDRanks int
	// CMAMin is the smallest chunk that a broadcast's root or an
	// allgather's writer publishes by its address for the readers to
	// copy with process_vm_readv (cma.go), in groups of at most CMARanks
	// ranks; 0 means DefaultCMAMin (DefaultCMARanks), negative never, as
	// BRAID_SHM_CMA=0 makes it for the shm transport too. Every rank of a
	// group must be given the same: the communicator's planner prices the
	// area by them (ByAddress), and ranks that plan differently report a
	// mismatch.
	CMAMin, CMARanks int
}

// Check returns the options with defaults filled in for a group of n
// ranks, or an error naming what is out of range.
func (o Options) Check(n int) (Options, error) { return o.resolve(n) }

func (o Options) resolve(n int) (Options, error) {
	if o.Slot == 0 {
		o.Slot = SlotFor(n)
	}
	if o.FlatMax == 0 {
		o.FlatMax = FlatMaxFor(n)
	}
	if o.ChainMin == 0 {
		o.ChainMin = DefaultChainMin
	}
	if o.BcastSeg == 0 {
		o.BcastSeg, _ = strconv.Atoi(os.Getenv("BRAID_SHM_BCAST_SEG"))
	}
	if o.RDMax == 0 {
		o.RDMax = DefaultRDMax
	}
	if o.RDRanks <= 0 {
		o.RDRanks = DefaultRDRanks
	}
	if o.RDMax > rdCap {
		return o, fmt.Errorf("shmcoll: recursive doubling up to %d bytes: want at most %d", o.RDMax, rdCap)
	}
	if o.ChainRanks <= 0 {
		o.ChainRanks = DefaultChainRanks
	}
	if o.CMAMin == 0 {
		o.CMAMin = DefaultCMAMin
		if os.Getenv("BRAID_SHM_CMA") == "0" {
			o.CMAMin = -1
		}
	}
	if o.CMARanks <= 0 {
		o.CMARanks = DefaultCMARanks
	}
	if o.Slot < minSlot || o.Slot > maxSlot || o.Slot%lineSize != 0 {
		return o, fmt.Errorf("shmcoll: slot of %d bytes: want a multiple of %d from %d to %d", o.Slot, lineSize, minSlot, maxSlot)
	}
	o.FlatMax = min(max(o.FlatMax, 0), o.Slot)
	return o, nil
}

func newGroup(rank, n int, o Options, blocks [][]byte) *Group {
	g := &Group{rank: rank, n: n, slot: o.Slot, flatMax: o.FlatMax, chainMin: o.ChainMin, chainRanks: o.ChainRanks, bcastSeg: o.BcastSeg, rdMax: o.RDMax, rdRanks: o.RDRanks, cmaMin: o.CMAMin, cmaRanks: o.CMARanks, blocks: blocks, srcs: make([][]byte, n), rdAll: make([]byte, rdCap)}
	if !g.cmaScope() {
		g.cma.Store(cmaNo) // never by address (cma.go)
	}
	return g
}

// NewLocal returns the groups of n goroutine ranks of one process, sharing
// one area in ordinary memory.
func NewLocal(n int, o Options) ([]*Group, error) {
	o, err := o.resolve(n)
	if err != nil {
		return nil, err
	}
	if n < 1 || n > maxRanks {
		return nil, fmt.Errorf("shmcoll: %d ranks: want 1 to %d", n, maxRanks)
	}
	bs := BlockSize(o.Slot)
	words := make([]uint64, n*bs/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n*bs)
	blocks := make([][]byte, n)
	for q := range blocks {
		blocks[q] = mem[q*bs : (q+1)*bs : (q+1)*bs]
	}
	gs := make([]*Group, n)
	var w *wake
	if n > 1 {
		// A rank alone has nobody to wake: without a wake its calls
		// publish as processes do, with no lock or channel per flag.
		w = newWake()
	}
	for r := range gs {
		gs[r] = newGroup(r, n, o, blocks)
		gs[r].wake = w
		gs[r].cma.Store(cmaNo) // one process: never by address (cma.go)
	}
	return gs, nil
}

// Config says how the ranks of one host meet to map their area.
type Config struct {
	Rank, Ranks int          // this rank's index in the group, and the group's size
	Store       transport.KV // the job's store
	Key         string       // the store key for this group (unique in the job)
	Secret      []byte       // the job's secret: a file made with another is refused
	Dir         string       // where the file lives; "" means /dev/shm
	Options
}

// ErrUnavailable wraps the reason a group could not be set up on some rank;
// every rank then gets it, so that all go on without the area.
var ErrUnavailable = errors.New("shmcoll: shared area unavailable")

func secretHash(secret []byte) [16]byte {
	h := sha256.Sum256(append([]byte("braid-shmcoll\x00"), secret...))
	return [16]byte(h[:16])
}

// Join makes (rank 0) or maps (the others) the group's area. Every rank
// publishes whether it succeeded, and every rank returns an error wrapping
// ErrUnavailable if any did not, so that the ranks agree on using the
// area. The file is unlinked once every rank has mapped it: nothing is left
// behind, whatever happens later. A Join that fails removes the files that
// dead processes left (a rank 0 killed during Join leaves its area's).
func Join(ctx context.Context, cfg Config) (g *Group, err error) {
	o, err := cfg.Options.resolve(cfg.Ranks)
	if err != nil {
		return nil, err
	}
	n := cfg.Ranks
	if n < 1 || n > maxRanks || cfg.Rank < 0 || cfg.Rank >= n {
		return nil, fmt.Errorf("shmcoll: rank %d of %d: want 0 ≤ rank < ranks ≤ %d", cfg.Rank, n, maxRanks)
	}
	dir := cfg.Dir
	if dir == "" {
		dir = "/dev/shm"
	}
	defer func() {
		if err != nil {
			ReapStale(dir)
		}
	}()
	size := headerSize + n*BlockSize(o.Slot)
	var mem []byte
	var path string
	var mine error
	if cfg.Rank == 0 {
		mem, path, mine = create(dir, size, n, o, cfg.Secret)
		v := "ok " + path
		if mine != nil {
			v = "err " + mine.Error()
		}
		if err := cfg.Store.Set(ctx, cfg.Key+"/file", []byte(v)); err != nil {
			unmap(mem, path)
			return nil, fmt.Errorf("shmcoll: publishing the area: %w", err)
		}
	} else {
		v, err := cfg.Store.Get(ctx, cfg.Key+"/file")
		if err != nil {
			return nil, fmt.Errorf("shmcoll: waiting for rank 0's area: %w", err)
		}
		s := string(v)
		switch {
		case strings.HasPrefix(s, "ok "):
			mem, mine = open(s[3:], size, n, o.Slot, cfg.Secret)
		default:
			mine = fmt.Errorf("rank 0: %s", strings.TrimPrefix(s, "err "))
		}
	}
	status := "ok"
	if mine != nil {
		status = mine.Error()
	}
	if err := cfg.Store.Set(ctx, cfg.Key+"/r/"+strconv.Itoa(cfg.Rank), []byte(status)); err != nil {
		unmap(mem, path)
		return nil, fmt.Errorf("shmcoll: publishing rank %d's status: %w", cfg.Rank, err)
	}
	var bad []string
	for q := range n {
		v, err := cfg.Store.Get(ctx, cfg.Key+"/r/"+strconv.Itoa(q))
		if err != nil {
			unmap(mem, path)
			return nil, fmt.Errorf("shmcoll: waiting for rank %d's status: %w", q, err)
		}
		if string(v) != "ok" {
			bad = append(bad, fmt.Sprintf("rank %d: %s", q, v))
		}
	}
	if len(bad) > 0 {
		unmap(mem, path)
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(bad, "; "))
	}
	// Every rank mapped the file: the last to count unlinks it.
	if atomic.AddUint64((*uint64)(unsafe.Pointer(&mem[hdrMapped])), 1) == uint64(n) {
		path0 := path
		if path0 == "" {
			v, _ := cfg.Store.Get(ctx, cfg.Key+"/file")
			path0 = strings.TrimPrefix(string(v), "ok ")
		}
		unix.Unlink(path0)
	}
	if cfg.Rank == 0 {
		// Rank 0 made the file: it waits until every rank counted, so that
		// the file is gone when Join returns anywhere.
		t := time.Now()
		var bo transport.Backoff
		for atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[hdrMapped]))) < uint64(n) {
			if ctx.Err() != nil || time.Since(t) > 10*time.Second {
				unix.Unlink(path)
				break
			}
			bo.Idle(ctx.Done())
		}
	}
	return mapped(mem, cfg.Rank, n, o), nil
}

// areaName is the name of an area's file: its maker's pid and PID
// namespace, by which a later maker judges it (ReapStale), and a random
// part.
func areaName(pid int, ns uint64, rnd [8]byte) string {
	return fmt.Sprintf("braid-coll-%d-n%d-%x", pid, ns, rnd)
}

var areaRe = regexp.MustCompile(`^braid-coll-([0-9]+)-n([0-9]+)-[0-9a-f]+$`)

// ReapStale removes the area files in dir that dead processes of this PID
// namespace left: a rank 0 killed between making its area's file and the
// last rank's mapping it, which unlinks it, leaves it behind. Files of
// live processes, of other PID namespaces and of older releases (named
// without the namespace) are left alone, as are the transport's segments
// (package shm reaps those).
func ReapStale(dir string) { shmfile.ReapStale(dir, areaRe) }

// create makes, sizes (with its pages allocated, so that a full /dev/shm
// fails here rather than as a bus error later) and maps the area's file,
// after reaping the files that dead makers left in dir.
func create(dir string, size, n int, o Options, secret []byte) ([]byte, string, error) {
	var rnd [8]byte
	if _, err := unix.Getrandom(rnd[:], 0); err != nil {
		return nil, "", err
	}
	ReapStale(dir)
	path := filepath.Join(dir, areaName(os.Getpid(), shmfile.PIDNamespace(), rnd))
	mem, err := shmfile.Create(path, size)
	if err != nil {
		return nil, "", err
	}
	*(*uint64)(unsafe.Pointer(&mem[hdrRanks])) = uint64(n)
	*(*uint64)(unsafe.Pointer(&mem[hdrSlot])) = uint64(o.Slot)
	*(*uint64)(unsafe.Pointer(&mem[hdrRD])) = uint64(uint32(int32(o.RDMax))) | uint64(o.RDRanks)<<32
	h := secretHash(secret)
	copy(mem[hdrSecret:hdrSecret+16], h[:])
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[hdrMagic])), areaMagic)
	return mem, path, nil
}

// open maps the area that rank 0 made and checks its header.
func open(path string, size, n, slot int, secret []byte) ([]byte, error) {
	mem, err := shmfile.Open(path, func(got int64) error {
		if got != int64(size) {
			return fmt.Errorf("%s has %d bytes, want %d (ranks disagree on the group or its slot)", path, got, size)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ok := atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[hdrMagic]))) == areaMagic &&
		*(*uint64)(unsafe.Pointer(&mem[hdrRanks])) == uint64(n) &&
		*(*uint64)(unsafe.Pointer(&mem[hdrSlot])) == uint64(slot)
	if !ok {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%s is not an area of %d ranks with %d-byte slots", path, n, slot)
	}
	if [16]byte(mem[hdrSecret:hdrSecret+16]) != secretHash(secret) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%s was made with another job secret: %w", path, transport.ErrAuth)
	}
	return mem, nil
}

func unmap(mem []byte, path string) {
	if path != "" {
		unix.Unlink(path)
	}
	if mem != nil {
		unix.Munmap(mem)
	}
}

// Make creates the area of a group of n ranks as a file in dir ("" means
// /dev/shm) and returns rank 0's handle and the file's path, which the
// other ranks pass to Open. The caller unlinks the file (Unlink) once every
// rank has opened it. Join does all of this through a store; Make and Open
// are for callers that exchange the path themselves (a communicator split
// from one whose ranks share the host).
func Make(dir string, n int, o Options, secret []byte) (*Group, string, error) {
	o, err := o.resolve(n)
	if err != nil {
		return nil, "", err
	}
	if n < 1 || n > maxRanks {
		return nil, "", fmt.Errorf("shmcoll: %d ranks: want 1 to %d", n, maxRanks)
	}
	if dir == "" {
		dir = "/dev/shm"
	}
	mem, path, err := create(dir, headerSize+n*BlockSize(o.Slot), n, o, secret)
	if err != nil {
		return nil, "", err
	}
	return mapped(mem, 0, n, o), path, nil
}

// Open maps the area that Make created at path, as rank rank of n.
func Open(path string, rank, n int, o Options, secret []byte) (*Group, error) {
	o, err := o.resolve(n)
	if err != nil {
		return nil, err
	}
	if rank < 0 || rank >= n || n > maxRanks {
		return nil, fmt.Errorf("shmcoll: rank %d of %d: want 0 ≤ rank < ranks ≤ %d", rank, n, maxRanks)
	}
	mem, err := open(path, headerSize+n*BlockSize(o.Slot), n, o.Slot, secret)
	if err != nil {
		return nil, err
	}
	return mapped(mem, rank, n, o), nil
}

// Unlink removes the file of an area that every rank has opened.
func Unlink(path string) error { return unix.Unlink(path) }

// mapped returns the group of rank over an area mapped at mem.
func mapped(mem []byte, rank, n int, o Options) *Group {
	rd := *(*uint64)(unsafe.Pointer(&mem[hdrRD]))
	o.RDMax, o.RDRanks = int(int32(uint32(rd))), int(rd>>32)
	bs := BlockSize(o.Slot)
	blocks := make([][]byte, n)
	for q := range blocks {
		off := headerSize + q*bs
		blocks[q] = mem[off : off+bs : off+bs]
	}
	g := newGroup(rank, n, o, blocks)
	g.release = func() error { return unix.Munmap(mem) }
	g.publishCMA((*uint64)(unsafe.Pointer(&mem[hdrMagic])))
	return g
}
