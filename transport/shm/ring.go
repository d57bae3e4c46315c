package shm

import (
	"sync/atomic"
	"unsafe"
)

// ring is a single-producer single-consumer byte ring inside a segment.
// head and tail count bytes written and read since the start; a frame never
// wraps around the end of data: the producer writes a pad frame instead.
// The producer writes a frame's bytes with plain stores and then publishes
// it with an atomic store of head; the consumer loads head atomically, reads
// the frames before it and releases their space with an atomic store of
// tail.
type ring struct {
	head, tail *uint64
	cma        *uint64 // 1 when the owner can read the producer's memory directly
	data       []byte
}

// Frame kinds.
const (
	kindData = 1 // a message, or a chunk of one, carried in the ring
	kindRndv = 2 // a descriptor of a message the receiver copies from the sender's memory
	kindPad  = 3 // skip to the end of the ring
)

// frameHdr is the header of a frame. It is written to and read from the
// ring as a whole.
type frameHdr struct {
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

const hdrSize = int(unsafe.Sizeof(frameHdr{}))

// frameLen returns the ring bytes a frame with chunk bytes of payload takes.
func frameLen(chunk int) uint64 { return uint64(hdrSize + roundUp(chunk, 8)) }

// tx is the producer's side of a ring. It is used under the conn's send lock.
type tx struct {
	ring
	h uint64 // head as written by us
	t uint64 // tail as last read
}

// write puts one frame into the ring and publishes it. It returns false,
// writing nothing, if the ring lacks space.
func (w *tx) write(h *frameHdr, payload []byte) bool {
	size := uint64(len(w.data))
	n := frameLen(len(payload))
	pos := w.h % size
	need := n
	if pos+n > size {
		need += size - pos // a pad frame to the end, then the frame at 0
	}
	if size-(w.h-w.t) < need {
		w.t = atomic.LoadUint64(w.tail)
		if size-(w.h-w.t) < need {
			return false
		}
	}
	if pos+n > size {
		*(*uint32)(unsafe.Pointer(&w.data[pos])) = kindPad
		w.h += size - pos
		pos = 0
	}
	*(*frameHdr)(unsafe.Pointer(&w.data[pos])) = *h
	copy(w.data[pos+uint64(hdrSize):], payload)
	w.h += n
	atomic.StoreUint64(w.head, w.h)
	return true
}

// rx is the consumer's side of a ring. It is used under the conn's receive
// lock.
type rx struct {
	ring
	t uint64 // tail as written by us
}

// next returns the next frame and its payload, or false when the ring is
// empty up to head. The caller must call release when done with the frame.
func (r *rx) next(head uint64) (frameHdr, []byte, bool) {
	size := uint64(len(r.data))
	for r.t != head {
		pos := r.t % size
		h := *(*frameHdr)(unsafe.Pointer(&r.data[pos]))
		if h.kind == kindPad {
			r.t += size - pos
			atomic.StoreUint64(r.tail, r.t)
			continue
		}
		start := pos + uint64(hdrSize)
		end := start + uint64(h.chunk)
		if end > size {
			h.kind = 0 // corrupt: the caller reports it
			return h, nil, true
		}
		return h, r.data[start:end:end], true
	}
	return frameHdr{}, nil, false
}

// release frees the frame that next returned last.
func (r *rx) release(h *frameHdr) {
	r.t += frameLen(int(h.chunk))
	atomic.StoreUint64(r.tail, r.t)
}
