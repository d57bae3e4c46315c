package agg

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/braid-ccl/braid/internal/dtype"
)

// The wire format. A connection starts with the handshake (below); then
// both sides exchange frames, each a 32-byte header and a payload:
//
//	[0]      0xB7, the frame magic
//	[1]      version (1)
//	[2]      type
//	[3]      code: in data and result frames the element type (low 4 bits)
//	         and the operator (high 4 bits; avg is sent as sum), in a join
//	         answer its status
//	[4:8]    zero
//	[8:12]   handle: the group, as the client numbered it in its join
//	[12:16]  part: the part of the call a data or result frame carries
//	[16:20]  parts: the call's number of parts
//	[20:24]  payload length
//	[24:32]  seq: the call's number within the group
//
// All integers are little-endian.
const (
	frameMagic   = 0xB7
	wireVersion  = 1
	headerLen    = 32
	maxKeyLen    = 512
	maxJobLen    = 256
	maxMsgLen    = 4096
	maxStatsLen  = 1 << 20
	joinFixedLen = 16

	// MaxPart bounds the partition a group streams in (and so a data or
	// result frame's payload).
	MaxPart = 16 << 20
	// MaxWindow bounds the parts a member may have in flight in a group.
	MaxWindow = 64
	// MaxMembers bounds a group's members.
	MaxMembers = 4096
)

// Frame types.
const (
	tJoin       = 1 // client: join a group (payload: members, member, part, window, key)
	tJoined     = 2 // server: the answer to a join (code: a status; payload: a message)
	tData       = 3 // client: one part of a call
	tResult     = 4 // server: the sum of one part
	tAbort      = 5 // server: the group (handle; 0: the connection) is over (payload: why)
	tLeave      = 6 // client: leave a group
	tStats      = 7 // client: ask for the daemon's statistics
	tStatsReply = 8 // server: statistics (payload: JSON)
	tMax        = 8
)

// Join statuses.
const (
	statusOK          = 0
	statusNoResources = 1
	statusBad         = 2
)

type header struct {
	typ    uint8
	code   uint8
	handle uint32
	part   uint32
	parts  uint32
	length uint32
	seq    uint64
}

func (h *header) put(b []byte) {
	b[0], b[1], b[2], b[3] = frameMagic, wireVersion, h.typ, h.code
	b[4], b[5], b[6], b[7] = 0, 0, 0, 0
	binary.LittleEndian.PutUint32(b[8:], h.handle)
	binary.LittleEndian.PutUint32(b[12:], h.part)
	binary.LittleEndian.PutUint32(b[16:], h.parts)
	binary.LittleEndian.PutUint32(b[20:], h.length)
	binary.LittleEndian.PutUint64(b[24:], h.seq)
}

// errFrame is a frame that does not parse: the connection that sent it is
// dropped.
var errFrame = errors.New("agg: malformed frame")

// parseHeader checks and decodes a header. fromServer says which side sent
// it: each side sends its own types only.
func parseHeader(b []byte, fromServer bool) (header, error) {
	var h header
	if len(b) < headerLen {
		return h, fmt.Errorf("%w: %d bytes of header", errFrame, len(b))
	}
	if b[0] != frameMagic {
		return h, fmt.Errorf("%w: magic %#x", errFrame, b[0])
	}
	if b[1] != wireVersion {
		return h, fmt.Errorf("%w: version %d, want %d", errFrame, b[1], wireVersion)
	}
	if b[4]|b[5]|b[6]|b[7] != 0 {
		return h, fmt.Errorf("%w: reserved bytes set", errFrame)
	}
	h = header{typ: b[2], code: b[3],
		handle: binary.LittleEndian.Uint32(b[8:]), part: binary.LittleEndian.Uint32(b[12:]),
		parts: binary.LittleEndian.Uint32(b[16:]), length: binary.LittleEndian.Uint32(b[20:]),
		seq: binary.LittleEndian.Uint64(b[24:])}
	var max uint32
	switch h.typ {
	case tJoin, tLeave, tStats, tData:
		if fromServer {
			return h, fmt.Errorf("%w: type %d from the daemon", errFrame, h.typ)
		}
	case tJoined, tResult, tAbort, tStatsReply:
		if !fromServer {
			return h, fmt.Errorf("%w: type %d from a client", errFrame, h.typ)
		}
	default:
		return h, fmt.Errorf("%w: unknown type %d", errFrame, h.typ)
	}
	switch h.typ {
	case tJoin:
		max = joinFixedLen + maxKeyLen
	case tJoined, tAbort:
		max = maxMsgLen
	case tData, tResult:
		max = MaxPart
		if h.parts == 0 || h.part >= h.parts {
			return h, fmt.Errorf("%w: part %d of %d", errFrame, h.part, h.parts)
		}
		d, op := codeOf(h.code)
		if !d.Valid() || !op.Valid() || op == dtype.Avg || !dtype.Supports(d, op) || h.length%uint32(d.Size()) != 0 {
			return h, fmt.Errorf("%w: element type %d, operator %d, %d bytes", errFrame, h.code&15, h.code>>4, h.length)
		}
	case tStatsReply:
		max = maxStatsLen
	}
	if h.length > max {
		return h, fmt.Errorf("%w: type %d with %d bytes of payload (at most %d)", errFrame, h.typ, h.length, max)
	}
	return h, nil
}

// join is a join request's payload.
type join struct {
	members, member int
	part, window    int
	key             string
}

func (j *join) encode() []byte {
	b := make([]byte, joinFixedLen+len(j.key))
	binary.LittleEndian.PutUint32(b[0:], uint32(j.members))
	binary.LittleEndian.PutUint32(b[4:], uint32(j.member))
	binary.LittleEndian.PutUint32(b[8:], uint32(j.part))
	binary.LittleEndian.PutUint32(b[12:], uint32(j.window))
	copy(b[joinFixedLen:], j.key)
	return b
}

func parseJoin(b []byte) (join, error) {
	var j join
	if len(b) < joinFixedLen || len(b) > joinFixedLen+maxKeyLen {
		return j, fmt.Errorf("%w: join of %d bytes", errFrame, len(b))
	}
	m := binary.LittleEndian.Uint32(b[0:])
	i := binary.LittleEndian.Uint32(b[4:])
	p := binary.LittleEndian.Uint32(b[8:])
	w := binary.LittleEndian.Uint32(b[12:])
	switch {
	case m < 1 || m > MaxMembers:
		return j, fmt.Errorf("a group of %d members (at most %d)", m, MaxMembers)
	case i >= m:
		return j, fmt.Errorf("member %d of %d", i, m)
	case p < 8 || p > MaxPart || p%8 != 0:
		return j, fmt.Errorf("partition of %d bytes: want a multiple of 8 up to %d", p, MaxPart)
	case w < 1 || w > MaxWindow:
		return j, fmt.Errorf("window of %d parts: want 1 to %d", w, MaxWindow)
	case len(b) == joinFixedLen:
		return j, errors.New("a join without a group key")
	}
	return join{members: int(m), member: int(i), part: int(p), window: int(w), key: string(b[joinFixedLen:])}, nil
}

// The handshake proves to the daemon that the client holds the job's
// secret, and to the client that the daemon does, with HMAC-SHA256 over
// fresh nonces (the secret never travels), as Braid's TCP transport and
// store do:
//
//	daemon → client  hello:  "BRAG", version, 0, 0, 0, nonceD
//	client → daemon  answer: "BRAG", version, 0, job length (2 bytes), nonceC,
//	                         HMAC(secret, "braid/agg client" 0 job 0 nonceD), job
//	daemon → client  reply:  status (0 accepted, 3 refused), 0, message length (2 bytes),
//	                         HMAC(secret, "braid/agg daemon" 0 job 0 nonceC) or zeros,
//	                         message
//
// The daemon tries every secret it holds; the job (its name and the secret
// that matched) scopes the groups the connection may join.
const (
	hsMagic      = "BRAG"
	nonceLen     = 32
	macLen       = sha256.Size
	helloLen     = 8 + nonceLen
	answerFixed  = 8 + nonceLen + macLen
	replyFixed   = 4 + macLen
	roleClient   = "braid/agg client"
	roleDaemon   = "braid/agg daemon"
	hsAccepted   = 0
	hsRefused    = 3
	maxReplyText = 1024
)

func mac(secret []byte, role, job string, nonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	io.WriteString(m, role)
	m.Write([]byte{0})
	io.WriteString(m, job)
	m.Write([]byte{0})
	m.Write(nonce)
	return m.Sum(nil)
}

// parseAnswer decodes a client's answer (its fixed part in b, the job
// name read after it).
func parseAnswerFixed(b []byte) (jobLen int, nonce, sum []byte, err error) {
	if len(b) < answerFixed || string(b[:4]) != hsMagic {
		return 0, nil, nil, errors.New("not a braid agg handshake")
	}
	if b[4] != wireVersion {
		return 0, nil, nil, fmt.Errorf("handshake version %d, want %d", b[4], wireVersion)
	}
	jobLen = int(binary.LittleEndian.Uint16(b[6:]))
	if jobLen == 0 || jobLen > maxJobLen {
		return 0, nil, nil, fmt.Errorf("job name of %d bytes (1 to %d)", jobLen, maxJobLen)
	}
	return jobLen, b[8 : 8+nonceLen], b[8+nonceLen : 8+nonceLen+macLen], nil
}

// code packs an element type and an operator into a frame's code.
func code(d dtype.DType, op dtype.Op) uint8 { return uint8(d)&15 | uint8(op)<<4 }

func codeOf(c uint8) (dtype.DType, dtype.Op) { return dtype.DType(c & 15), dtype.Op(c >> 4) }
