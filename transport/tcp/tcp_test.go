package tcp

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/transporttest"
)

// local returns options for tests on loopback.
func local(streams, stripe int) Options {
	return Options{Streams: streams, StripeSize: stripe, ListenAddr: "127.0.0.1:0"}
}

func TestConformance(t *testing.T) {
	defer checkGoroutines(t)()
	for _, o := range []struct {
		name string
		opts Options
	}{
		{"streams=1", local(1, 0)},
		{"streams=2", local(2, 0)},
		{"streams=3,stripe=8K", local(3, 8<<10)},
	} {
		t.Run(o.name, func(t *testing.T) {
			transporttest.Run(t, transporttest.FactoryFor(New(o.opts)))
		})
	}
}

// checkGoroutines returns a function that fails t if goroutines started
// since are still running a second later.
func checkGoroutines(t *testing.T) func() {
	before := runtime.NumGoroutine()
	return func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf)
		}
	}
}

// connect connects n ranks of tr; lost records Lost calls.
func connect(t *testing.T, tr transport.Transport, n int, lost func(rank, peer int, err error)) []transport.Mesh {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms, err := transporttest.Connect(ctx, tr, n, transporttest.Hooks{Lost: lost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, m := range ms {
			m.Close()
		}
	})
	return ms
}

func wait(t *testing.T, reqs ...transport.Request) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return transport.Wait(ctx, nil, reqs...)
}

// patternPeriod is prime, so that a chunk at a wrong offset shows.
const patternPeriod = 65521

var patternBase = func() []byte {
	b := make([]byte, 2*patternPeriod)
	x := uint32(2463534242)
	for i := range patternPeriod {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	copy(b[patternPeriod:], b[:patternPeriod])
	return b
}()

// pattern returns n bytes of a pseudo-random sequence chosen by seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	off := int(seed) * 257 % patternPeriod
	for i := 0; i < n; {
		i += copy(b[i:], patternBase[off:off+patternPeriod])
	}
	return b
}

// syncWriter is a log destination that tests can read.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestAuthRefused connects a rank while strangers knock at its port: one
// with a wrong secret, one that says nothing, one that speaks another
// protocol. All are refused and logged; the job connects and works.
func TestAuthRefused(t *testing.T) {
	defer checkGoroutines(t)()
	logw := &syncWriter{}
	opts := local(2, 0)
	opts.Logger = log.New(logw, "", 0)
	tr := New(opts)
	kv := &transporttest.MemKV{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps := []transport.Endpoint{{Rank: 0}, {Rank: 1}}
	cfg := func(r int) transport.Config {
		return transport.Config{Self: eps[r], Peers: []transport.Endpoint{eps[1-r]}, World: 2, Store: kv, Prefix: "job", Secret: []byte("right")}
	}
	ms := make([]transport.Mesh, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { ms[1], errs[1] = tr.Connect(ctx, cfg(1)) })

	// Rank 1 listens; knock before rank 0 connects.
	v, err := kv.Get(ctx, AddrKey("job", 1))
	if err != nil {
		t.Fatal(err)
	}
	addr := string(v)
	bad, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := clientHandshake(bad, time.Now().Add(5*time.Second), 0, 1, 0, 2, []byte("wrong"), "job"); !errors.Is(err, transport.ErrAuth) {
		t.Errorf("handshake with a wrong secret: %v, want ErrAuth", err)
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	http, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer http.Close()
	fmt.Fprintf(http, "GET / HTTP/1.0\r\n\r\n................................................................................")

	wg.Go(func() { ms[0], errs[0] = tr.Connect(ctx, cfg(0)) })
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer ms[0].Close()
	defer ms[1].Close()
	data := pattern(3<<20+1, 1)
	buf := make([]byte, len(data))
	tag := transport.Tag{Comm: 1}
	rr, _ := ms[1].Conn(0).Irecv(tag, buf)
	sr, _ := ms[0].Conn(1).Isend(tag, data)
	if err := wait(t, rr, sr); err != nil {
		t.Fatal(err)
	}
	if string(buf) != string(data) {
		t.Fatal("data differs")
	}
	// The listener is closed once connected.
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("rank 1 still accepts connections after Connect")
	}
	out := logw.String()
	if n := strings.Count(out, "refused connection"); n < 2 {
		t.Errorf("log has %d refused connections, want at least 2 (the silent one may be cut when Connect ends):\n%s", n, out)
	}
	if !strings.Contains(out, "authentication failed") {
		t.Errorf("log does not mention the failed authentication:\n%s", out)
	}
}

// TestWrongSecret checks that ranks with different secrets do not connect.
func TestWrongSecret(t *testing.T) {
	defer checkGoroutines(t)()
	tr := New(Options{ListenAddr: "127.0.0.1:0", Logger: log.New(&syncWriter{}, "", 0)})
	kv := &transporttest.MemKV{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	eps := []transport.Endpoint{{Rank: 0}, {Rank: 1}}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			m, err := tr.Connect(ctx, transport.Config{Self: eps[r], Peers: []transport.Endpoint{eps[1-r]}, World: 2, Store: kv, Prefix: "j", Secret: []byte{byte(r)}})
			if m != nil {
				m.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	if !errors.Is(errs[0], transport.ErrAuth) {
		t.Errorf("dialling rank: %v, want ErrAuth", errs[0])
	}
	if errs[1] == nil {
		t.Errorf("listening rank connected with a wrong secret")
	}
}

func transporttestConnect(ctx context.Context, tr transport.Transport, n int) ([]transport.Mesh, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return transporttest.Connect(ctx, tr, n, transporttest.Hooks{})
}
