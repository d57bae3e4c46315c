package bootstrap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The TCP store's wire format. Every message is a frame:
//
//	u32 length of what follows (big endian), at most maxFrame
//	u8  op
//	u32 request id (0 in the handshake)
//	... the op's fields:
//	    opHello    server nonce (32 bytes)                 server → client
//	    opAuth     client nonce (32), HMAC (32)            client → server
//	    opWelcome  HMAC (32)                               server → client
//	    opSet      key, value (the rest of the frame)
//	    opGet      key
//	    opAdd      key, i64 delta
//	    opCancel   (nothing): forget the pending Get with this id
//	    opOK       value (the rest): reply to Set (empty), Get, Add (i64)
//	    opErr      message (the rest)
//
// A key is a u16 length and 1 to MaxKeyLen bytes. The handshake: the
// server sends opHello; the client answers opAuth with
// HMAC-SHA256(secret, "braid-store-client" | server nonce | client nonce);
// the server checks it and answers opWelcome with
// HMAC-SHA256(secret, "braid-store-server" | client nonce | server nonce),
// which the client checks, or opErr and closes. Before the handshake ends
// a frame may have at most maxHandshakeFrame bytes.
const (
	opHello   = 1
	opAuth    = 2
	opWelcome = 3
	opSet     = 4
	opGet     = 5
	opAdd     = 6
	opCancel  = 7
	opOK      = 8
	opErr     = 9
)

// Limits of the TCP store.
const (
	MaxKeyLen   = 4096     // bytes in a key
	MaxValueLen = 64 << 20 // bytes in a value

	nonceLen          = 32
	macLen            = 32
	frameHeader       = 5 // op, id
	maxFrame          = frameHeader + 2 + MaxKeyLen + MaxValueLen
	maxHandshakeFrame = frameHeader + nonceLen + macLen
	maxErrLen         = 4096
)

var errFrame = errors.New("malformed frame")

// frame is one decoded message.
type frame struct {
	op    byte
	id    uint32
	key   string
	value []byte // aliases the decoded buffer
	delta int64
}

// decodeFrame decodes the body of a frame (without its length prefix).
// The frame's value aliases b.
func decodeFrame(b []byte) (frame, error) {
	if len(b) < frameHeader {
		return frame{}, fmt.Errorf("%w: %d bytes", errFrame, len(b))
	}
	f := frame{op: b[0], id: binary.BigEndian.Uint32(b[1:5])}
	rest := b[frameHeader:]
	fixed := func(n int) error {
		if len(rest) != n {
			return fmt.Errorf("%w: op %d has %d bytes, want %d", errFrame, f.op, len(rest), n)
		}
		f.value = rest
		return nil
	}
	var err error
	switch f.op {
	case opHello, opWelcome:
		err = fixed(nonceLen)
	case opAuth:
		err = fixed(nonceLen + macLen)
	case opCancel:
		err = fixed(0)
	case opOK:
		f.value = rest
	case opErr:
		if len(rest) > maxErrLen {
			return frame{}, fmt.Errorf("%w: error message of %d bytes", errFrame, len(rest))
		}
		f.value = rest
	case opSet, opGet, opAdd:
		if f.key, rest, err = decodeKey(rest); err != nil {
			return frame{}, err
		}
		switch f.op {
		case opSet:
			if len(rest) > MaxValueLen {
				return frame{}, fmt.Errorf("%w: value of %d bytes", errFrame, len(rest))
			}
			f.value = rest
		case opGet:
			err = fixed(0)
		case opAdd:
			if err = fixed(8); err == nil {
				f.delta = int64(binary.BigEndian.Uint64(rest))
				f.value = nil
			}
		}
	default:
		return frame{}, fmt.Errorf("%w: unknown op %d", errFrame, f.op)
	}
	if err != nil {
		return frame{}, err
	}
	return f, nil
}

func decodeKey(b []byte) (string, []byte, error) {
	if len(b) < 2 {
		return "", nil, fmt.Errorf("%w: no key", errFrame)
	}
	n := int(binary.BigEndian.Uint16(b))
	if n == 0 || n > MaxKeyLen || len(b) < 2+n {
		return "", nil, fmt.Errorf("%w: key of %d bytes in %d", errFrame, n, len(b)-2)
	}
	return string(b[2 : 2+n]), b[2+n:], nil
}

// appendFrame appends f, with its length prefix, to dst.
func appendFrame(dst []byte, f frame) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, f.op)
	dst = binary.BigEndian.AppendUint32(dst, f.id)
	switch f.op {
	case opSet, opGet, opAdd:
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(f.key)))
		dst = append(dst, f.key...)
	}
	if f.op == opAdd {
		dst = binary.BigEndian.AppendUint64(dst, uint64(f.delta))
	} else {
		dst = append(dst, f.value...)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// checkKey reports whether key fits the wire format.
func checkKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return fmt.Errorf("bootstrap: key of %d bytes: want 1 to %d", len(key), MaxKeyLen)
	}
	return nil
}

// readFrame reads one frame of at most max bytes (after the prefix) into
// a fresh buffer and decodes it.
func readFrame(r *bufio.Reader, max int) (frame, error) {
	var p [4]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(p[:])
	if int64(n) > int64(max) {
		return frame{}, fmt.Errorf("%w: %d bytes, at most %d", errFrame, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	return decodeFrame(b)
}
