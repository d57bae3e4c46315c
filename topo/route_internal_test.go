package topo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkRoutes compares, for every ordered pair of t's devices, the routes
// of Router.Route, Router.Relay and Router.From with those of the search
// for one pair (pairRoute, the router before From existed).
func checkRoutes(t *testing.T, name string, tp *Topology, allow func(Link) bool, via func(int) bool) {
	t.Helper()
	r := tp.Router(allow)
	n := len(tp.Devices)
	bad := 0
	for a := range n {
		from := r.From(a, via)
		for b := range n {
			for _, direct := range []bool{true, false} {
				want := r.pairRoute(a, b, via, direct)
				got, one := from.Route(b), r.Route(a, b, via)
				if !direct {
					got, one = from.Relay(b), r.Relay(a, b, via)
				}
				if !slices.Equal(got, want) || !slices.Equal(one, want) {
					if bad++; bad <= 5 {
						t.Errorf("%s: %s -> %s (direct %v): From gives %v, Router %v, the pair's search %v",
							name, tp.Devices[a].ID, tp.Devices[b].ID, direct, got, one, want)
					}
				}
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d routes differ in all", name, bad)
	}
}

// TestRoutesMatchPairSearch checks that the routes found from one source
// at a time are those of the search for each pair, on every preset alone
// and in clusters of 2 nodes, over every link and over NVLink or PCIe
// alone, through the default devices (no GPU), through every device, and
// through the non-GPUs but one of each kind (as pack leaves ranks out); and
// in clusters of 3 nodes over every link through the default devices and
// all but one of each kind.
func TestRoutesMatchPairSearch(t *testing.T) {
	allows := map[string]func(Link) bool{
		"all":    nil,
		"nvlink": func(l Link) bool { return l.Class == NVLink },
		"pcie":   func(l Link) bool { return l.Class != NVLink },
	}
	for _, name := range Presets() {
		for _, nodes := range []int{1, 2, 3} {
			tp, err := Cluster(name, nodes, 0)
			if err != nil {
				t.Fatal(err)
			}
			firstOfKind := map[Kind]int{}
			for i, d := range tp.Devices {
				if _, ok := firstOfKind[d.Kind]; !ok {
					firstOfKind[d.Kind] = i
				}
			}
			vias := map[string]func(int) bool{
				"default": nil,
				"any":     func(int) bool { return true },
				"some": func(i int) bool {
					d := tp.Devices[i]
					return d.Kind != GPU && firstOfKind[d.Kind] != i
				},
			}
			for an, allow := range allows {
				for vn, via := range vias {
					if nodes == 3 && (an != "all" || vn == "any") {
						continue // the largest clusters: the common case only, for time
					}
					checkRoutes(t, fmt.Sprintf("%dx%s allow %s via %s", nodes, name, an, vn), tp, allow, via)
				}
			}
		}
	}
}

// TestRoutesMatchPairSearchRandom does the same on random graphs whose
// links take few distinct capacities (many ties, several routes of equal
// width and length), some one-way, some parallel.
func TestRoutesMatchPairSearchRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	kinds := []Kind{GPU, GPU, CPU, PCIeSwitch, NIC, NetSwitch}
	for trial := range 60 {
		n := 3 + rng.IntN(14)
		var tp Topology
		for i := range n {
			if _, err := tp.AddDevice(Device{ID: fmt.Sprint("d", i), Kind: kinds[rng.IntN(len(kinds))], NUMA: -1}); err != nil {
				t.Fatal(err)
			}
		}
		for range rng.IntN(4 * n) {
			a, b := rng.IntN(n), rng.IntN(n)
			if a == b {
				continue
			}
			l := Link{From: a, To: b, Class: Class(rng.IntN(2)), Count: 1 + rng.IntN(2), Bandwidth: float64(5 * (1 + rng.IntN(3)))}
			if err := tp.AddLink(l); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(4) > 0 {
				l.From, l.To = b, a
				if err := tp.AddLink(l); err != nil {
					t.Fatal(err)
				}
			}
		}
		pass := make([]bool, n)
		for i := range pass {
			pass[i] = rng.IntN(3) > 0
		}
		checkRoutes(t, fmt.Sprintf("trial %d default", trial), &tp, nil, nil)
		checkRoutes(t, fmt.Sprintf("trial %d random via", trial), &tp, nil, func(i int) bool { return pass[i] })
		checkRoutes(t, fmt.Sprintf("trial %d nvlink", trial), &tp, func(l Link) bool { return l.Class == NVLink }, nil)
	}
}

// TestRoutesLargeCluster checks the routes between the GPUs of a
// 16-node Cedar cluster, where each source's routes come from one search,
// against the pair search for a sample of pairs.
func TestRoutesLargeCluster(t *testing.T) {
	tp, err := Cluster("cedar", 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := tp.Router(nil)
	gpus := tp.GPUs()
	for k, a := range gpus {
		from := r.From(a, nil)
		for j, b := range gpus {
			if (k+j)%7 != 0 {
				continue
			}
			if got, want := from.Route(b), r.pairRoute(a, b, nil, true); !slices.Equal(got, want) {
				t.Fatalf("%s -> %s: %v, want %v", tp.Devices[a].ID, tp.Devices[b].ID, got, want)
			}
			if got, want := from.Relay(b), r.pairRoute(a, b, nil, false); !slices.Equal(got, want) {
				t.Fatalf("relayed %s -> %s: %v, want %v", tp.Devices[a].ID, tp.Devices[b].ID, got, want)
			}
		}
	}
}

// TestRoutesWidth checks Routes.Width on the DGX-1 V100 and the HGX H200:
// two NVLinks between GPUs 0 and 3, the PCIe of a switch between GPUs 0
// and 5 (no NVLink), the NVSwitch's eighteen links between any two H200s.
func TestRoutesWidth(t *testing.T) {
	dgx := DGX1V100()
	g := dgx.GPUs()
	from := dgx.Router(nil).From(g[0], nil)
	for _, c := range []struct {
		to   int
		want float64
	}{{g[3], 2 * nvlink2GBps}, {g[1], nvlink2GBps}, {g[5], pcie3GBps}, {g[0], math.Inf(1)}, {-1, 0}} {
		if w := from.Width(c.to); w != c.want {
			t.Errorf("dgx1-v100 gpu0 to device %d: width %g, want %g", c.to, w, c.want)
		}
	}
	hgx := HGXH200()
	h := hgx.GPUs()
	if w := hgx.Router(nil).From(h[2], nil).Width(h[7]); w != 18*nvlink4GBps {
		t.Errorf("hgx-h200 gpu2 to gpu7: width %g, want %d", w, 18*nvlink4GBps)
	}
}
