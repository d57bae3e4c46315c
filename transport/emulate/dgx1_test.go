package emulate_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
	"github.com/braid-ccl/braid/topo"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/emulate"
	"github.com/braid-ccl/braid/transport/inproc"
)

// dilate returns t with time stretched by s: every bandwidth divided by
// s, every latency multiplied by it. A schedule on the result takes s
// times as long as on t.
func dilate(t *topo.Topology, s float64) *topo.Topology {
	d := t.Clone()
	for i := range d.Links {
		d.Links[i].Bandwidth /= s
		d.Links[i].Latency *= s
	}
	return d
}

// fromSim returns the emulated network of a simulated one: the same
// links, and for each pair of ranks the route the simulator gives it.
func fromSim(net *sim.Network) (*emulate.Network, error) {
	n := net.NRanks()
	out := &emulate.Network{Routes: make([][][]int, n)}
	for _, l := range net.Links() {
		out.Links = append(out.Links, emulate.Link{Bandwidth: l.Bandwidth, Latency: time.Duration(l.Latency * 1e9)})
	}
	for a := range n {
		out.Routes[a] = make([][]int, n)
		for b := range n {
			if a != b {
				r, err := net.Route(a, b, 0)
				if err != nil {
					return nil, err
				}
				out.Routes[a][b] = r
			}
		}
	}
	return out, out.Validate()
}

// runEmulated runs the schedule progs of p on n goroutine ranks of an
// inproc world wrapped by a fresh emulator of net, and returns the time
// from the start until the last rank is done, and every rank's output.
func runEmulated(t *testing.T, net *emulate.Network, p sched.Params, progs []sched.Program, in [][]byte) (time.Duration, [][]byte) {
	t.Helper()
	e, err := emulate.New(net)
	if err != nil {
		t.Fatal(err)
	}
	n := p.NRanks
	world := inproc.NewWorld(n, nil)
	meshes := make([]transport.Mesh, n)
	for r := range meshes {
		meshes[r] = e.Wrap(r, world[r])
	}
	defer func() {
		for _, m := range meshes {
			m.Close()
		}
	}()
	out := make([][]byte, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for r := range n {
		out[r] = make([]byte, 4*p.OutLen(r))
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := meshes[r]
			env := &exec.Env{Conn: m.Conn, Tag: transport.Tag{Comm: 9, Seq: 1}}
			errs[r] = exec.Run(ctx, &progs[r], env, exec.Buffers{In: in[r], Out: out[r], DType: dtype.Float32, Op: dtype.Sum, NRanks: n})
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return took, out
}

// TestDGX1Broadcast runs, on four goroutine ranks over inproc links
// emulating the NVLinks and PCIe of GPUs 1, 5, 4 and 6 of a DGX-1 V100 (the
// allocation of Blink, MLSys 2020, §5.2.1, that no NVLink ring spans), a
// broadcast of 8 MiB from GPU 1 twice: over Blink's packed trees (treepack)
// and over a ring (the pipelined chain along 1, 5, 4, 6, whose hops are all
// NVLinks). Time is stretched 1000 times (dilate) so that this host's
// copies do not count. It checks that both give the right result, that the
// measured time of the trees is within 20 % of the simulator's prediction
// for the same network, and that the trees beat the ring.
//
// The clock is real: on a loaded machine a run can be slow, never fast,
// so each schedule runs up to three times and the fastest run counts; the
// timing bounds are asserted only with BRAID_TIMED=1 (correctness always).
func TestDGX1Broadcast(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a few seconds of wall-clock time")
	}
	const stretch = 1000
	const count = 2 << 20 // float32: 8 MiB
	const segment = 128 << 10
	dgx := topo.DGX1V100()
	tp := dilate(dgx, stretch)
	gpus := dgx.GPUs()
	devs := []int{gpus[1], gpus[5], gpus[4], gpus[6]} // ranks 0-3: the ring's order
	g, err := pack.FromTopology(dgx, devs, pack.Select{Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pack.Broadcast(g, 0, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("packing: %d trees, rate %.4g GB/s", len(plan.Trees), plan.Rate)
	trees := &sched.Trees{}
	for _, tr := range plan.Trees {
		trees.Tree = append(trees.Tree, sched.Tree{Root: tr.Root, Parent: tr.Parent, Weight: tr.Weight})
	}
	snet, err := sim.FromTopology(tp, devs)
	if err != nil {
		t.Fatal(err)
	}
	enet, err := fromSim(snet)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := algo.Lookup(sched.Bcast, "chain")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	in := make([][]byte, 4)
	in[0] = make([]byte, 4*count)
	for i := range in[0] {
		in[0][i] = byte(rng.IntN(256))
	}
	type result struct{ predicted, measured float64 } // seconds, real machine
	results := map[string]result{}
	for _, tc := range []struct {
		name string
		a    algo.Algorithm
		p    sched.Params
	}{
		{"treepack", algo.TreepackBcast, sched.Params{Coll: sched.Bcast, NRanks: 4, Count: count, Segment: segment, Trees: trees}},
		{"ring", chain, sched.Params{Coll: sched.Bcast, NRanks: 4, Count: count, Segment: segment}},
	} {
		if err := tc.a.Supports(tc.p); err != nil {
			t.Fatal(err)
		}
		progs := algo.Programs(tc.a, tc.p)
		// The emulator books a link when the send is issued, whether or
		// not the receive is posted: the simulator's eager messages.
		res, err := sim.Run(context.Background(), tc.p, progs, snet, sim.Config{Eager: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		best := time.Duration(1<<63 - 1)
		for attempt := 0; attempt < 3; attempt++ {
			took, out := runEmulated(t, enet, tc.p, progs, in)
			for r := range out {
				if !bytes.Equal(out[r], in[0]) {
					t.Fatalf("%s: rank %d's result differs from the root's input", tc.name, r)
				}
			}
			best = min(best, took)
			if ratio := took.Seconds() / res.Time; ratio > 0.8 && ratio < 1.2 {
				break
			}
		}
		results[tc.name] = result{res.Time / stretch, best.Seconds() / stretch}
		gbps := func(s float64) float64 { return 4 * count / s / 1e9 }
		t.Logf("%-8s predicted %7.3f ms (%5.1f GB/s), measured %7.3f ms (%5.1f GB/s) on the emulated DGX-1 V100 (%.0f× slower in wall time), ratio %.3f",
			tc.name, res.Time/stretch*1e3, gbps(res.Time/stretch), best.Seconds()/stretch*1e3, gbps(best.Seconds()/stretch), float64(stretch), best.Seconds()/res.Time)
	}
	// Timings are a measurement, not a test (a loaded CI machine, or
	// the race detector, is slower than the model, never faster):
	// BRAID_TIMED=1 turns the bounds into assertions, as the issue's
	// check does by hand: BRAID_TIMED=1 go test -v -run DGX1 ./transport/emulate
	report := t.Logf
	if os.Getenv("BRAID_TIMED") != "" {
		report = t.Errorf
	}
	tr, ring := results["treepack"], results["ring"]
	if r := tr.measured / tr.predicted; r < 0.8 || r > 1.2 {
		report("treepack: measured %.3f ms, predicted %.3f ms: off by more than 20 %%", tr.measured*1e3, tr.predicted*1e3)
	}
	if tr.measured >= ring.measured {
		report("treepack (%.3f ms) is no faster than the ring (%.3f ms)", tr.measured*1e3, ring.measured*1e3)
	}
}
