package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// The handshake on every new connection authenticates both sides with the
// job's secret (challenge and response with HMAC-SHA256, never the secret
// itself on the wire):
//
//	server → client  hello:     magic, version, server rank, nonceS
//	client → server  answer:    magic, version, client rank, stream, streams,
//	                            nonceC, HMAC(secret, "client", prefix, nonceS, ranks, stream, streams)
//	server → client  accept:    HMAC(secret, "server", prefix, nonceC, ranks, stream, streams)
//
// The prefix binds the connection to one job and transport, so a stale
// address from another mesh of the same job cannot be mistaken for this one.
const (
	hsMagic    = "BRDT"
	hsVersion  = 1
	nonceLen   = 32
	macLen     = sha256.Size
	helloLen   = 4 + 4 + 4 + nonceLen
	answerLen  = 4 + 4 + 4 + 2 + 2 + nonceLen + macLen
	acceptLen  = macLen
	maxStreams = 64
	roleClient = "braid/tcp client"
	roleServer = "braid/tcp server"
)

// hsIdent is what a handshake establishes about one connection.
type hsIdent struct {
	rank    int // the client's rank
	stream  int
	streams int
}

func handshakeMAC(secret []byte, role, prefix string, nonce []byte, server, client, stream, streams int) []byte {
	m := hmac.New(sha256.New, secret)
	var b [4 + 4 + 2 + 2]byte
	io.WriteString(m, role)
	m.Write([]byte{0})
	io.WriteString(m, prefix)
	m.Write([]byte{0})
	m.Write(nonce)
	binary.LittleEndian.PutUint32(b[0:], uint32(server))
	binary.LittleEndian.PutUint32(b[4:], uint32(client))
	binary.LittleEndian.PutUint16(b[8:], uint16(stream))
	binary.LittleEndian.PutUint16(b[10:], uint16(streams))
	m.Write(b[:])
	return m.Sum(nil)
}

func putHsPrefix(b []byte) {
	copy(b, hsMagic)
	b[4] = hsVersion
	b[5], b[6], b[7] = 0, 0, 0
}

func checkHsPrefix(b []byte) error {
	if string(b[:4]) != hsMagic {
		return errors.New("not a braid tcp handshake")
	}
	if b[4] != hsVersion {
		return fmt.Errorf("handshake version %d, want %d", b[4], hsVersion)
	}
	return nil
}

// serverHandshake runs the server side on c. accept reports whether the
// client's rank and stream are expected. It returns the client's identity,
// or an error (wrapping transport.ErrAuth for a bad answer) after which the
// caller closes c.
func serverHandshake(c net.Conn, deadline time.Time, self int, secret []byte, prefix string, accept func(hsIdent) error) (hsIdent, error) {
	var id hsIdent
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	var hello [helloLen]byte
	putHsPrefix(hello[:])
	binary.LittleEndian.PutUint32(hello[8:], uint32(self))
	nonceS := hello[12:]
	if _, err := rand.Read(nonceS); err != nil {
		return id, err
	}
	if _, err := c.Write(hello[:]); err != nil {
		return id, err
	}
	var ans [answerLen]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		return id, fmt.Errorf("%w: no answer: %v", transport.ErrAuth, err)
	}
	if err := checkHsPrefix(ans[:]); err != nil {
		return id, fmt.Errorf("%w: %v", transport.ErrAuth, err)
	}
	id.rank = int(binary.LittleEndian.Uint32(ans[8:]))
	id.stream = int(binary.LittleEndian.Uint16(ans[12:]))
	id.streams = int(binary.LittleEndian.Uint16(ans[14:]))
	nonceC := ans[16 : 16+nonceLen]
	mac := ans[16+nonceLen:]
	want := handshakeMAC(secret, roleClient, prefix, nonceS, self, id.rank, id.stream, id.streams)
	if !hmac.Equal(mac, want) {
		return id, fmt.Errorf("%w: bad answer from a client claiming rank %d", transport.ErrAuth, id.rank)
	}
	if id.streams < 1 || id.streams > maxStreams || id.stream >= id.streams {
		return id, fmt.Errorf("client rank %d: stream %d of %d", id.rank, id.stream, id.streams)
	}
	if err := accept(id); err != nil {
		return id, err
	}
	reply := handshakeMAC(secret, roleServer, prefix, nonceC, self, id.rank, id.stream, id.streams)
	if _, err := c.Write(reply); err != nil {
		return id, err
	}
	return id, nil
}

// clientHandshake runs the client side on c, which was dialled to reach
// rank server.
func clientHandshake(c net.Conn, deadline time.Time, self, server, stream, streams int, secret []byte, prefix string) error {
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	var hello [helloLen]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return fmt.Errorf("reading hello: %w", err)
	}
	if err := checkHsPrefix(hello[:]); err != nil {
		return err
	}
	if got := int(binary.LittleEndian.Uint32(hello[8:])); got != server {
		return fmt.Errorf("%w: the address belongs to rank %d, not %d", transport.ErrAuth, got, server)
	}
	var ans [answerLen]byte
	putHsPrefix(ans[:])
	binary.LittleEndian.PutUint32(ans[8:], uint32(self))
	binary.LittleEndian.PutUint16(ans[12:], uint16(stream))
	binary.LittleEndian.PutUint16(ans[14:], uint16(streams))
	nonceC := ans[16 : 16+nonceLen]
	if _, err := rand.Read(nonceC); err != nil {
		return err
	}
	copy(ans[16+nonceLen:], handshakeMAC(secret, roleClient, prefix, hello[12:], server, self, stream, streams))
	if _, err := c.Write(ans[:]); err != nil {
		return err
	}
	var acc [acceptLen]byte
	if _, err := io.ReadFull(c, acc[:]); err != nil {
		return fmt.Errorf("%w: rank %d refused the connection: %v", transport.ErrAuth, server, err)
	}
	if !hmac.Equal(acc[:], handshakeMAC(secret, roleServer, prefix, nonceC, server, self, stream, streams)) {
		return fmt.Errorf("%w: rank %d did not prove the secret", transport.ErrAuth, server)
	}
	return nil
}
