package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

var fuzzStoreSecret = []byte("fuzz-store-secret")

// fuzzServer is the store a fuzz worker talks to, renewed every few
// thousand inputs so that what they set does not pile up.
type fuzzServer struct {
	srv    *StoreServer
	cancel context.CancelFunc
	honest Store // a client that proves the server still serves
	uses   int
}

func (fs *fuzzServer) get(t *testing.T) *fuzzServer {
	if fs.srv != nil && fs.uses < 5000 {
		fs.uses++
		return fs
	}
	fs.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fs.srv = ServeTCPStoreLimits(ctx, ln, fuzzStoreSecret, func(string, ...any) {},
		StoreLimits{HandshakeTimeout: 2 * time.Second, PendingPerAddr: 1 << 20, Pending: 1 << 20})
	fs.cancel = cancel
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	if fs.honest, err = DialTCPStore(dctx, ln.Addr().String(), fuzzStoreSecret); err != nil {
		t.Fatal(err)
	}
	fs.uses = 1
	return fs
}

func (fs *fuzzServer) close() {
	if fs.srv != nil {
		fs.honest.Close()
		fs.srv.Close()
		fs.cancel()
		fs.srv = nil
	}
}

// FuzzStoreServer sends the TCP store arbitrary bytes: before the
// handshake (auth false: as an intruder) or after a valid one (auth true:
// as a client with the secret, whose requests the server parses). The
// server must never panic, hang or reply with a malformed frame, must
// answer an intruder with nothing but its hello and perhaps a refusal,
// and must go on serving an honest client.
func FuzzStoreServer(f *testing.F) {
	for _, fr := range testFrames() {
		f.Add(appendFrame(nil, fr), true)
	}
	f.Add(appendFrame(appendFrame(nil, frame{op: opSet, id: 1, key: "k", value: []byte("v")}), frame{op: opGet, id: 2, key: "k"}), true)
	f.Add(appendFrame(nil, frame{op: opAdd, id: 1, key: "k", delta: 1 << 62}), true)
	f.Add(appendFrame(nil, frame{op: opAuth, value: make([]byte, 64)}), false)
	f.Add([]byte{0, 0, 0, 1, opAuth}, false)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, true)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), false)
	var fs fuzzServer
	defer fs.close()
	f.Fuzz(func(t *testing.T, data []byte, auth bool) {
		s := fs.get(t)
		c, err := net.Dial("tcp", s.srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		hello, err := readFrame(br, maxHandshakeFrame)
		if err != nil || hello.op != opHello {
			t.Fatalf("hello: %+v, %v", hello, err)
		}
		if auth {
			cnonce := bytes.Repeat([]byte{7}, nonceLen)
			a := append(bytes.Clone(cnonce), mac(fuzzStoreSecret, "braid-store-client", hello.value, cnonce)...)
			if _, err := c.Write(appendFrame(nil, frame{op: opAuth, value: a})); err != nil {
				t.Fatal(err)
			}
			if w, err := readFrame(br, maxHandshakeFrame); err != nil || w.op != opWelcome {
				t.Fatalf("welcome: %+v, %v", w, err)
			}
		}
		c.Write(data)
		c.(*net.TCPConn).CloseWrite()
		// Read the replies until the server closes; every one must be
		// well formed.
		replies := 0
		for {
			r, err := readFrame(br, maxFrame)
			if err == io.EOF {
				break
			}
			if err != nil {
				// A reset is the server closing on unread data; what
				// came before was checked.
				if ne, ok := err.(*net.OpError); ok && !ne.Timeout() {
					break
				}
				t.Fatalf("reply %d: %v", replies, err)
			}
			replies++
			switch {
			case auth && r.op != opOK && r.op != opErr:
				t.Fatalf("reply %d: op %d", replies, r.op)
			case !auth && r.op != opErr:
				t.Fatalf("an intruder got op %d", r.op)
			case !auth && replies > 1:
				t.Fatal("an intruder got more than one refusal")
			}
		}
		// The server still serves.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		key := fmt.Sprintf("honest/%d", s.uses)
		if err := s.honest.Set(ctx, key, []byte("x")); err != nil {
			t.Fatalf("honest Set after the input: %v", err)
		}
		if v, err := s.honest.Get(ctx, key); err != nil || string(v) != "x" {
			t.Fatalf("honest Get after the input: %q, %v", v, err)
		}
	})
}

// FuzzStoreClient has a server that completes the handshake and then
// sends arbitrary bytes as replies: the client's Get and Add must never
// panic or hang, and must return a value only from a well-formed reply.
func FuzzStoreClient(f *testing.F) {
	f.Add(appendFrame(nil, frame{op: opOK, id: 1, value: []byte("v")}))
	f.Add(appendFrame(nil, frame{op: opErr, id: 1, value: []byte("no")}))
	f.Add(appendFrame(appendFrame(nil, frame{op: opOK, id: 1, value: []byte("v")}), frame{op: opOK, id: 2, value: make([]byte, 8)}))
	f.Add(appendFrame(nil, frame{op: opOK, id: 2, value: []byte{1, 2, 3}}))
	f.Add(appendFrame(nil, frame{op: opSet, id: 1, key: "k"}))
	f.Add([]byte{0, 0, 0, 2, opOK})
	f.Fuzz(func(t *testing.T, replies []byte) {
		srv, cli := net.Pipe()
		defer srv.Close()
		go func() {
			br := bufio.NewReader(srv)
			snonce := bytes.Repeat([]byte{9}, nonceLen)
			srv.Write(appendFrame(nil, frame{op: opHello, value: snonce}))
			a, err := readFrame(br, maxHandshakeFrame)
			if err != nil || a.op != opAuth {
				srv.Close()
				return
			}
			srv.Write(appendFrame(nil, frame{op: opWelcome, value: mac(fuzzStoreSecret, "braid-store-server", a.value[:nonceLen], snonce)}))
			go io.Copy(io.Discard, br) // the client's requests
			srv.Write(replies)
			srv.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := clientHandshake(ctx, cli, "fuzz", fuzzStoreSecret)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer s.Close()
		v, gerr := s.Get(ctx, "k")
		n, aerr := s.Add(ctx, "n", 1)
		if ctx.Err() != nil {
			t.Fatalf("calls hung: Get %q, %v; Add %d, %v", v, gerr, n, aerr)
		}
	})
}
