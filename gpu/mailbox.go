package gpu

import (
	"encoding/binary"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/shmring"
)

// The mailbox is a shared-memory file holding one ring of notices per
// ordered pair of ranks: the rings of the shm transport
// (internal/shmring), each a control block (the consumer's tail) and
// ringData bytes. A notice is one frame of noticeBytes of payload (256
// bytes with its header), so that a ring holds ringNotices of them.
const (
	noticeBytes = 172
	ringData    = 64 << 10
	ringBytes   = shmring.CtrlSize + ringData
)

// ringNotices is how many notices a ring holds.
var ringNotices = int((ringData - 64) / shmring.FrameLen(noticeBytes))

// Notice kinds. Pulls: the sender posts ready, the receiver reads and
// posts done. Pushes: the receiver posts dest, the sender writes and posts
// written.
const (
	noticeReady   uint32 = 1 // a chunk may be read
	noticeDone    uint32 = 2 // a chunk has been read
	noticeDest    uint32 = 3 // a chunk may be written here
	noticeWritten uint32 = 4 // a chunk has been written
	noticeReset   uint32 = 5 // a step of the fused kernels' reset (resetFused)

	// noticeP2P marks the notices of point-to-point calls (Call.P2P):
	// their Seq numbers the messages of a (peer, tag) pair, not the
	// communicator's calls, so that they never meet a collective's.
	noticeP2P uint32 = 1 << 16
)

// Notice flags.
const (
	flagEvent uint32 = 1 // wait for Event before the chunk may be read (ready) or overwritten (done)
	flagBuf   uint32 = 2 // Mem, BufID and Off locate the chunk (ready with a non-empty chunk)
	// flagRefused: a point-to-point message whose two ends differ in
	// length or type; Count and DType are the refusing end's. Nothing was
	// written or read, and no event comes with it.
	flagRefused uint32 = 4
)

// notice is one message between the executors of two ranks.
type notice struct {
	Kind  uint32
	Seq   uint32 // the call's sequence number on the communicator
	Tag   int32  // the step's tag within the schedule
	Flags uint32
	BufID uint64 // the sender's allocation id
	Off   uint64 // bytes from the allocation's base to the chunk
	Mem   cuda.IPCMemHandle
	Event cuda.IPCEventHandle
	// Count and DType are, in a point-to-point call's notices, the
	// elements and type of the step's end (checked by the other end).
	Count uint64
	DType uint32
}

func (n *notice) encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], n.Kind)
	le.PutUint32(b[4:], n.Seq)
	le.PutUint32(b[8:], uint32(n.Tag))
	le.PutUint32(b[12:], n.Flags)
	le.PutUint64(b[16:], n.BufID)
	le.PutUint64(b[24:], n.Off)
	copy(b[32:96], n.Mem[:])
	copy(b[96:160], n.Event[:])
	le.PutUint64(b[160:], n.Count)
	le.PutUint32(b[168:], n.DType)
}

func (n *notice) decode(b []byte) {
	le := binary.LittleEndian
	n.Kind = le.Uint32(b[0:])
	n.Seq = le.Uint32(b[4:])
	n.Tag = int32(le.Uint32(b[8:]))
	n.Flags = le.Uint32(b[12:])
	n.BufID = le.Uint64(b[16:])
	n.Off = le.Uint64(b[24:])
	copy(n.Mem[:], b[32:96])
	copy(n.Event[:], b[96:160])
	n.Count = le.Uint64(b[160:])
	n.DType = le.Uint32(b[168:])
}

// mailbox is this rank's view of the shared rings.
type mailbox struct {
	mem  []byte
	n    int
	rank int
	out  []shmring.Tx // [peer]: the ring to peer, from the first post or take on
	in   []shmring.Rx // [peer]: the ring from peer
}

func mailboxSize(n int) int { return n * n * ringBytes }

func (m *mailbox) ring(from, to int) []byte {
	off := (from*m.n + to) * ringBytes
	return m.mem[off : off+ringBytes : off+ringBytes]
}

// rings lays out this rank's rings over mem on first use.
func (m *mailbox) rings() {
	if m.out != nil {
		return
	}
	m.out, m.in = make([]shmring.Tx, m.n), make([]shmring.Rx, m.n)
	for p := range m.n {
		if p != m.rank {
			m.out[p].Ring = shmring.At(m.ring(m.rank, p))
			m.in[p].Ring = shmring.At(m.ring(p, m.rank))
		}
	}
}

// post appends n to the ring towards peer; false if the ring is full.
func (m *mailbox) post(peer int, n *notice) bool {
	m.rings()
	var b [noticeBytes]byte
	n.encode(b[:])
	return m.out[peer].Write(&shmring.Header{Kind: shmring.KindData, Chunk: noticeBytes}, b[:])
}

// take removes the oldest notice from peer into n; false if there is none
// (and then the space of the notices taken goes back to the peer). A
// frame that is not a notice is taken as a notice of kind 0, which no
// step waits for.
func (m *mailbox) take(peer int, n *notice) bool {
	m.rings()
	r := &m.in[peer]
	h, p := r.Next()
	if h == nil {
		r.Flush()
		return false
	}
	if len(p) == noticeBytes {
		n.decode(p)
	} else {
		*n = notice{}
	}
	r.Release(h.Chunk)
	return true
}
