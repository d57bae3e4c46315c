package bootstrap

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func serveLimits(t *testing.T, log *logBuf, lim StoreLimits) *StoreServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ServeTCPStoreLimits(context.Background(), ln, testSecret, log.logf, lim)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// waitStats polls the server's counts until ok accepts them.
func waitStats(t *testing.T, srv *StoreServer, ok func(StoreStats) bool) StoreStats {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := srv.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("server stats stuck at %+v", st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestTCPStoreFlood opens 300 connections from three client addresses
// that never authenticate: the server holds no more of them than its caps
// (per address and in total), closing the oldest; a rank still gets in
// during the flood; and the log has LogBurst lines, then one line that
// counts the rest.
func TestTCPStoreFlood(t *testing.T) {
	var log logBuf
	lim := StoreLimits{PendingPerAddr: 8, Pending: 12, LogBurst: 5, LogInterval: time.Hour}
	srv := serveLimits(t, &log, lim)
	const perSrc, nsrc = 100, 3
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range perSrc * nsrc {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%nsrc))}
		d := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatalf("connection %d from %v: %v", i, src, err)
		}
		held = append(held, c)
	}
	// Evicted connections leave the count when their handlers end, which
	// under load can trail the refusal: wait for both.
	st := waitStats(t, srv, func(st StoreStats) bool { return st.Refused+st.Pending == perSrc*nsrc && st.Conns == st.Pending })
	if st.Pending > lim.Pending || st.Conns > lim.Pending {
		t.Errorf("server holds %d connections, %d in the handshake; the cap is %d", st.Conns, st.Pending, lim.Pending)
	}
	srv.mu.Lock()
	for a, n := range srv.perAddr {
		if n > lim.PendingPerAddr {
			t.Errorf("%d connections from %s in the handshake; the cap is %d", n, a, lim.PendingPerAddr)
		}
	}
	srv.mu.Unlock()

	// A rank gets in while the flood's connections are held, and more
	// come after it.
	s := dial(t, srv, testSecret)
	ctx := context.Background()
	if err := s.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitStats(t, srv, func(st StoreStats) bool { return st.Refused+st.Pending == perSrc*nsrc+20 })
	if v, err := s.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("the rank's connection after the flood: Get = %q, %v", v, err)
	}

	// The evicted connections were closed by the server: their reads end.
	evicted := 0
	for _, c := range held[:perSrc*nsrc] {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := io.ReadAll(c); err == nil {
			evicted++
		}
	}
	if evicted < perSrc*nsrc-lim.Pending {
		t.Errorf("%d of %d flood connections closed by the server; want at least %d", evicted, perSrc*nsrc, perSrc*nsrc-lim.Pending)
	}
	// The count once the server is closed: a held connection may still be
	// refused until then (under load, a clean-clone CI run counted 308
	// before the close and logged 309), and the close logs the summary.
	srv.Close()
	refused := srv.Stats().Refused
	lines := strings.Split(log.String(), "\n")
	one := 0
	summed := 0
	re := regexp.MustCompile(`refused (\d+) more clients since .* \(from (.*)\)`)
	for _, l := range lines {
		switch {
		case strings.Contains(l, "refused client"):
			one++
			if !strings.Contains(l, "still in the handshake") {
				t.Errorf("refusal without its reason: %q", l)
			}
		case re.MatchString(l):
			m := re.FindStringSubmatch(l)
			n, _ := strconv.Atoi(m[1])
			summed += n
			for i := 1; i <= nsrc; i++ {
				if !strings.Contains(m[2], fmt.Sprintf("127.0.0.%d ×", i)) {
					t.Errorf("summary does not name 127.0.0.%d: %q", i, l)
				}
			}
		default:
			t.Errorf("unexpected log line %q", l)
		}
	}
	if one != lim.LogBurst || one+summed != refused || len(lines) != lim.LogBurst+1 {
		t.Errorf("log: %d lines, %d refusals one by one and %d summed; want %d, then one summary of the other %d of %d:\n%s",
			len(lines), one, summed, lim.LogBurst, refused-lim.LogBurst, refused, log.String())
	}
	t.Logf("%d refusals in %d log lines; %d connections held at most", refused, len(lines), st.Conns)
}

// TestTCPStoreHandshakeTimeout: a client that connects and says nothing
// is closed after the handshake timeout, and logged.
func TestTCPStoreHandshakeTimeout(t *testing.T) {
	var log logBuf
	srv := serveLimits(t, &log, StoreLimits{HandshakeTimeout: 50 * time.Millisecond})
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("the server did not close a silent client: %v", err)
	}
	if !log.waitFor("i/o timeout", 1) {
		t.Fatalf("log %q does not report the timeout", log.String())
	}
}

// TestTCPStoreConnCap: beyond Conns connections, even authenticated, a new
// one is closed at once.
func TestTCPStoreConnCap(t *testing.T) {
	var log logBuf
	srv := serveLimits(t, &log, StoreLimits{Conns: 3})
	for range 3 {
		dial(t, srv, testSecret)
	}
	waitStats(t, srv, func(st StoreStats) bool { return st.Conns == 3 && st.Pending == 0 })
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 0 {
		t.Fatalf("a connection over the cap got %d bytes, %v; want it closed before the hello", len(b), err)
	}
	if !log.waitFor("already 3 connections", 1) {
		t.Fatalf("log %q does not report the cap", log.String())
	}
}
