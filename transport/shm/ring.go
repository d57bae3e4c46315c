package shm

import (
	"sync/atomic"
	"unsafe"
)

// ring is a single-producer single-consumer ring of frames inside a
// segment. Positions count bytes from the start and only grow; a frame
// starts at a multiple of 64 bytes and never wraps around the end of data:
// the producer writes a pad frame to the end instead.
//
// A frame is published by its mark, its first word, which the producer
// stores atomically, after the rest of the frame, as the frame's position
// plus one. The consumer polls the mark at its position, so that a small
// message costs the consumer a single cache-line transfer. Before publishing
// a frame the producer zeroes the mark where the next frame will start, so
// that bytes left there by an older frame can never look like a mark. The
// consumer releases space with an atomic store of tail.
type ring struct {
	tail *uint64
	cma  *uint64 // 1 when the owner can read the producer's memory directly
	data []byte
}

// Frame kinds.
const (
	kindData = 1 // a message, or a chunk of one, carried in the ring
	kindRndv = 2 // a descriptor of a message the receiver copies from the sender's memory
	kindPad  = 3 // skip to the end of the ring
)

// frameHdr is the header of a frame. Apart from mark, it is written to and
// read from the ring as a whole.
type frameHdr struct {
	mark  uint64 // the frame's position + 1, once the frame is complete
	kind  uint32
	chunk uint32 // bytes of payload in this frame
	comm  uint32
	seq   uint32
	step  uint32
	sig   uint32
	total uint64 // the message's length
	off   uint64 // kindData: offset of the payload in the message; kindRndv: the sender's address
	slot  uint32 // kindRndv: the sender's completion slot
	gen   uint32 // kindRndv: the slot's generation
}

const (
	hdrSize    = int(unsafe.Sizeof(frameHdr{}))
	frameAlign = 64
)

// frameLen returns the ring bytes a frame with chunk bytes of payload takes.
func frameLen(chunk int) uint64 { return uint64(roundUp(hdrSize+chunk, frameAlign)) }

func (r *ring) mark(pos uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.data[pos])) }

// tx is the producer's side of a ring. It is used under the conn's send lock.
type tx struct {
	ring
	h uint64 // position of the next frame
	t uint64 // tail as last read
}

// write puts one frame into the ring and publishes it. It returns false,
// writing nothing, if the ring lacks space.
func (w *tx) write(h *frameHdr, payload []byte) bool {
	size := uint64(len(w.data))
	n := frameLen(len(payload))
	pos := w.h % size
	pad := uint64(0)
	if pos+n > size {
		pad = size - pos
	}
	// Room for the pad, the frame, and the mark of the frame after it.
	need := pad + n + frameAlign
	if size-(w.h-w.t) < need {
		w.t = atomic.LoadUint64(w.tail)
		if size-(w.h-w.t) < need {
			return false
		}
	}
	padAt := w.h
	if pad > 0 {
		w.h += pad
		pos = 0
	}
	*w.mark((w.h + n) % size) = 0
	f := (*frameHdr)(unsafe.Pointer(&w.data[pos]))
	f.kind, f.chunk, f.comm, f.seq, f.step, f.sig = h.kind, h.chunk, h.comm, h.seq, h.step, h.sig
	f.total, f.off, f.slot, f.gen = h.total, h.off, h.slot, h.gen
	copy(w.data[pos+uint64(hdrSize):], payload)
	atomic.StoreUint64(&f.mark, w.h+1)
	if pad > 0 {
		// Publish the pad last: the consumer finds the frame at 0 ready.
		p := (*frameHdr)(unsafe.Pointer(&w.data[padAt%size]))
		p.kind = kindPad
		atomic.StoreUint64(&p.mark, padAt+1)
	}
	w.h += n
	return true
}

// rx is the consumer's side of a ring. It is used under the conn's receive
// lock.
type rx struct {
	ring
	t     uint64 // position of the next frame
	freed uint64 // tail as last stored
}

// next returns the next frame, in the ring, and its payload, or nil when
// there is none yet. The frame stays valid until release.
func (r *rx) next() (*frameHdr, []byte) {
	size := uint64(len(r.data))
	for {
		pos := r.t % size
		f := (*frameHdr)(unsafe.Pointer(&r.data[pos]))
		if atomic.LoadUint64(&f.mark) != r.t+1 {
			return nil, nil
		}
		if f.kind == kindPad {
			r.t += size - pos
			continue
		}
		start := pos + uint64(hdrSize)
		end := start + uint64(f.chunk)
		if end > size {
			return f, nil // corrupt: the caller sees a payload shorter than chunk
		}
		return f, r.data[start:end:end]
	}
}

// release frees the frame that next returned last. The space reaches the
// producer at flush, or at once when a quarter of the ring is pending.
func (r *rx) release(chunk uint32) {
	r.t += frameLen(int(chunk))
	if r.t-r.freed >= uint64(len(r.data)/4) {
		r.flush()
	}
}

// flush gives the space of released frames back to the producer.
func (r *rx) flush() {
	if r.freed != r.t {
		r.freed = r.t
		atomic.StoreUint64(r.tail, r.t)
	}
}
