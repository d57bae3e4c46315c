// Package shmring is the single-producer, single-consumer ring of frames
// in shared memory that Braid's shared-memory transport (transport/shm)
// carries its messages in, and package gpu its notices between the
// executors of one host's GPUs: one ring code for both.
package shmring

import (
	"sync/atomic"
	"unsafe"
)

// Ring is a single-producer single-consumer ring of frames in shared
// memory (a transport/shm segment, package gpu's mailbox file): Data, its
// bytes, and Tail, where the consumer publishes how far it has read.
// Positions count bytes from the start and only grow; a frame starts at
// a multiple of 64 bytes and never wraps around the end of Data: the
// producer writes a pad frame to the end instead.
//
// A frame is published by its mark, its first word, which the producer
// stores atomically, after the rest of the frame, as the frame's position
// plus one. The consumer polls the mark at its position, so that a small
// message costs the consumer a single cache-line transfer. Before publishing
// a frame the producer zeroes the mark where the next frame will start, so
// that bytes left there by an older frame can never look like a mark. The
// consumer releases space with an atomic store of Tail.
type Ring struct {
	Tail *uint64
	CMA  *uint64 // transport/shm: 1 when the owner can read the producer's memory directly
	Data []byte
}

// Frame kinds.
const (
	KindData = 1 // a message, or a chunk of one, carried in the ring
	KindRndv = 2 // a descriptor of a message the receiver copies from the sender's memory
	kindPad  = 3 // skip to the end of the ring
)

// Header is the header of a frame. Apart from Mark, it is written to and
// read from the ring as a whole. Kind and Chunk are the ring's; the other
// fields are its user's (transport/shm's message tags, lengths and
// rendezvous slots).
type Header struct {
	Mark  uint64 // the frame's position + 1, once the frame is complete
	Kind  uint32
	Chunk uint32 // bytes of payload in this frame
	Comm  uint32
	Seq   uint32
	Step  uint32
	Sig   uint32
	Total uint64 // the message's length
	Off   uint64 // KindData: offset of the payload in the message; KindRndv: the sender's address
	Slot  uint32 // KindRndv: the sender's completion slot
	Gen   uint32 // KindRndv: the slot's generation
}

const (
	HeaderSize = int(unsafe.Sizeof(Header{}))
	frameAlign = 64
)

// FrameLen returns the ring bytes a frame with chunk bytes of payload takes.
func FrameLen(chunk int) uint64 { return uint64(roundUp(HeaderSize+chunk, frameAlign)) }

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// The control block of a ring laid out by At: the tail and the CMA flag
// on a cache line of their own.
const (
	CtrlSize = 64
	ctrlTail = 0
	ctrlCMA  = 8
)

// At returns the ring laid out in mem: a control block (CtrlSize bytes),
// then the ring's bytes, a multiple of 64, zero when first mapped. mem
// must be 8-byte aligned.
func At(mem []byte) Ring {
	return Ring{
		Tail: (*uint64)(unsafe.Pointer(&mem[ctrlTail])),
		CMA:  (*uint64)(unsafe.Pointer(&mem[ctrlCMA])),
		Data: mem[CtrlSize:len(mem):len(mem)],
	}
}

func (r *Ring) mark(pos uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.Data[pos])) }

// Tx is the producer's side of a ring, used by one goroutine at a time
// (transport/shm: under the conn's send lock).
type Tx struct {
	Ring
	h uint64 // position of the next frame
	t uint64 // tail as last read
}

// Write puts one frame into the ring and publishes it. It returns false,
// writing nothing, if the ring lacks space.
func (w *Tx) Write(h *Header, payload []byte) bool {
	size := uint64(len(w.Data))
	n := FrameLen(len(payload))
	pos := w.h % size
	pad := uint64(0)
	if pos+n > size {
		pad = size - pos
	}
	// Room for the pad, the frame, and the mark of the frame after it.
	need := pad + n + frameAlign
	if size-(w.h-w.t) < need {
		w.t = atomic.LoadUint64(w.Tail)
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
	f := (*Header)(unsafe.Pointer(&w.Data[pos]))
	f.Kind, f.Chunk, f.Comm, f.Seq, f.Step, f.Sig = h.Kind, h.Chunk, h.Comm, h.Seq, h.Step, h.Sig
	f.Total, f.Off, f.Slot, f.Gen = h.Total, h.Off, h.Slot, h.Gen
	copy(w.Data[pos+uint64(HeaderSize):], payload)
	atomic.StoreUint64(&f.Mark, w.h+1)
	if pad > 0 {
		// Publish the pad last: the consumer finds the frame at 0 ready.
		p := (*Header)(unsafe.Pointer(&w.Data[padAt%size]))
		p.Kind = kindPad
		atomic.StoreUint64(&p.Mark, padAt+1)
	}
	w.h += n
	return true
}

// Rx is the consumer's side of a ring, used by one goroutine at a time
// (transport/shm: under the conn's receive lock).
type Rx struct {
	Ring
	t     uint64 // position of the next frame
	freed uint64 // tail as last stored
}

// Pos is the position of the next frame: bytes from the ring's start,
// growing.
func (r *Rx) Pos() uint64 { return r.t }

// Next returns the next frame, in the ring, and its payload, or nil when
// there is none yet. The frame stays valid until Release. A frame whose
// Chunk passes the ring's end comes with a nil payload (corrupt).
func (r *Rx) Next() (*Header, []byte) {
	size := uint64(len(r.Data))
	for {
		pos := r.t % size
		f := (*Header)(unsafe.Pointer(&r.Data[pos]))
		if atomic.LoadUint64(&f.Mark) != r.t+1 {
			return nil, nil
		}
		if f.Kind == kindPad {
			r.t += size - pos
			continue
		}
		start := pos + uint64(HeaderSize)
		end := start + uint64(f.Chunk)
		if end > size {
			return f, nil // corrupt: the caller sees a payload shorter than chunk
		}
		return f, r.Data[start:end:end]
	}
}

// Release frees the frame that Next returned last, whose Chunk is chunk.
// The space reaches the producer at Flush, or at once when a quarter of
// the ring is pending.
func (r *Rx) Release(chunk uint32) {
	r.t += FrameLen(int(chunk))
	if r.t-r.freed >= uint64(len(r.Data)/4) {
		r.Flush()
	}
}

// Flush gives the space of released frames back to the producer.
func (r *Rx) Flush() {
	if r.freed != r.t {
		r.freed = r.t
		atomic.StoreUint64(r.Tail, r.t)
	}
}
