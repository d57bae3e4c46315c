package sim

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func TestShortestRoute(t *testing.T) {
	// r0 and r1 reach r2 through a fast switch (2 hops) or a slow direct
	// link (1 hop); r3 is a rank that must not forward.
	net := NewNetwork(4)
	sw := net.AddNode("sw")
	slow := mustLink(t, net, Link{From: 0, To: 2, Bandwidth: 1e6, Latency: 1e-3})
	in0 := mustLink(t, net, Link{From: 0, To: sw, Bandwidth: 1e9})
	out2 := mustLink(t, net, Link{From: sw, To: 2, Bandwidth: 1e9})
	viaR3a := mustLink(t, net, Link{From: 1, To: 3, Bandwidth: 1e9})
	mustLink(t, net, Link{From: 3, To: 2, Bandwidth: 1e9})
	// Two equal two-hop paths from r1 to r2 through sw: the wider wins.
	in1a := mustLink(t, net, Link{From: 1, To: sw, Bandwidth: 1e8})
	in1b := mustLink(t, net, Link{From: 1, To: sw, Bandwidth: 5e8})

	if r, err := net.Route(0, 2, 0); err != nil || !slices.Equal(r, []int{slow}) {
		t.Errorf("0->2: %v %v, want the direct link (fewest hops)", r, err)
	}
	if r, err := net.Route(1, 2, 0); err != nil || !slices.Equal(r, []int{in1b, out2}) {
		t.Errorf("1->2: %v %v, want through sw by the wider link, not through rank 3", r, err)
	}
	_ = in1a
	if err := net.SetTransit(3, true); err != nil {
		t.Fatal(err)
	}
	if r, _ := net.Route(1, 2, 0); !slices.Equal(r, []int{viaR3a, viaR3a + 1}) {
		t.Errorf("1->2 with rank 3 transit: %v, want through rank 3 (as many hops, as little latency, wider)", r)
	}
	if _, err := net.Route(2, 0, 0); !errors.Is(err, ErrNoRoute) {
		t.Errorf("2->0: err = %v, want ErrNoRoute", err)
	}
	// Explicit routes override, per pair and per channel.
	if err := net.SetRoute(0, 2, []int{in0, out2}); err != nil {
		t.Fatal(err)
	}
	if err := net.SetChannelRoute(0, 2, 3, []int{slow}); err != nil {
		t.Fatal(err)
	}
	if r, _ := net.Route(0, 2, 0); !slices.Equal(r, []int{in0, out2}) {
		t.Errorf("0->2 ch0 after SetRoute: %v", r)
	}
	if r, _ := net.Route(0, 2, 3); !slices.Equal(r, []int{slow}) {
		t.Errorf("0->2 ch3 after SetChannelRoute: %v", r)
	}
	for _, bad := range [][]int{nil, {out2}, {in0}, {in0, out2, 99}, {viaR3a}} {
		if err := net.SetRoute(0, 2, bad); err == nil {
			t.Errorf("SetRoute(0, 2, %v): no error", bad)
		}
	}
}

func TestAddLinkErrors(t *testing.T) {
	net := NewNetwork(2)
	for _, l := range []Link{
		{From: 0, To: 0, Bandwidth: 1},
		{From: 0, To: 2, Bandwidth: 1},
		{From: 0, To: 1, Bandwidth: 0},
		{From: 0, To: 1, Bandwidth: math.NaN()},
		{From: 0, To: 1, Bandwidth: 1, Latency: -1},
		{From: 0, To: 1, Bandwidth: 1, Latency: math.Inf(1)},
	} {
		if _, err := net.AddLink(l); err == nil {
			t.Errorf("AddLink(%+v): no error", l)
		}
	}
	if err := net.SetNodeName(1, "gpu1"); err != nil {
		t.Fatal(err)
	}
	if err := net.SetNodeName(2, "x"); err == nil {
		t.Error("SetNodeName(2): no error")
	}
	id, err := net.AddLink(Link{From: 0, To: 1, Bandwidth: math.Inf(1)})
	if err != nil || net.Link(id).Name != "r0->gpu1" {
		t.Errorf("AddLink: %v, name %q", err, net.Link(id).Name)
	}
}

func TestFromModel(t *testing.T) {
	m := cost.Default()
	layout := &sched.Layout{Host: []int{0, 0, 1, 1}, NUMA: []int{0, 1, 0, 0}}
	net, err := FromModel(m, layout, 4)
	if err != nil {
		t.Fatal(err)
	}
	if net.NumLinks() != 12 || net.NumNodes() != 4 {
		t.Fatalf("%d links, %d nodes; want a full mesh of 12 links on 4 nodes", net.NumLinks(), net.NumNodes())
	}
	for a := range 4 {
		for b := range 4 {
			if a == b {
				continue
			}
			r, err := net.Route(a, b, 0)
			if err != nil || len(r) != 1 {
				t.Fatalf("route %d->%d: %v %v", a, b, r, err)
			}
			l, want := net.Link(r[0]), m.Between(layout, a, b)
			if l.From != a || l.To != b || l.Bandwidth != want.Beta || l.Latency != want.Alpha {
				t.Errorf("%d->%d: %+v, want %+v", a, b, l, want)
			}
		}
	}
	if _, err := FromModel(cost.Model{}, nil, 2); err == nil {
		t.Error("invalid model: no error")
	}
	if _, err := FromModel(m, layout, 3); err == nil {
		t.Error("layout of 4 for 3 ranks: no error")
	}
}

// TestSharedNIC: two ranks of one host sending to the other host share its
// port; with a direct mesh they do not.
func TestSharedNIC(t *testing.T) {
	m := cost.Default()
	inter := m.Link(cost.Inter)
	layout := &sched.Layout{Host: []int{0, 0, 1, 1}}
	const elems = 1 << 16
	bytes := float64(elems * 4)
	var progs []sched.Program
	for r := range 4 {
		b := sched.NewBuilder(r)
		if r < 2 {
			b.Send(r+2, 0, chunk(elems))
		} else {
			b.Recv(r-2, 0, chunk(elems))
		}
		progs = append(progs, b.P)
	}
	for _, c := range []struct {
		opts []MeshOption
		want float64
	}{
		{nil, inter.Alpha + bytes/inter.Beta},
		{[]MeshOption{SharedNIC}, inter.Alpha + 2*bytes/inter.Beta},
	} {
		net, err := FromModel(m, layout, 4, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(context.Background(), barrierParams(4), progs, net, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if !near(res.Time, c.want) {
			t.Errorf("options %v: time %g, want %g", c.opts, res.Time, c.want)
		}
	}
	net, _ := FromModel(m, layout, 4, SharedNIC)
	r, err := net.Route(1, 3, 0)
	if err != nil || len(r) != 4 || net.Link(r[1]).Name != "h0 up" || net.Link(r[2]).Name != "h1 down" {
		t.Errorf("route 1->3: %v %v", r, err)
	}
	if r, _ := net.Route(0, 1, 0); len(r) != 1 {
		t.Errorf("route 0->1 within a host: %v, want the direct link", r)
	}
}

// TestConcurrentRuns: runs may share a Network (its route cache is
// locked); go test -race checks it.
func TestConcurrentRuns(t *testing.T) {
	for _, mk := range []func() *Network{
		func() *Network { n, _ := FromModel(cost.Default(), nil, 4); return n },
		func() *Network {
			n := NewNetwork(4)
			sw := n.AddNode("sw")
			for r := range 4 {
				mustLink(t, n, Link{From: r, To: sw, Bandwidth: 1e9})
				mustLink(t, n, Link{From: sw, To: r, Bandwidth: 1e9})
			}
			return n
		},
	} {
		net := mk()
		var progs []sched.Program
		for r := range 4 {
			b := sched.NewBuilder(r)
			for k := 1; k < 4; k++ {
				b.Send((r+k)%4, 0, chunk(1000))
				b.Recv((r-k+4)%4, 0, chunk(1000))
			}
			progs = append(progs, b.P)
		}
		want := run(t, 4, progs, mk(), Config{})
		done := make(chan *Result)
		for range 4 {
			go func() {
				res, err := Run(context.Background(), barrierParams(4), progs, net, Config{})
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
		}
		for range 4 {
			if res := <-done; res == nil || res.Time != want.Time {
				t.Errorf("concurrent run: %v, want time %g", res, want.Time)
			}
		}
	}
}

// TestRankPorts: a rank's concurrent sends share its port; with SharedNIC
// as well, routes pass both.
func TestRankPorts(t *testing.T) {
	m := cost.Default()
	intra := m.Link(cost.Intra)
	const n, elems = 4, 1 << 16
	bytes := float64(elems * 4)
	// Rank 0 sends to ranks 1, 2 and 3 at once.
	progs := []sched.Program{}
	for r := range n {
		b := sched.NewBuilder(r)
		if r == 0 {
			for q := 1; q < n; q++ {
				b.Send(q, 0, chunk(elems))
			}
		} else {
			b.Recv(0, 0, chunk(elems))
		}
		progs = append(progs, b.P)
	}
	for _, c := range []struct {
		opts []MeshOption
		want float64
	}{
		{nil, intra.Alpha + bytes/intra.Beta},
		{[]MeshOption{RankPorts}, intra.Alpha + 3*bytes/intra.Beta},
	} {
		net, err := FromModel(m, nil, n, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		res := run(t, n, progs, net, Config{})
		if !near(res.Time, c.want) {
			t.Errorf("options %v: time %g, want %g", c.opts, res.Time, c.want)
		}
	}
	net, err := FromModel(m, &sched.Layout{Host: []int{0, 1}}, 2, RankPorts, SharedNIC)
	if err != nil {
		t.Fatal(err)
	}
	r, err := net.Route(0, 1, 0)
	var names []string
	for _, id := range r {
		names = append(names, net.Link(id).Name)
	}
	want := []string{"r0 tx", "r0 out->h0", "h0 up", "h1 down", "h1->r1 in", "r1 rx"}
	if err != nil || !slices.Equal(names, want) {
		t.Errorf("route 0->1: %q %v, want %q", names, err, want)
	}
	bad := m
	bad.Links[cost.Intra].Alpha = math.Inf(1)
	if _, err := FromModel(bad, nil, 2); err == nil {
		t.Error("infinite latency: no error")
	}
}
