package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// near reports whether got is within a relative 1e-9 of want.
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9*math.Max(math.Abs(want), 1e-12)
}

func mustLink(t *testing.T, n *Network, l Link) int {
	t.Helper()
	id, err := n.AddLink(l)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func chunk(n int) sched.Chunk { return sched.Chunk{Buf: sched.Out, Len: n} }

// barrierParams are Params for n ranks that Run accepts with any programs.
func barrierParams(n int) sched.Params { return sched.Params{Coll: sched.Barrier, NRanks: n} }

func run(t *testing.T, n int, progs []sched.Program, net *Network, cfg Config) *Result {
	t.Helper()
	res, err := Run(context.Background(), barrierParams(n), progs, net, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// pair returns a two-rank network with one link each way.
func pair(t *testing.T, bw, lat float64) *Network {
	net := NewNetwork(2)
	mustLink(t, net, Link{From: 0, To: 1, Bandwidth: bw, Latency: lat})
	mustLink(t, net, Link{From: 1, To: 0, Bandwidth: bw, Latency: lat})
	return net
}

func TestSingleMessage(t *testing.T) {
	const bw, lat, elems = 2e9, 3e-6, 1000
	net := pair(t, bw, lat)
	a, b := sched.NewBuilder(0), sched.NewBuilder(1)
	a.Send(1, 7, chunk(elems))
	b.Recv(0, 7, chunk(elems))
	res := run(t, 2, []sched.Program{a.P, b.P}, net, Config{ElemSize: 8, Timeline: true})
	want := lat + elems*8/bw
	if !near(res.Time, want) || !near(res.Finish[0], want) || !near(res.Finish[1], want) {
		t.Errorf("time %g, finish %v; want %g", res.Time, res.Finish, want)
	}
	if res.Messages != 1 || res.Bytes != 8000 {
		t.Errorf("messages %d bytes %d; want 1, 8000", res.Messages, res.Bytes)
	}
	st := res.Links[0]
	if st.Bytes != 8000 || st.Messages != 1 || !near(st.Busy, elems*8/bw) || !near(st.Utilization, 8000/(bw*want)) {
		t.Errorf("link 0 stats %+v", st)
	}
	if res.Links[1] != (LinkStats{}) {
		t.Errorf("link 1 carried traffic: %+v", res.Links[1])
	}
	f := res.Flows[0]
	if f.Src != 0 || f.Dst != 1 || f.Tag != 7 || f.Posted != 0 || f.Head != 0 || !near(f.Start, lat) || !near(f.End, want) {
		t.Errorf("flow %+v", f)
	}
}

// fanIn returns ranks 0..n-2 joined through a switch to rank n-1 by a link
// of bandwidth bw; the links into the switch are unlimited.
func fanIn(t *testing.T, n int, bw float64) *Network {
	net := NewNetwork(n)
	sw := net.AddNode("sw")
	for r := range n - 1 {
		mustLink(t, net, Link{From: r, To: sw, Bandwidth: math.Inf(1)})
	}
	mustLink(t, net, Link{From: sw, To: n - 1, Bandwidth: bw})
	return net
}

// TestFairShare: two flows on one link each get half of it; when the
// shorter ends, the other gets all of it.
func TestFairShare(t *testing.T) {
	const bw, m = 1e9, 1000
	net := fanIn(t, 3, bw)
	for _, sizes := range [][2]int{{m, m}, {m, 3 * m}} {
		a, b, c := sched.NewBuilder(0), sched.NewBuilder(1), sched.NewBuilder(2)
		a.Send(2, 0, chunk(sizes[0]))
		b.Send(2, 0, chunk(sizes[1]))
		c.Recv(0, 0, chunk(sizes[0]))
		c.Recv(1, 0, chunk(sizes[1]))
		res := run(t, 3, []sched.Program{a.P, b.P, c.P}, net, Config{ElemSize: 1})
		// Both move at bw/2 until the smaller is done, then the rest at bw.
		small := float64(min(sizes[0], sizes[1]))
		t0 := 2 * small / bw
		t1 := t0 + float64(sizes[1]-sizes[0])/bw
		if !near(res.Finish[0], t0) || !near(res.Finish[1], t1) {
			t.Errorf("sizes %v: finish %v, want [%g %g]", sizes, res.Finish[:2], t0, t1)
		}
		if got := res.Links[2].Busy; !near(got, t1) {
			t.Errorf("sizes %v: shared link busy %g, want %g", sizes, got, t1)
		}
	}
}

// TestMaxMin: a flow held back by a narrow first link leaves the rest of a
// shared link to the other flow (max-min, not an equal split).
func TestMaxMin(t *testing.T) {
	net := NewNetwork(3)
	sw := net.AddNode("sw")
	mustLink(t, net, Link{From: 0, To: sw, Bandwidth: 1e9})
	mustLink(t, net, Link{From: 1, To: sw, Bandwidth: math.Inf(1)})
	mustLink(t, net, Link{From: sw, To: 2, Bandwidth: 10e9})
	a, b, c := sched.NewBuilder(0), sched.NewBuilder(1), sched.NewBuilder(2)
	a.Send(2, 0, chunk(1e6))
	b.Send(2, 0, chunk(9e6))
	c.Recv(0, 0, chunk(1e6))
	c.Recv(1, 0, chunk(9e6))
	res := run(t, 3, []sched.Program{a.P, b.P, c.P}, net, Config{ElemSize: 1})
	// Rank 0 at 1 GB/s, rank 1 at the 9 GB/s left: both end at 1 ms.
	if !near(res.Finish[0], 1e-3) || !near(res.Finish[1], 1e-3) {
		t.Errorf("finish %v, want 1 ms each", res.Finish)
	}
}

// TestChannels: messages of one channel go one after the other; messages
// of two channels between the same ranks share the link.
func TestChannels(t *testing.T) {
	const bw, m = 1e9, 1000
	net := pair(t, bw, 0)
	for _, ch := range []uint8{0, 1} {
		a, b := sched.NewBuilder(0), sched.NewBuilder(1)
		a.Add(sched.Step{Kind: sched.KindSend, Peer: 1, Tag: 0, Src: chunk(m)})
		a.Add(sched.Step{Kind: sched.KindSend, Peer: 1, Tag: 1, Src: chunk(m), Channel: ch})
		b.Recv(0, 0, chunk(m))
		b.Recv(0, 1, chunk(m))
		res := run(t, 2, []sched.Program{a.P, b.P}, net, Config{ElemSize: 1, Timeline: true})
		want := [2]float64{m / bw, 2 * m / bw} // one channel: FIFO
		if ch == 1 {
			want = [2]float64{2 * m / bw, 2 * m / bw} // two: shared
		}
		for k, f := range res.Flows {
			if !near(f.End, want[f.Tag]) {
				t.Errorf("channel %d: flow %d (tag %d) ends at %g, want %g", ch, k, f.Tag, f.End, want[f.Tag])
			}
		}
	}
}

// TestRendezvousAndEager: a receive posted late holds a rendezvous message
// back, but not an eager one.
func TestRendezvousAndEager(t *testing.T) {
	const bw, lat, m, gamma = 1e9, 1e-6, 1000, 1e-8
	net := pair(t, bw, lat)
	a, b := sched.NewBuilder(0), sched.NewBuilder(1)
	a.Send(1, 0, chunk(m))
	red := b.Reduce(sched.Chunk{Buf: sched.Tmp, Len: m}, sched.Chunk{Buf: sched.Tmp, Off: m, Len: m})
	b.Recv(0, 0, chunk(m), red)
	progs := []sched.Program{a.P, b.P}
	busy := m * gamma // 10 µs of reduction before rank 1 posts its receive
	for _, c := range []struct {
		eager      int64
		send, recv float64
	}{
		{0, busy + lat + m/bw, busy + lat + m/bw},
		{m - 1, busy + lat + m/bw, busy + lat + m/bw},
		{m, lat + m/bw, busy}, // the data waits at rank 1
	} {
		res := run(t, 2, progs, net, Config{ElemSize: 1, Gamma: gamma, Eager: c.eager})
		if !near(res.Finish[0], c.send) || !near(res.Finish[1], c.recv) {
			t.Errorf("eager %d: finish %v, want [%g %g]", c.eager, res.Finish, c.send, c.recv)
		}
	}
}

// TestCompute: RecvReduce reduces after its data arrives, on a processor
// busy with earlier work; Copy costs bytes/CopyBandwidth unless in place.
func TestCompute(t *testing.T) {
	const bw, m, gamma, copyBW, over = 1e9, 1000, 1e-9, 4e9, 1e-7
	net := pair(t, bw, 0)
	a, b := sched.NewBuilder(0), sched.NewBuilder(1)
	a.Send(1, 0, chunk(m))
	rr := b.RecvReduce(0, 0, chunk(m))
	// Copy In→Out at offset 0 of an allreduce: the same memory in place.
	b.Copy(sched.Chunk{Buf: sched.In, Len: m}, sched.Chunk{Buf: sched.Out, Off: 0, Len: m}, rr)
	p := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: m}
	for _, inPlace := range []bool{false, true} {
		res, err := Run(context.Background(), p, []sched.Program{a.P, b.P}, net,
			Config{ElemSize: 1, Gamma: gamma, CopyBandwidth: copyBW, StepOverhead: over, InPlace: inPlace, Timeline: true})
		if err != nil {
			t.Fatal(err)
		}
		arrive := over + m/bw
		want := arrive + m*gamma + over
		if !inPlace {
			want += m / copyBW
		}
		if !near(res.Finish[1], want) {
			t.Errorf("in place %v: rank 1 ends at %g, want %g", inPlace, res.Finish[1], want)
		}
		if len(res.Computes) != 2 || res.Computes[0].Kind != sched.KindRecvReduce || !near(res.Computes[0].Start, arrive) {
			t.Errorf("in place %v: computes %+v", inPlace, res.Computes)
		}
	}
}

// TestReduceQueues: two RecvReduces whose data arrives together reduce one
// after the other.
func TestReduceQueues(t *testing.T) {
	const bw, m, gamma = 1e9, 1000, 1e-9
	net := NewNetwork(3)
	for _, l := range [][2]int{{0, 2}, {1, 2}} {
		mustLink(t, net, Link{From: l[0], To: l[1], Bandwidth: bw})
	}
	a, b, c := sched.NewBuilder(0), sched.NewBuilder(1), sched.NewBuilder(2)
	a.Send(2, 0, chunk(m))
	b.Send(2, 0, chunk(m))
	c.RecvReduce(0, 0, chunk(m))
	c.RecvReduce(1, 0, sched.Chunk{Buf: sched.Tmp, Len: m})
	res := run(t, 3, []sched.Program{a.P, b.P, c.P}, net, Config{ElemSize: 1, Gamma: gamma})
	if want := m/bw + 2*m*gamma; !near(res.Finish[2], want) {
		t.Errorf("rank 2 ends at %g, want %g", res.Finish[2], want)
	}
}

func TestDeadlock(t *testing.T) {
	net := pair(t, 1e9, 0)
	var progs []sched.Program
	for r := range 2 {
		b := sched.NewBuilder(r)
		rv := b.Recv(1-r, 0, chunk(10))
		b.Send(1-r, 0, chunk(10), rv)
		progs = append(progs, b.P)
	}
	_, err := Run(context.Background(), barrierParams(2), progs, net, Config{})
	if err == nil || !strings.Contains(err.Error(), "deadlock") || !strings.Contains(err.Error(), "never posted") {
		t.Fatalf("err = %v, want a deadlock naming the unposted sends", err)
	}
	// Eager sends do not help: the sends wait for the receives.
	if _, err := Run(context.Background(), barrierParams(2), progs, net, Config{Eager: 1 << 20}); err == nil {
		t.Fatal("eager: no error")
	}
}

func TestBadSchedules(t *testing.T) {
	net := pair(t, 1e9, 0)
	for _, c := range []struct {
		name  string
		build func(a, b *sched.Builder)
		want  string
	}{
		{"unmatched send", func(a, b *sched.Builder) { a.Send(1, 0, chunk(1)) }, "no matching recv"},
		{"unmatched recv", func(a, b *sched.Builder) { b.Recv(0, 0, chunk(1)) }, "no matching send"},
		{"lengths", func(a, b *sched.Builder) { a.Send(1, 0, chunk(1)); b.Recv(0, 0, chunk(2)) }, "receives 2"},
		{"twice", func(a, b *sched.Builder) { a.Send(1, 0, chunk(1)); a.Send(1, 0, chunk(1)); b.Recv(0, 0, chunk(1)) }, "again"},
		{"self", func(a, b *sched.Builder) { a.Send(0, 0, chunk(1)) }, "peer 0"},
		{"dep", func(a, b *sched.Builder) { a.Add(sched.Step{Kind: sched.KindCopy, Deps: []int32{0}}) }, "not an earlier step"},
		{"kind", func(a, b *sched.Builder) { a.Add(sched.Step{Kind: 42}) }, "unknown step kind"},
	} {
		a, b := sched.NewBuilder(0), sched.NewBuilder(1)
		c.build(a, b)
		_, err := Run(context.Background(), barrierParams(2), []sched.Program{a.P, b.P}, net, Config{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := Run(context.Background(), barrierParams(3), make([]sched.Program, 3), net, Config{}); err == nil {
		t.Error("network of 2 ranks for 3: no error")
	}
	if _, err := Run(context.Background(), barrierParams(2), nil, net, Config{}); err == nil {
		t.Error("no programs: no error")
	}
	if _, err := Run(context.Background(), barrierParams(2), make([]sched.Program, 2), net, Config{Gamma: -1}); err == nil {
		t.Error("negative γ: no error")
	}
	// A pair without a route.
	a, b := sched.NewBuilder(0), sched.NewBuilder(1)
	a.Send(1, 0, chunk(1))
	b.Recv(0, 0, chunk(1))
	_, err := Run(context.Background(), barrierParams(2), []sched.Program{a.P, b.P}, NewNetwork(2), Config{})
	if !errors.Is(err, ErrNoRoute) {
		t.Errorf("no route: err = %v", err)
	}
}

func TestContext(t *testing.T) {
	net := pair(t, 1e9, 1e-6)
	a, b := sched.NewBuilder(0), sched.NewBuilder(1)
	for i := range 1 << 17 {
		a.Send(1, int32(i), chunk(0))
		b.Recv(0, int32(i), chunk(0))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, barrierParams(2), []sched.Program{a.P, b.P}, net, Config{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	res := run(t, 2, []sched.Program{a.P, b.P}, net, Config{})
	if want := float64(1<<17) * 1e-6; !near(res.Time, want) {
		t.Errorf("time %g, want %g (one latency per message on one connection)", res.Time, want)
	}
}

// TestRandomDeterministic runs a random all-to-all twice on a shared
// network and wants the same result.
func TestRandomDeterministic(t *testing.T) {
	const n = 6
	layout := &sched.Layout{Host: []int{0, 0, 0, 1, 1, 1}}
	net, err := FromModel(cost.Default(), layout, n, SharedNIC)
	if err != nil {
		t.Fatal(err)
	}
	progs := make([]sched.Program, n)
	seed := uint32(1)
	rnd := func(k int) int {
		seed = seed*1664525 + 1013904223
		return int(seed>>8) % k
	}
	sizes := make([][]int, n)
	for r := range n {
		sizes[r] = make([]int, n)
		for q := range n {
			sizes[r][q] = 1 + rnd(100000)
		}
	}
	for r := range n {
		b := sched.NewBuilder(r)
		for k := 1; k < n; k++ {
			to, from := (r+k)%n, (r-k+n)%n
			b.Send(to, int32(k), chunk(sizes[r][to]))
			b.RecvReduce(from, int32(k), chunk(sizes[from][r]))
		}
		progs[r] = b.P
	}
	cfg := Config{Gamma: 1e-10, Timeline: true}
	r1 := run(t, n, progs, net, cfg)
	r2 := run(t, n, progs, net, cfg)
	if !reflect.DeepEqual(r1, r2) {
		t.Fatal("two runs differ")
	}
	// Bytes are conserved: each host's port up carries what leaves it.
	var up0 int64
	for r := range 3 {
		for q := 3; q < n; q++ {
			up0 += int64(sizes[r][q]) * 4
		}
	}
	for id, l := range net.Links() {
		if l.Name == "h0 up" && r1.Links[id].Bytes != up0 {
			t.Errorf("h0 up carried %d bytes, want %d", r1.Links[id].Bytes, up0)
		}
	}
}
