package cost

import (
	"math"
	"testing"

	"github.com/braid-ccl/braid/sched"
)

func TestDefaultValid(t *testing.T) {
	if err := Default().Valid(); err != nil {
		t.Fatal(err)
	}
	bad := Default()
	bad.Links[Cross].Beta = 0
	if bad.Valid() == nil {
		t.Fatal("zero bandwidth accepted")
	}
}

func TestClassOf(t *testing.T) {
	l := sched.NewLayout([]string{"a", "a", "b", "b"}, []int{0, 1, 0, 0})
	cases := []struct {
		a, b int
		want Class
	}{{0, 0, Intra}, {0, 1, Cross}, {0, 2, Inter}, {2, 3, Intra}, {1, 3, Inter}}
	for _, c := range cases {
		if got := ClassOf(l, c.a, c.b); got != c.want {
			t.Errorf("ClassOf(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	m := Default()
	if got := m.Worst(l, 4); got != m.Links[Inter] {
		t.Errorf("Worst = %v, want the inter link", got)
	}
	if got := m.Worst(l, 2); got != m.Links[Cross] {
		t.Errorf("Worst of 2 = %v, want the cross link", got)
	}
	if got := m.Worst(nil, 8); got != m.Links[Intra] {
		t.Errorf("Worst(nil) = %v, want the intra link", got)
	}
	if got := (Link{Alpha: 1e-6, Beta: 1e9}).Time(1e3); got != 2e-6 {
		t.Errorf("Time = %g, want 2e-6", got)
	}
	for _, c := range Classes() {
		if d, err := ParseClass(c.String()); err != nil || d != c {
			t.Errorf("ParseClass(%q) = %v, %v", c, d, err)
		}
	}
}

func TestShared(t *testing.T) {
	m := Default()
	m.Memory = 50e9
	// Nil layout: all 8 ranks on one host.
	if got, want := m.Shared(nil, 8, 1e6), 8*1e6/50e9; got != want {
		t.Errorf("Shared(nil, 8) = %g, want %g", got, want)
	}
	// Three ranks on host a, one on b: the busiest host has three.
	l := sched.NewLayout([]string{"a", "b", "a", "a"}, nil)
	if got, want := m.Shared(l, 4, 1e6), 3*1e6/50e9; got != want {
		t.Errorf("Shared(layout) = %g, want %g", got, want)
	}
	m.Memory = 0
	if got := m.Shared(nil, 8, 1e6); got != 0 {
		t.Errorf("Shared without a limit = %g, want 0", got)
	}
	bad := Default()
	bad.Memory = -1
	if bad.Valid() == nil {
		t.Error("negative memory bandwidth accepted")
	}
	bad = Default()
	bad.Eager = math.NaN()
	if bad.Valid() == nil {
		t.Error("NaN eager limit accepted")
	}
}

func TestLatenciesAndBounded(t *testing.T) {
	m := Default()
	lat := m.Latencies()
	for _, c := range Classes() {
		if got, want := lat.Links[c].Time(1e9), m.Links[c].Alpha; got != want {
			t.Errorf("%v: Latencies' time of 1 GB = %g, want α = %g", c, got, want)
		}
	}
	if lat.Gamma != 0 || lat.Memory != 0 || lat.Overhead != m.Overhead {
		t.Errorf("Latencies = γ %g, memory %g, o %g; want 0, 0, %g", lat.Gamma, lat.Memory, lat.Overhead, m.Overhead)
	}
	m.Memory = 10e9
	// Memory-bound: 4 ranks × 1 MB at 10 GB/s is 400 µs, above the link's
	// 100 µs; the latencies add.
	if got, want := m.Bounded(nil, 4, 100e-6, 5e-6, 1e6), 405e-6; math.Abs(got-want) > 1e-12 {
		t.Errorf("Bounded (memory-bound) = %g, want %g", got, want)
	}
	// Link-bound.
	if got, want := m.Bounded(nil, 4, 1e-3, 5e-6, 1e6), 1e-3; got != want {
		t.Errorf("Bounded (link-bound) = %g, want %g", got, want)
	}
}
