package tcp

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

var hsSecret = []byte("the job's secret")

// flip returns mac with bit 0 of byte i inverted: a near miss, equal to
// the right MAC in every other byte.
func flip(mac []byte, i int) []byte {
	m := append([]byte(nil), mac...)
	if i >= 0 {
		m[i] ^= 1
	}
	return m
}

// TestHandshakeNearMissClient answers the server's hello with the right
// MAC except in one byte (each byte in turn, the last one included): the
// server must refuse every one with ErrAuth, and accept the exact MAC.
func TestHandshakeNearMissClient(t *testing.T) {
	for i := -1; i < macLen; i++ {
		srv, cli := net.Pipe()
		errc := make(chan error, 1)
		go func() {
			_, err := serverHandshake(srv, time.Now().Add(5*time.Second), 1, hsSecret, "job", func(hsIdent) error { return nil })
			srv.Close()
			errc <- err
		}()
		var hello [helloLen]byte
		if _, err := io.ReadFull(cli, hello[:]); err != nil {
			t.Fatal(err)
		}
		var ans [answerLen]byte
		putHsPrefix(ans[:])
		binary.LittleEndian.PutUint32(ans[8:], 0)
		binary.LittleEndian.PutUint16(ans[12:], 0)
		binary.LittleEndian.PutUint16(ans[14:], 1)
		copy(ans[16+nonceLen:], flip(handshakeMAC(hsSecret, roleClient, "job", hello[12:], 1, 0, 0, 1), i))
		go io.Copy(io.Discard, cli)
		cli.Write(ans[:])
		err := <-errc
		cli.Close()
		switch {
		case i < 0 && err != nil:
			t.Fatalf("the exact MAC was refused: %v", err)
		case i >= 0 && !errors.Is(err, transport.ErrAuth):
			t.Errorf("a MAC wrong in byte %d only: %v, want ErrAuth", i, err)
		}
	}
}

// TestHandshakeNearMissServer has a server answer the client with the right
// accept MAC except in one byte (each in turn): the client must refuse
// every one with ErrAuth, and accept the exact MAC.
func TestHandshakeNearMissServer(t *testing.T) {
	for i := -1; i < macLen; i++ {
		srv, cli := net.Pipe()
		go func() {
			defer srv.Close()
			var hello [helloLen]byte
			putHsPrefix(hello[:])
			binary.LittleEndian.PutUint32(hello[8:], 1)
			if _, err := srv.Write(hello[:]); err != nil {
				return
			}
			var ans [answerLen]byte
			if _, err := io.ReadFull(srv, ans[:]); err != nil {
				return
			}
			nonceC := ans[16 : 16+nonceLen]
			srv.Write(flip(handshakeMAC(hsSecret, roleServer, "job", nonceC, 1, 0, 0, 1), i))
		}()
		err := clientHandshake(cli, time.Now().Add(5*time.Second), 0, 1, 0, 1, hsSecret, "job")
		cli.Close()
		switch {
		case i < 0 && err != nil:
			t.Fatalf("the exact MAC was refused: %v", err)
		case i >= 0 && !errors.Is(err, transport.ErrAuth):
			t.Errorf("a MAC wrong in byte %d only: %v, want ErrAuth", i, err)
		}
	}
}
