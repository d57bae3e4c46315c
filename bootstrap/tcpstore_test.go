package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// logBuf collects a server's log lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// waitFor waits up to 5 s until the log has n lines that contain s.
func (l *logBuf) waitFor(s string, n int) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if strings.Count(l.String(), s) >= n {
			return true
		}
	}
	return false
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func serve(t *testing.T, secret []byte, logf func(string, ...any)) *StoreServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ServeTCPStore(context.Background(), ln, secret, logf)
	t.Cleanup(func() { srv.Close() })
	return srv
}

func dial(t *testing.T, srv *StoreServer, secret []byte) Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := DialTCPStore(ctx, srv.Addr().String(), secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestTCPStoreWrongSecret(t *testing.T) {
	var log logBuf
	srv := serve(t, testSecret, log.logf)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := DialTCPStore(ctx, srv.Addr().String(), []byte("not the secret, not at all......"))
	if !errors.Is(err, transport.ErrAuth) {
		t.Fatalf("dial with a wrong secret = %v; want ErrAuth", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("a refused dial took %v: it must not retry", time.Since(start))
	}
	if !log.waitFor("refused client 127.0.0.1:", 1) {
		t.Fatalf("server log %q does not report the refusal", log.String())
	}
	// The server serves others still.
	s := dial(t, srv, testSecret)
	if err := s.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// TestTCPStoreServerMustKnowSecret checks that a client refuses a server
// that does not know the secret (the handshake is mutual).
func TestTCPStoreServerMustKnowSecret(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// An impostor: says hello, ignores the client's proof, welcomes it
		// with garbage.
		w := &connWriter{c: c}
		w.write(frame{op: opHello, value: make([]byte, nonceLen)})
		readFrame(bufio.NewReader(c), maxHandshakeFrame)
		w.write(frame{op: opWelcome, value: make([]byte, macLen)})
		time.Sleep(time.Second)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = DialTCPStore(ctx, ln.Addr().String(), testSecret)
	if !errors.Is(err, transport.ErrAuth) || !strings.Contains(err.Error(), "does not know") {
		t.Fatalf("dial to an impostor = %v; want ErrAuth", err)
	}
}

func TestTCPStoreEmptySecret(t *testing.T) {
	var log logBuf
	srv := serve(t, nil, log.logf)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := DialTCPStore(ctx, srv.Addr().String(), testSecret); !errors.Is(err, transport.ErrAuth) {
		t.Fatalf("dial to a server without secret = %v; want ErrAuth", err)
	}
	if _, err := DialTCPStore(ctx, srv.Addr().String(), nil); err == nil {
		t.Fatal("dial without secret succeeded")
	}
}

// TestTCPStoreDialBeforeServe: ranks may dial before rank 0 serves.
func TestTCPStoreDialBeforeServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		s, err := DialTCPStore(ctx, addr, testSecret)
		if err == nil {
			var v []byte
			v, err = s.Get(ctx, "k")
			if err == nil && string(v) != "v" {
				err = fmt.Errorf("Get = %q", v)
			}
			s.Close()
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	srv := ServeTCPStore(ctx, ln, testSecret, t.Logf)
	defer srv.Close()
	srv.Local().Set(ctx, "k", []byte("v"))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestTCPStoreDialTimeout(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := DialTCPStore(ctx, addr, testSecret)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("dial to nothing = %v; want a deadline error naming %s", err, addr)
	}
}

func TestTCPStoreServerGone(t *testing.T) {
	srv := serve(t, testSecret, nil)
	s := dial(t, srv, testSecret)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { _, err := s.Get(ctx, "never"); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	srv.Close()
	if err := <-errc; !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("Get when the server closes = %v; want ErrPeerLost", err)
	}
	if err := s.Set(ctx, "k", nil); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("Set after the server closed = %v; want ErrPeerLost", err)
	}
}

// TestTCPStoreGarbage: a peer that sends junk is dropped and logged; the
// server keeps serving.
func TestTCPStoreGarbage(t *testing.T) {
	var log logBuf
	srv := serve(t, testSecret, log.logf)
	for _, junk := range []string{"GET / HTTP/1.1\r\n\r\n", "\x00\x00\x00\x05\x02\x00\x00\x00\x00", "\xff\xff\xff\xff"} {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(junk))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 256)
		for {
			if _, err := c.Read(buf); err != nil {
				break // the server hung up
			}
		}
		c.Close()
	}
	s := dial(t, srv, testSecret)
	ctx := context.Background()
	if _, err := s.Add(ctx, "n", 2); err != nil {
		t.Fatal(err)
	}
	if !log.waitFor("refused client", 3) {
		t.Fatalf("server log has not 3 refusals:\n%s", log.String())
	}
}

// TestTCPStoreCancelledGet: a Get abandoned by its caller does not keep
// the connection from working, and a later Set is not answered to it.
func TestTCPStoreCancelledGet(t *testing.T) {
	srv := serve(t, testSecret, nil)
	s := dial(t, srv, testSecret)
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		s.Get(ctx, "later")
		cancel()
	}
	ctx := context.Background()
	srv.Local().Set(ctx, "later", []byte("x"))
	if v, err := s.Get(ctx, "later"); err != nil || string(v) != "x" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	ts := s.(*tcpStore)
	ts.mu.Lock()
	n := len(ts.pending)
	ts.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d calls still pending", n)
	}
}

func TestTCPStoreServeContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := ServeTCPStore(ctx, ln, testSecret, nil)
	s := dial(t, srv, testSecret)
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := s.Add(context.Background(), "n", 1); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store still serves after its context ended")
		}
		time.Sleep(time.Millisecond)
	}
	srv.Close()
}

// nearMiss returns mac with bit 0 of byte i inverted (i < 0: mac as is).
func nearMiss(mac []byte, i int) []byte {
	m := append([]byte(nil), mac...)
	if i >= 0 {
		m[i] ^= 1
	}
	return m
}

// TestTCPStoreNearMissClient proves the secret to the store with the right
// MAC except in one byte (each byte in turn, the last one included): the
// store must refuse every one, and welcome the exact MAC.
func TestTCPStoreNearMissClient(t *testing.T) {
	srv := serve(t, testSecret, func(string, ...any) {})
	for i := -1; i < macLen; i++ {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		hello, err := readFrame(br, maxHandshakeFrame)
		if err != nil || hello.op != opHello {
			t.Fatalf("hello: %v %v", hello.op, err)
		}
		cnonce := make([]byte, nonceLen)
		auth := append(cnonce, nearMiss(mac(testSecret, "braid-store-client", hello.value, cnonce), i)...)
		w := &connWriter{c: c}
		if err := w.write(frame{op: opAuth, value: auth}); err != nil {
			t.Fatal(err)
		}
		f, err := readFrame(br, maxHandshakeFrame)
		c.Close()
		switch {
		case i < 0 && (err != nil || f.op != opWelcome):
			t.Fatalf("the exact MAC: op %d, %v; want a welcome", f.op, err)
		case i >= 0 && err == nil && f.op != opErr:
			t.Errorf("a MAC wrong in byte %d only: the store answered op %d, want a refusal", i, f.op)
		}
	}
}

// TestTCPStoreNearMissServer has an impostor store welcome the client with
// the right MAC except in one byte (each in turn): the client must refuse
// every one with ErrAuth, and accept the exact MAC.
func TestTCPStoreNearMissServer(t *testing.T) {
	for i := -1; i < macLen; i++ {
		srv, cli := net.Pipe()
		go func() {
			defer srv.Close()
			snonce := make([]byte, nonceLen)
			w := &connWriter{c: srv}
			if w.write(frame{op: opHello, value: snonce}) != nil {
				return
			}
			f, err := readFrame(bufio.NewReader(srv), maxHandshakeFrame)
			if err != nil {
				return
			}
			cnonce := f.value[:nonceLen]
			w.write(frame{op: opWelcome, value: nearMiss(mac(testSecret, "braid-store-server", cnonce, snonce), i)})
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := clientHandshake(ctx, cli, "impostor", testSecret)
		cancel()
		if s != nil {
			s.Close()
		}
		cli.Close()
		switch {
		case i < 0 && err != nil:
			t.Fatalf("the exact MAC was refused: %v", err)
		case i >= 0 && !errors.Is(err, transport.ErrAuth):
			t.Errorf("a MAC wrong in byte %d only: %v, want ErrAuth", i, err)
		}
	}
}
