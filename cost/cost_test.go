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
	if lat.Gamma != 0 || lat.Memory != 0 || lat.Core != 0 || lat.Overhead != m.Overhead {
		t.Errorf("Latencies = γ %g, memory %g, core %g, o %g; want 0, 0, 0, %g", lat.Gamma, lat.Memory, lat.Core, lat.Overhead, m.Overhead)
	}
	m.Memory, m.Core = 10e9, 0
	// Memory-bound: 4 ranks × 1 MB at 10 GB/s is 400 µs, above the link's
	// 100 µs; the latencies add.
	if got, want := m.Bounded(nil, 4, 100e-6, 5e-6, 1e6, 1), 405e-6; math.Abs(got-want) > 1e-12 {
		t.Errorf("Bounded (memory-bound) = %g, want %g", got, want)
	}
	// Link-bound.
	if got, want := m.Bounded(nil, 4, 1e-3, 5e-6, 1e6, 1), 1e-3; got != want {
		t.Errorf("Bounded (link-bound) = %g, want %g", got, want)
	}
	// Bound by a thread: 2 ranks share 10 GB/s (200 µs for 1 MB each), but
	// one thread moves 2 GB/s (500 µs); two threads halve it.
	m.Core, m.Cache = 2e9, 0
	if got, want := m.Bounded(nil, 2, 100e-6, 5e-6, 1e6, 1), 505e-6; math.Abs(got-want) > 1e-12 {
		t.Errorf("Bounded (one thread) = %g, want %g", got, want)
	}
	if got, want := m.Bounded(nil, 2, 100e-6, 5e-6, 1e6, 2), 255e-6; math.Abs(got-want) > 1e-12 {
		t.Errorf("Bounded (two threads) = %g, want %g", got, want)
	}
	// Many ranks: the host's memory is the tighter (8 × 1 MB at 10 GB/s).
	if got, want := m.Bounded(nil, 8, 100e-6, 5e-6, 1e6, 1), 805e-6; math.Abs(got-want) > 1e-12 {
		t.Errorf("Bounded (8 ranks) = %g, want %g", got, want)
	}
	if got := m.Own(1e6, 0); got != 500e-6 {
		t.Errorf("Own(1 MB, 0 threads) = %g, want 500e-6 (counted as one)", got)
	}
	// Bytes a core's caches hold are left out.
	m.Cache = 0.5e6
	if got, want := m.Own(1e6, 1), 250e-6; math.Abs(got-want) > 1e-12 {
		t.Errorf("Own(1 MB) beyond a 0.5 MB cache = %g, want %g", got, want)
	}
	if got := m.Own(0.4e6, 1); got != 0 {
		t.Errorf("Own(0.4 MB) within a 0.5 MB cache = %g, want 0", got)
	}
	m.Core = 0
	if got := m.Own(1e6, 1); got != 0 {
		t.Errorf("Own without a limit = %g, want 0", got)
	}
	bad := Default()
	bad.Core = math.Inf(1)
	if bad.Valid() == nil {
		t.Error("infinite core bandwidth accepted")
	}
	bad = Default()
	bad.Cache = -1
	if bad.Valid() == nil {
		t.Error("negative cache size accepted")
	}
}

func TestForCall(t *testing.T) {
	m := Default()
	small := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 64 << 10} // 256 KiB of float32 in, as much out
	if got := m.ForCall(small, 4).Gamma; got != m.CacheGamma {
		t.Errorf("γ of a call in cache = %g, want CacheGamma %g", got, m.CacheGamma)
	}
	big := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 1 << 20}
	if got := m.ForCall(big, 4).Gamma; got != m.Gamma {
		t.Errorf("γ of a call beyond the cache = %g, want Gamma %g", got, m.Gamma)
	}
	m.SelfCopy = false
	if got := m.ForCall(small, 4).Gamma; got != m.Gamma {
		t.Errorf("γ without SelfCopy = %g, want Gamma %g", got, m.Gamma)
	}
	bad := Default()
	bad.Written = math.NaN()
	if bad.Valid() == nil {
		t.Error("a NaN Written accepted")
	}
	if l := Default().Latencies(); l.Written != 0 || l.CacheGamma != 0 {
		t.Errorf("Latencies keeps Written %g, CacheGamma %g", l.Written, l.CacheGamma)
	}
}
