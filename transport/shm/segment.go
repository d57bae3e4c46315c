package shm

import (
	"sync/atomic"
	"unsafe"

	"github.com/braid-ccl/braid/internal/shmring"
)

// A segment is one rank's shared-memory file: a header, the completion
// slots of its rendezvous sends, and one inbound ring per peer.
//
//	offset     size               contents
//	0          64                 magic, version, nPeers, rank, pid, ring size, slots per peer, secret hash
//	64         8 (own line)       state: alive, aborted or closed (written by the owner)
//	128        8 (own line)       mapped: how many peers mapped the segment (added to by peers)
//	192        512                why the owner aborted: a 2-byte length, then the text
//	704        4·nPeers           the world ranks of the owner's peers, in ring order
//	slotsOff   8·nSlots·nPeers    completion words of the owner's rendezvous sends to each peer
//	ringsOff   nPeers·(64+ring)   per peer: ring control (tail, cma flag), then the ring's bytes
//
// Ring i carries frames from peer i to the owner: the peer writes frames;
// the owner reads them and writes the tail. The completion word of
// slot s of peer i is written by peer i when it has copied the owner's
// message out, and read by the owner.
type segment struct {
	mem []byte
	l   layout
}

// Header offsets.
const (
	offMagic    = 0
	offVersion  = 8
	offNPeers   = 12
	offRank     = 16
	offPID      = 20
	offRingSize = 24
	offNSlots   = 32
	offSecret   = 40 // 16 bytes
	offState    = 64
	offMapped   = 128 // how many peers mapped this segment; each also sets its word of layout.mapped
	offReason   = 192
	reasonSize  = 512
	offPeers    = offReason + reasonSize

	magic   = 0x4d48534449415242 // "BRAIDSHM"
	version = 3

	// ctrlSize is the size of a ring's control block (shmring.At): the
	// tail and the cma flag on a cache line of their own.
	ctrlSize  = shmring.CtrlSize
	pageBytes = 4096
)

// Values of the state word.
const (
	stateAlive   = 0
	stateAborted = 1
	stateClosed  = 2
)

// layout gives the offsets of a segment's parts.
type layout struct {
	nPeers, nSlots, ringSize int
	slotsOff, ringsOff, size int
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func newLayout(nPeers, nSlots, ringSize int) layout {
	l := layout{nPeers: nPeers, nSlots: nSlots, ringSize: ringSize}
	l.slotsOff = roundUp(offPeers+8*nPeers, 64) // the peers' ranks, then their mapped words
	l.ringsOff = roundUp(l.slotsOff+8*nSlots*nPeers, pageBytes)
	l.size = l.ringsOff + nPeers*(ctrlSize+ringSize)
	l.size = roundUp(l.size, pageBytes)
	return l
}

func (l layout) slot(peer, slot int) int { return l.slotsOff + 8*(peer*l.nSlots+slot) }

// mapped is the word that the owner's i-th peer sets, before it counts
// itself in offMapped, once it has mapped the segment: an owner whose wait
// for the count times out names the peers whose word is still 0.
func (l layout) mapped(i int) int  { return offPeers + 4*l.nPeers + 4*i }
func (l layout) ctrl(peer int) int { return l.ringsOff + peer*(ctrlSize+l.ringSize) }

func (s *segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }

func (s *segment) state() uint64 { return atomic.LoadUint64(s.u64(offState)) }

// setReason records why the owner aborts; it is written before the state
// word, whose atomic store publishes it.
func (s *segment) setReason(text string) {
	if len(text) > reasonSize-2 {
		text = text[:reasonSize-2]
	}
	n := copy(s.mem[offReason+2:offReason+reasonSize], text)
	s.mem[offReason], s.mem[offReason+1] = byte(n), byte(n>>8)
}

// reason returns the owner's abort reason (read after seeing the state).
func (s *segment) reason() string {
	n := int(s.mem[offReason]) | int(s.mem[offReason+1])<<8
	if n > reasonSize-2 {
		return ""
	}
	return string(s.mem[offReason+2 : offReason+2+n])
}

// peerRank returns the world rank of the owner's i-th peer.
func (s *segment) peerRank(i int) int { return int(*s.u32(offPeers + 4*i)) }

// ring returns the ring that carries frames from the owner's i-th peer.
func (s *segment) ring(i int) ring {
	c := s.l.ctrl(i)
	return shmring.At(s.mem[c : c+ctrlSize+s.l.ringSize : c+ctrlSize+s.l.ringSize])
}

// readLayout returns the layout that a mapped segment's header describes,
// or false if the header is not a valid segment of the given size.
func readLayout(mem []byte) (layout, bool) {
	if len(mem) < offPeers {
		return layout{}, false
	}
	s := segment{mem: mem}
	if atomic.LoadUint64(s.u64(offMagic)) != magic || *s.u32(offVersion) != version {
		return layout{}, false
	}
	nPeers, ringSize, nSlots := int(*s.u32(offNPeers)), int(*s.u64(offRingSize)), int(*s.u32(offNSlots))
	// Bounds that keep the layout's arithmetic far from overflow: a ring
	// of at most 1 TiB, at most 2^20 peers and 2^20 slots each.
	if ringSize <= 0 || ringSize%pageBytes != 0 || ringSize > 1<<40 || nSlots <= 0 || nSlots > 1<<20 || nPeers < 0 || nPeers > 1<<20 {
		return layout{}, false
	}
	l := newLayout(nPeers, nSlots, ringSize)
	if l.size != len(mem) {
		return layout{}, false
	}
	return l, true
}
