package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/braid-ccl/braid/transport"
)

// Frame types.
const (
	frameData  = 1 // a message or one stripe of it
	frameAbort = 2 // the sender aborted; the payload is its reason
	frameClose = 3 // the sender closed its mesh
)

const (
	frameMagic   = 0xB7AD
	frameVersion = 1

	// hdrLen is the size of a frame header on the wire:
	//
	//	0:2   magic 0xB7AD (big endian)
	//	2     version
	//	3     type
	//	4:20  tag: Comm, Seq, Step, Sig
	//	20:24 message id (per sender and peer; stripes of one message share it)
	//	24:32 message length
	//	32:40 offset of this frame's payload in the message
	//	40:44 payload length of this frame
	//
	// All integers are little endian except the magic.
	hdrLen = 44

	// maxFrame bounds one frame's payload; longer messages are split.
	maxFrame = 1 << 30
	// maxMessage bounds a message's length as read from the wire, so that
	// a corrupt header cannot make the receiver allocate without bound.
	maxMessage = 1 << 42
	// maxReason bounds an abort frame's payload.
	maxReason = 1 << 16
)

// header is a decoded frame header.
type header struct {
	typ    uint8
	tag    transport.Tag
	id     uint32
	total  uint64
	offset uint64
	length uint32
}

// encode writes h into b, which has at least hdrLen bytes.
func (h *header) encode(b []byte) {
	_ = b[hdrLen-1]
	binary.BigEndian.PutUint16(b[0:], frameMagic)
	b[2] = frameVersion
	b[3] = h.typ
	binary.LittleEndian.PutUint32(b[4:], h.tag.Comm)
	binary.LittleEndian.PutUint32(b[8:], h.tag.Seq)
	binary.LittleEndian.PutUint32(b[12:], h.tag.Step)
	binary.LittleEndian.PutUint32(b[16:], h.tag.Sig)
	binary.LittleEndian.PutUint32(b[20:], h.id)
	binary.LittleEndian.PutUint64(b[24:], h.total)
	binary.LittleEndian.PutUint64(b[32:], h.offset)
	binary.LittleEndian.PutUint32(b[40:], h.length)
}

// decode parses and checks a header from b, which has at least hdrLen bytes.
func (h *header) decode(b []byte) error {
	_ = b[hdrLen-1]
	if m := binary.BigEndian.Uint16(b[0:]); m != frameMagic {
		return fmt.Errorf("bad frame magic %#04x", m)
	}
	if b[2] != frameVersion {
		return fmt.Errorf("unsupported frame version %d", b[2])
	}
	h.typ = b[3]
	h.tag.Comm = binary.LittleEndian.Uint32(b[4:])
	h.tag.Seq = binary.LittleEndian.Uint32(b[8:])
	h.tag.Step = binary.LittleEndian.Uint32(b[12:])
	h.tag.Sig = binary.LittleEndian.Uint32(b[16:])
	h.id = binary.LittleEndian.Uint32(b[20:])
	h.total = binary.LittleEndian.Uint64(b[24:])
	h.offset = binary.LittleEndian.Uint64(b[32:])
	h.length = binary.LittleEndian.Uint32(b[40:])
	switch h.typ {
	case frameData:
		if h.total > maxMessage || h.length > maxFrame || h.offset > h.total || uint64(h.length) > h.total-h.offset {
			return fmt.Errorf("bad data frame: offset %d + length %d in a message of %d bytes", h.offset, h.length, h.total)
		}
	case frameAbort, frameClose:
		if h.length > maxReason {
			return fmt.Errorf("control frame of %d bytes", h.length)
		}
	default:
		return fmt.Errorf("unknown frame type %d", h.typ)
	}
	return nil
}
