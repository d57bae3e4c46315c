package emulate_test

import (
	"context"
	"errors"
	"math"
	"os"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/emulate"
	"github.com/braid-ccl/braid/transport/inproc"
)

// square returns an n×n table with v off the diagonal.
func square[T any](n int, v T) [][]T {
	m := make([][]T, n)
	for a := range m {
		m[a] = make([]T, n)
		for b := range m[a] {
			if a != b {
				m[a][b] = v
			}
		}
	}
	return m
}

// TestReserve checks the token buckets without a clock: messages on one
// link follow one another at its bandwidth, messages on different links
// overlap, latency is added once per message without holding the link,
// and a route is as slow as its slowest link.
func TestReserve(t *testing.T) {
	net := &emulate.Network{
		Links: []emulate.Link{
			{Bandwidth: 1e6, Latency: time.Millisecond}, // 0: 1 MB/s
			{Bandwidth: 4e6}, // 1: 4 MB/s
			{Bandwidth: 2e6}, // 2: 2 MB/s
		},
		Routes: [][][]int{
			{nil, {0}, {1, 2}},
			{{0}, nil, {1}},
			{{2}, {2}, nil},
		},
	}
	e, err := emulate.New(net)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	ms := func(x time.Time) float64 { return float64(x.Sub(t0)) / 1e6 }
	for _, tc := range []struct {
		src, dst, bytes int
		at, want        float64 // ms
	}{
		{0, 1, 1000, 0, 2},   // 1 ms on link 0, then 1 ms latency
		{0, 1, 1000, 0, 3},   // queued behind the first: link 0 free at 1 ms
		{1, 2, 4000, 0, 1},   // link 1 alone: 1 ms, no latency
		{0, 2, 2000, 0, 2},   // links 1 (free at 1 ms) and 2: 1 ms on the slower
		{2, 0, 2000, 10, 11}, // link 2 idle again by 10 ms
		{0, 0, 5000, 3, 3},   // no route: no delay
	} {
		got := ms(e.Reserve(tc.src, tc.dst, tc.bytes, t0.Add(time.Duration(tc.at*1e6))))
		if math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("%d->%d %d bytes at %g ms: arrives at %g ms, want %g", tc.src, tc.dst, tc.bytes, tc.at, got, tc.want)
		}
	}
	// A burst of 1000 bytes (0.25 ms at 4 MB/s) lets a message start that
	// much before the link has let the previous one through; in the long
	// run the link keeps its bandwidth.
	net.Burst = 1000
	e, _ = emulate.New(net)
	for k, want := range []float64{1, 1.75, 2.75} {
		if got := ms(e.Reserve(1, 2, 4000, t0)); math.Abs(got-want) > 1e-6 {
			t.Errorf("message %d with a burst: %g ms, want %g", k, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, net := range []*emulate.Network{
		{Links: []emulate.Link{{Bandwidth: 0}}},
		{Links: []emulate.Link{{Bandwidth: 1, Latency: -1}}},
		{Links: []emulate.Link{{Bandwidth: 1}}, Routes: [][][]int{{nil, {1}}, {nil, nil}}},
		{Routes: [][][]int{{nil}, {nil}}},
		{Burst: -1},
	} {
		if _, err := emulate.New(net); err == nil {
			t.Errorf("New(%+v) succeeded", net)
		}
	}
	if _, err := emulate.Pairs([][]float64{{0, 1}, {1}}, nil); err == nil {
		t.Error("Pairs of a ragged table succeeded")
	}
}

// TestWrapTiming sends real messages over inproc through the emulator and
// checks when they arrive: two ranks sending 200 KB each to rank 2 over
// separate 10 MB/s links take 20 ms together, and two messages from one
// rank over one link take 40 ms. The clock is the machine's, so the
// bounds are loose on the slow side.
func TestWrapTiming(t *testing.T) {
	const size = 200_000
	net, err := emulate.Pairs(square(3, 10e6), square(3, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		from  []int
		wantS float64
	}{
		{"parallel links", []int{0, 1}, 0.021},
		{"one link", []int{0, 0}, 0.041},
	} {
		e, err := emulate.New(net)
		if err != nil {
			t.Fatal(err)
		}
		world := inproc.NewWorld(3, nil)
		meshes := make([]transport.Mesh, 3)
		for r := range meshes {
			meshes[r] = e.Wrap(r, world[r])
		}
		start := time.Now()
		var reqs []transport.Request
		for k, src := range tc.from {
			tag := transport.Tag{Comm: 1, Seq: 1, Step: uint32(k)}
			buf := make([]byte, size)
			rr, err := meshes[2].Conn(src).Irecv(tag, buf)
			if err != nil {
				t.Fatal(err)
			}
			sr, err := meshes[src].Conn(2).Isend(tag, make([]byte, size))
			if err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, rr, sr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = transport.Wait(ctx, nil, reqs...)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got := time.Since(start).Seconds()
		// The emulator must impose at least the links' time; a loaded
		// machine can only add to it, so the upper bound is checked
		// with BRAID_TIMED=1 only.
		if got < tc.wantS*0.95 || os.Getenv("BRAID_TIMED") != "" && got > tc.wantS*3 {
			t.Errorf("%s: %.1f ms, want %.1f ms", tc.name, got*1e3, tc.wantS*1e3)
		}
		for _, m := range meshes {
			m.Close()
		}
	}
}

// TestWrapPassThrough checks that receives, errors and Close reach the
// wrapped mesh, and that the wrapped transport connects wrapped meshes.
func TestWrapPassThrough(t *testing.T) {
	net, _ := emulate.Pairs(square(2, 1e9), nil)
	e, _ := emulate.New(net)
	tr := e.Transport(inproc.New(2))
	if tr.Name() != "inproc+emulate" {
		t.Errorf("Name %q", tr.Name())
	}
	ms := make([]transport.Mesh, 2)
	for r := range ms {
		m, err := tr.Connect(context.Background(), transport.Config{Self: transport.Endpoint{Rank: r}, World: 2})
		if err != nil {
			t.Fatal(err)
		}
		ms[r] = m
	}
	if ms[0].Conn(0) != nil || ms[0].Conn(1).Peer() != 1 {
		t.Error("Conn: wrong connections")
	}
	tag := transport.Tag{Comm: 2, Seq: 1}
	rr, _ := ms[1].Conn(0).Irecv(tag, make([]byte, 8))
	sr, _ := ms[0].Conn(1).Isend(tag, make([]byte, 4)) // length mismatch
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := transport.Wait(ctx, nil, rr, sr); !errors.Is(err, transport.ErrMismatch) {
		t.Errorf("mismatched lengths: %v", err)
	}
	ms[0].Close()
	sr, _ = ms[0].Conn(1).Isend(transport.Tag{Comm: 2, Seq: 2}, make([]byte, 1<<20))
	if err := transport.Wait(ctx, nil, sr); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("send after Close: %v", err)
	}
}
