package tcp

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// fuzzSecret and fuzzPrefix are the job the fuzzed handshakes belong to.
var (
	fuzzSecret = []byte("fuzz-secret")
	fuzzPrefix = "job/tcp/"
)

// FuzzServerHandshake plays a client that sends arbitrary bytes as its
// answer (after the server's hello, whose nonce it may answer with a
// valid MAC when mac is set): the server must never panic or hang, must
// accept only an answer with the right MAC and a stream within its
// streams, and must reply only then.
func FuzzServerHandshake(f *testing.F) {
	good := make([]byte, answerLen)
	putHsPrefix(good)
	binary.LittleEndian.PutUint32(good[8:], 3)
	binary.LittleEndian.PutUint16(good[12:], 1)
	binary.LittleEndian.PutUint16(good[14:], 2)
	f.Add(good, true)
	f.Add(good, false)
	f.Add(good[:answerLen-1], true)
	bad := bytes.Clone(good)
	binary.LittleEndian.PutUint16(bad[12:], 2) // stream 2 of 2
	f.Add(bad, true)
	zero := bytes.Clone(good)
	binary.LittleEndian.PutUint16(zero[14:], 0)
	f.Add(zero, true)
	f.Add([]byte("BRDT\x02\x00\x00\x00"), false)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, answer []byte, mac bool) {
		srv, cli := net.Pipe()
		defer srv.Close()
		type result struct {
			id  hsIdent
			err error
		}
		done := make(chan result, 1)
		go func() {
			id, err := serverHandshake(srv, time.Now().Add(5*time.Second), 0, fuzzSecret, fuzzPrefix, func(hsIdent) error { return nil })
			srv.Close()
			done <- result{id, err}
		}()
		var hello [helloLen]byte
		if _, err := io.ReadFull(cli, hello[:]); err != nil {
			t.Fatalf("no hello: %v", err)
		}
		a := bytes.Clone(answer)
		signed := false
		if mac && len(a) >= answerLen {
			rank := int(binary.LittleEndian.Uint32(a[8:]))
			stream := int(binary.LittleEndian.Uint16(a[12:]))
			streams := int(binary.LittleEndian.Uint16(a[14:]))
			copy(a[16+nonceLen:], handshakeMAC(fuzzSecret, roleClient, fuzzPrefix, hello[12:], 0, rank, stream, streams))
			signed = true
		}
		go func() {
			// net.Pipe has no half close: a short answer ends with the
			// connection; a whole one leaves it open for the reply (the
			// server closes it when done, which ends a longer write).
			cli.Write(a)
			if len(a) < answerLen {
				cli.Close()
			}
		}()
		reply, _ := io.ReadAll(cli)
		r := <-done
		valid := signed && checkHsPrefix(a) == nil && r.id.streams >= 1 && r.id.streams <= maxStreams && r.id.stream < r.id.streams
		if valid != (r.err == nil) {
			t.Fatalf("answer %x (signed %v): %+v, %v", a, signed, r.id, r.err)
		}
		if r.err == nil && len(reply) != acceptLen {
			t.Fatalf("accepted, replied %d bytes", len(reply))
		}
		if r.err != nil && len(reply) != 0 {
			t.Fatalf("refused (%v), yet replied %x", r.err, reply)
		}
	})
}

// FuzzClientHandshake plays a server that sends arbitrary bytes as its
// hello and then, once it has read the client's answer, as its accept,
// signing the accept over the client's nonce when mac is set: the client
// must never panic or hang, and must succeed only when the hello is a
// braid hello from the rank it dialled and the accept proves the secret.
func FuzzClientHandshake(f *testing.F) {
	hello := make([]byte, helloLen)
	putHsPrefix(hello)
	binary.LittleEndian.PutUint32(hello[8:], 1)
	f.Add(hello, make([]byte, acceptLen), true)
	f.Add(hello, make([]byte, acceptLen), false)
	other := bytes.Clone(hello)
	other[8] = 2
	f.Add(other, make([]byte, acceptLen), true)
	f.Add(hello[:10], []byte{}, false)
	f.Add([]byte("BRDX"), []byte{1}, true)
	f.Fuzz(func(t *testing.T, hello, accept []byte, mac bool) {
		srv, cli := net.Pipe()
		defer srv.Close()
		done := make(chan error, 1)
		go func() {
			err := clientHandshake(cli, time.Now().Add(5*time.Second), 0, 1, 0, 1, fuzzSecret, fuzzPrefix)
			cli.Close()
			done <- err
		}()
		go func() {
			defer srv.Close()
			if len(hello) < helloLen {
				srv.Write(hello)
				return
			}
			// Written apart, as a socket's buffer would take it: bytes
			// past the hello reach the client where it expects the accept.
			go srv.Write(hello)
			var ans [answerLen]byte
			if _, err := io.ReadFull(srv, ans[:]); err != nil {
				return
			}
			acc := accept
			if mac && len(hello) >= helloLen {
				acc = handshakeMAC(fuzzSecret, roleServer, fuzzPrefix, ans[16:16+nonceLen], 1, 0, 0, 1)
			}
			srv.Write(acc)
		}()
		err := <-done
		valid := len(hello) == helloLen && checkHsPrefix(hello) == nil && binary.LittleEndian.Uint32(hello[8:]) == 1 && mac
		if valid != (err == nil) {
			t.Fatalf("hello %x, accept %x, signed %v: %v", hello, accept, mac, err)
		}
	})
}
