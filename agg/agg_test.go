package agg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
	"github.com/x448/float16"
)

var testSecret = []byte("agg-test-secret-0123456789abcdef")

// logBuf collects a daemon's log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// daemon starts a daemon on loopback and returns its address.
func daemon(t *testing.T, cfg Config) (string, *Server, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	if cfg.Secrets == nil {
		cfg.Secrets = [][]byte{testSecret}
	}
	cfg.Log = log.New(lb, "", 0)
	s := NewServer(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return l.Addr().String(), s, lb
}

// members runs f for n members of one group, each with its own client.
func members(t *testing.T, addrs []string, job, key string, n int, o ClientOptions, f func(m int, g *Group) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for m := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := Dial(ctx, addrs, job, testSecret, o)
			if err != nil {
				errs[m] = err
				return
			}
			defer cl.Close()
			g, err := cl.Join(ctx, key, n, m)
			if err != nil {
				errs[m] = err
				return
			}
			defer g.Leave()
			errs[m] = f(m, g)
		}()
	}
	wg.Wait()
	return errs
}

// operand fills member m's operand of count elements of d.
func operand(d dtype.DType, m, count int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(m)))
	b := make([]byte, count*d.Size())
	for i := range count {
		v := r.Float64()*200 - 100
		switch d {
		case dtype.Float32:
			putU32(b[4*i:], math.Float32bits(float32(v)))
		case dtype.Float64:
			putU64(b[8*i:], math.Float64bits(v))
		case dtype.Float16:
			putU16(b[2*i:], float16.Fromfloat32(float32(v)).Bits())
		case dtype.BFloat16:
			putU16(b[2*i:], uint16(math.Float32bits(float32(v))>>16))
		default:
			for j := range d.Size() {
				b[i*d.Size()+j] = byte(r.Uint32())
			}
		}
	}
	return b
}

func putU16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }
func putU32(b []byte, v uint32) {
	for i := range 4 {
		b[i] = byte(v >> (8 * i))
	}
}
func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// want is the sum the daemon must give: in member order, in float32 for
// the 16-bit types, rounded once.
func want(d dtype.DType, ops [][]byte) []byte { return wantOp(d, dtype.Sum, ops) }

func wantOp(d dtype.DType, o dtype.Op, ops [][]byte) []byte {
	n := len(ops[0])
	if d == dtype.Float16 || d == dtype.BFloat16 {
		acc := make([]float32, n/2)
		w := make([]float32, n/2)
		for j, op := range ops {
			reduce.Widen(w, op, d == dtype.Float16)
			for i := range acc {
				switch {
				case j == 0:
					acc[i] = w[i]
				case o == dtype.Sum:
					acc[i] += w[i]
				case o == dtype.Prod:
					acc[i] *= w[i]
				case o == dtype.Min:
					acc[i] = min(acc[i], w[i])
				case o == dtype.Max:
					acc[i] = max(acc[i], w[i])
				}
			}
		}
		out := make([]byte, n)
		reduce.Narrow(out, acc, d == dtype.Float16)
		return out
	}
	k, _ := reduce.Reference(d, o)
	out := bytes.Clone(ops[0])
	for _, op := range ops[1:] {
		k(out, op)
	}
	return out
}

// TestSums checks every element type, sizes below, at and across the
// partition and the shards, in place and not, with 1 and 2 daemons: every
// member gets the member-order sum, bit for bit.
func TestSums(t *testing.T) {
	a1, _, _ := daemon(t, Config{})
	a2, _, _ := daemon(t, Config{})
	o := ClientOptions{Part: 4 << 10, Window: 3}
	for _, addrs := range [][]string{{a1}, {a1, a2}} {
		for _, n := range []int{1, 3, 5} {
			for _, d := range dtype.All() {
				es := d.Size()
				counts := []int{0, 1, 7, o.Part/es - 1, o.Part / es, 3*o.Part/es + 5, 17 * o.Part / es}
				key := fmt.Sprintf("sums/%d/%d/%v", len(addrs), n, d)
				ops := make([][][]byte, len(counts))
				for i, c := range counts {
					ops[i] = make([][]byte, n)
					for m := range n {
						ops[i][m] = operand(d, m, c, uint64(i))
					}
				}
				errs := members(t, addrs, "job-sums", key, n, o, func(m int, g *Group) error {
					for i, c := range counts {
						in := bytes.Clone(ops[i][m])
						res := make([]byte, len(in))
						inPlace := i%2 == 1
						if inPlace {
							res = in
						}
						if err := g.Allreduce(context.Background(), d, dtype.Sum, in, res); err != nil {
							return err
						}
						if w := want(d, ops[i]); !bytes.Equal(res, w) {
							return fmt.Errorf("count %d in place %v: wrong sum", c, inPlace)
						}
					}
					return nil
				})
				for m, err := range errs {
					if err != nil {
						t.Errorf("%d daemons, %d members, %v: member %d: %v", len(addrs), n, d, m, err)
					}
				}
			}
		}
	}
}

// TestOps: every operator but avg (the caller's) on every type that has
// it, combined in member order.
func TestOps(t *testing.T) {
	addr, _, _ := daemon(t, Config{})
	const n, count = 3, 3000
	for _, d := range dtype.All() {
		errs := members(t, []string{addr}, "job-ops", "ops/"+d.String(), n, ClientOptions{Part: 1 << 10}, func(m int, g *Group) error {
			for _, o := range dtype.AllOps() {
				if o == dtype.Avg || !dtype.Supports(d, o) {
					continue
				}
				ops := make([][]byte, n)
				for i := range ops {
					ops[i] = operand(d, i, count, uint64(o))
				}
				res := make([]byte, count*d.Size())
				if err := g.Allreduce(context.Background(), d, o, ops[m], res); err != nil {
					return err
				}
				if !bytes.Equal(res, wantOp(d, o, ops)) {
					return fmt.Errorf("%v %v: wrong result", d, o)
				}
			}
			return nil
		})
		for m, err := range errs {
			if err != nil {
				t.Errorf("member %d: %v", m, err)
			}
		}
	}
}

// TestRefused: a client without the job's secret is refused with a clear
// error, and the daemon logs it.
func TestRefused(t *testing.T) {
	addr, s, lb := daemon(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, []string{addr}, "intruder", []byte("not-the-secret-0123456789abcdef!"), ClientOptions{})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "secret") {
		t.Fatalf("Dial with a wrong secret: %v", err)
	}
	if !strings.Contains(lb.String(), "refused a connection from 127.0.0.1") || !strings.Contains(lb.String(), `job "intruder"`) {
		t.Fatalf("the daemon did not log the refusal:\n%s", lb)
	}
	// Garbage instead of a handshake: refused too, and the daemon goes on.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(c, make([]byte, helloLen))
	c.Write(bytes.Repeat([]byte{0xB7}, 200))
	c.Close()
	if st := s.Stats(); st.Refused < 1 {
		t.Fatalf("stats: %+v", st)
	}
	errs := members(t, []string{addr}, "job", "after", 2, ClientOptions{}, func(m int, g *Group) error {
		b := operand(dtype.Float32, m, 100, 1)
		return g.Allreduce(ctx, dtype.Float32, dtype.Sum, b, b)
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
}

// TestNoResources: a join beyond the daemon's memory is refused with
// ErrNoResources and a message that says so.
func TestNoResources(t *testing.T) {
	addr, s, _ := daemon(t, Config{MaxMemory: 10 << 20})
	errs := members(t, []string{addr}, "big", "g", 2, ClientOptions{Part: 1 << 20, Window: 4}, func(int, *Group) error { return nil })
	for m, err := range errs {
		if !errors.Is(err, ErrNoResources) || !strings.Contains(err.Error(), "no resources") {
			t.Fatalf("member %d: %v", m, err)
		}
	}
	if st := s.Stats(); st.NoResources < 1 || st.Reserved != 0 {
		t.Fatalf("stats after refusals: %+v", st)
	}
}

// TestMemberLost: a member that dies mid-stream ends its group (the others
// get ErrLost at once, not a hang), the daemon frees the group's memory,
// and another job's group running meanwhile is not disturbed.
func TestMemberLost(t *testing.T) {
	addr, s, lb := daemon(t, Config{})
	o := ClientOptions{Part: 64 << 10, Window: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Job B: two members summing in a loop, before, while and after job
	// A loses a member.
	const bN = 40
	bStarted := make(chan struct{})
	var bErrs []error
	var bCalls [2]int
	var bwg sync.WaitGroup
	bwg.Add(1)
	go func() {
		defer bwg.Done()
		bErrs = members(t, []string{addr}, "job-b", "g", 2, o, func(m int, g *Group) error {
			ops := [][]byte{operand(dtype.Float32, 0, 1<<18, 9), operand(dtype.Float32, 1, 1<<18, 9)}
			w := want(dtype.Float32, ops)
			for i := range bN {
				res := make([]byte, len(w))
				if err := g.Allreduce(ctx, dtype.Float32, dtype.Sum, ops[m], res); err != nil {
					return err
				}
				if !bytes.Equal(res, w) {
					return errors.New("wrong sum")
				}
				if i == 0 && m == 0 {
					close(bStarted)
				}
				bCalls[m]++
			}
			return nil
		})
	}()
	select {
	case <-bStarted:
	case <-time.After(20 * time.Second):
		t.Fatal("job B's first call did not end")
	}

	// Job A: member 1 vanishes (its connection closes) in the middle of a
	// call; member 0 must fail with ErrLost.
	c1, err := Dial(ctx, []string{addr}, "job-a", testSecret, o)
	if err != nil {
		t.Fatal(err)
	}
	c0, err := Dial(ctx, []string{addr}, "job-a", testSecret, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	var g0, g1 *Group
	var jwg sync.WaitGroup
	jwg.Add(2)
	go func() { defer jwg.Done(); g0, _ = c0.Join(ctx, "g", 2, 0) }()
	go func() { defer jwg.Done(); g1, _ = c1.Join(ctx, "g", 2, 1) }()
	jwg.Wait()
	if g0 == nil || g1 == nil {
		t.Fatal("join failed")
	}
	done := make(chan error, 1)
	buf := operand(dtype.Float32, 0, 1<<20, 3)
	go func() { done <- g0.Allreduce(ctx, dtype.Float32, dtype.Sum, buf, make([]byte, len(buf))) }()
	// Member 1 sends one part and dies.
	sh := g1.shards[0]
	sh.c.write(ctx, header{typ: tData, code: code(dtype.Float32, dtype.Sum), handle: sh.handle, part: 0, parts: 64, seq: 1}, buf[:64<<10])
	time.Sleep(50 * time.Millisecond)
	c1.conns[0].c.Close() // dies: no leave
	defer c1.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "disconnected") {
			t.Fatalf("member 0 after member 1 died: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("member 0 hangs after member 1 died")
	}
	bwg.Wait()
	for m, err := range bErrs {
		if err != nil {
			t.Fatalf("job B member %d: %v (daemon log:\n%s)", m, err, lb)
		}
	}
	if bCalls[0] != bN || bCalls[1] != bN {
		t.Fatalf("job B made %v calls, want %d each", bCalls, bN)
	}
	// Everything of job A is gone; job B left in good order.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := s.Stats()
		if st.Groups == 0 && st.Reserved == 0 && st.Jobs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon still holds groups: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(lb.String(), `of job "job-a" ended: member 1`) {
		t.Fatalf("the daemon did not log the lost member:\n%s", lb)
	}
}

// TestDaemonLost: a daemon that dies mid-stream fails every member's call
// with ErrLost, promptly.
func TestDaemonLost(t *testing.T) {
	addr, s, _ := daemon(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started := make(chan struct{}, 2)
	var once sync.Once
	go func() {
		<-started
		<-started
		time.Sleep(20 * time.Millisecond)
		once.Do(func() { s.Close() })
	}()
	errs := members(t, []string{addr}, "job", "g", 2, ClientOptions{Part: 64 << 10, Window: 2}, func(m int, g *Group) error {
		buf := operand(dtype.Float32, m, 1<<16, 1)
		started <- struct{}{}
		for range 100000 {
			if err := g.Allreduce(ctx, dtype.Float32, dtype.Sum, buf, make([]byte, len(buf))); err != nil {
				return err
			}
		}
		return nil
	})
	for m, err := range errs {
		if !errors.Is(err, ErrLost) {
			t.Fatalf("member %d: %v", m, err)
		}
	}
}

// TestStats: the daemon counts what it did and answers FetchStats.
func TestStats(t *testing.T) {
	addr, _, _ := daemon(t, Config{})
	errs := members(t, []string{addr}, "job", "g", 3, ClientOptions{Part: 1 << 10}, func(m int, g *Group) error {
		b := operand(dtype.Float64, m, 1000, 1)
		return g.Allreduce(context.Background(), dtype.Float64, dtype.Sum, b, b)
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st, err := FetchStats(context.Background(), addr, "job", testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if st.Calls != 1 || st.Parts != 8 || st.BytesIn != 3*8000 || st.BytesOut != 3*8000 || st.Accepted < 3 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestGarbage: an authenticated client that sends garbage frames is
// dropped with a log line, and the daemon goes on serving.
func TestGarbage(t *testing.T) {
	addr, _, lb := daemon(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		c, err := dialOne(ctx, addr, "junk", testSecret)
		if err != nil {
			t.Fatal(err)
		}
		junk := make([]byte, 1+r.IntN(4096))
		for j := range junk {
			junk[j] = byte(r.Uint32())
		}
		if i%2 == 0 {
			junk[0], junk[1] = frameMagic, wireVersion // a header that gets further
		}
		c.c.Write(junk)
		c.c.Close()
		<-c.done
	}
	errs := members(t, []string{addr}, "job", "after-junk", 2, ClientOptions{}, func(m int, g *Group) error {
		b := operand(dtype.Int32, m, 1000, 1)
		return g.Allreduce(ctx, dtype.Int32, dtype.Sum, b, b)
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if !strings.Contains(lb.String(), "malformed frame") {
		t.Fatalf("no log line for the garbage:\n%s", lb)
	}
}
