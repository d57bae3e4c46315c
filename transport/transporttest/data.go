package transporttest

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"github.com/braid-ccl/braid/transport"
)

// period is the length after which message contents repeat: a prime, so a
// chunk placed at a wrong offset shows unless the offset is a multiple of it.
const period = 65521

// pattern holds two periods of pseudo-random bytes; messages are windows of it.
var pattern = func() []byte {
	b := make([]byte, 2*period)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range period {
		b[i] = byte(r.Uint32())
	}
	copy(b[period:], b[:period])
	return b
}()

// fill writes the contents of the message with seed into buf.
func fill(buf []byte, seed uint64) {
	off := int(seed % period)
	for i := 0; i < len(buf); {
		i += copy(buf[i:], pattern[off:off+period])
	}
}

// check returns an error naming the first byte of buf that differs from the
// message with seed.
func check(buf []byte, seed uint64) error {
	off := int(seed % period)
	for i := 0; i < len(buf); i += period {
		got := buf[i:min(i+period, len(buf))]
		want := pattern[off : off+len(got)]
		if !bytes.Equal(got, want) {
			for j := range got {
				if got[j] != want[j] {
					return fmt.Errorf("byte %d of %d is %#02x, want %#02x", i+j, len(buf), got[j], want[j])
				}
			}
		}
	}
	return nil
}

// seedOf returns the contents seed of a message.
func seedOf(from, to int, tag transport.Tag, size int) uint64 {
	h := uint64(14695981039346656037)
	for _, v := range []uint64{uint64(from), uint64(to), uint64(tag.Comm), uint64(tag.Seq), uint64(tag.Step), uint64(tag.Sig), uint64(size)} {
		h ^= v
		h *= 1099511628211
	}
	return h
}

// guard is the number of bytes after each receive buffer, within its
// capacity, that a transport must not write.
const guard = 16

const guardByte = 0xA5

// recvBuf returns a buffer of length n with guard bytes after it.
func recvBuf(n int) []byte {
	b := make([]byte, n+guard)
	for i := n; i < len(b); i++ {
		b[i] = guardByte
	}
	return b[:n]
}

// checkGuard reports whether a transport wrote past len(b).
func checkGuard(b []byte) error {
	g := b[len(b):cap(b)]
	for i, v := range g {
		if v != guardByte {
			return fmt.Errorf("byte %d past the end of a %d-byte receive buffer was overwritten", i, len(b))
		}
	}
	return nil
}
