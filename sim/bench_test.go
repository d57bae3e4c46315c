package sim_test

import (
	"context"
	"math"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sched/schedtest"
	"github.com/braid-ccl/braid/sim"
)

// pipelinedRing returns a segmented ring allreduce of count elements on n
// ranks (count a multiple of n·seg), every block cut into segments of seg
// elements, each its own message: algo's "segring" without its cap on the
// number of segments, written here so that the benchmark has exactly the
// segment size it names. Rank r issues, for each step s and segment j, the
// send of (s, j), which waits for the receive of (s−1, j), then the
// receive of (s, j).
func pipelinedRing(n, count, seg int) []sched.Program {
	blk := count / n
	nseg := blk / seg
	chunk := func(buf sched.Buf, b, j int) sched.Chunk {
		b = ((b % n) + n) % n
		return sched.Chunk{Buf: buf, Off: b*blk + j*seg, Len: seg}
	}
	progs := make([]sched.Program, n)
	for r := range n {
		bl := sched.NewBuilder(r)
		next, prev := (r+1)%n, (r+n-1)%n
		recv := make([][]int32, 2*(n-1)) // [step][segment]
		send := make([][]int32, 2*(n-1))
		for s := range 2 * (n - 1) {
			recv[s], send[s] = make([]int32, nseg), make([]int32, nseg)
			for j := range nseg {
				tag := int32(s*nseg + j)
				switch {
				case s == 0:
					send[s][j] = bl.Send(next, tag, chunk(sched.In, r, j))
				case s < n-1:
					send[s][j] = bl.Send(next, tag, chunk(sched.Out, r-s, j), recv[s-1][j])
				default:
					send[s][j] = bl.Send(next, tag, chunk(sched.Out, r+1-(s-(n-1)), j), recv[s-1][j])
				}
				if s < n-1 {
					c := bl.Copy(chunk(sched.In, r-s-1, j), chunk(sched.Out, r-s-1, j))
					recv[s][j] = bl.RecvReduce(prev, tag, chunk(sched.Out, r-s-1, j), c)
				} else {
					// The block was read by the send of step s−(n−1).
					k := s - (n - 1)
					recv[s][j] = bl.Recv(prev, tag, chunk(sched.Out, r-k, j), send[k][j])
				}
			}
		}
		bl.P.Final = []sched.Chunk{{Buf: sched.Out, Len: count}}
		progs[r] = bl.P
	}
	return progs
}

// TestPipelinedRing checks the benchmark's schedule: it is a correct
// allreduce (schedtest), and on a ring of equal links its time is that of
// the connection that carries 2(n−1)·nseg messages back to back,
// 2(n−1)·nseg·(α + S/β), plus at most the pipeline's fill.
func TestPipelinedRing(t *testing.T) {
	p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 4 * 3 * 2}
	progs := pipelinedRing(4, p.Count, 2)
	in := make([][]float64, 4)
	for r := range in {
		for i := range p.Count {
			in[r] = append(in[r], float64(r*100+i))
		}
	}
	for _, inPlace := range []bool{false, true} {
		out, err := schedtest.Run(p, progs, in, inPlace)
		if err != nil {
			t.Fatal(err)
		}
		for r := range out {
			for i, v := range out[r] {
				if want := float64(600 + 4*i); v != want {
					t.Fatalf("in place %v: rank %d element %d = %g, want %g", inPlace, r, i, v, want)
				}
			}
		}
	}

	m := cost.Default()
	const n, seg = 8, 1 << 12
	p = sched.Params{Coll: sched.Allreduce, NRanks: n, Count: n * seg * 64}
	net, err := sim.FromModel(m, nil, n)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(context.Background(), p, pipelinedRing(n, p.Count, seg), net, sim.Config{Gamma: m.Gamma})
	if err != nil {
		t.Fatal(err)
	}
	l := m.Link(cost.Intra)
	S := float64(seg * 4)
	msg := l.Alpha + S/l.Beta
	want := float64(2*(n-1)*64) * msg
	// The fill: the first segment of a step can go only after it has been
	// received and reduced on the step before; that costs at most one
	// message and one reduction per step (here none, as 64 segments keep
	// the connection busy meanwhile).
	fill := float64(2*(n-1)) * (msg + S*m.Gamma)
	if res.Time < want || res.Time > want+fill || res.Time > 1.05*want {
		t.Errorf("time %g s, want between %g and %g (and within 5 %%)", res.Time, want, math.Min(want+fill, 1.05*want))
	}
	t.Logf("pipelined ring: %g s, %g s back to back", res.Time, want)
}

// BenchmarkPipelinedRing16x1GiB simulates a 16-rank ring allreduce of 1 GiB
// of float32 in 64 KiB segments: 2·15·1024 messages per rank, 1.5 million
// steps in all.
func BenchmarkPipelinedRing16x1GiB(b *testing.B) {
	const n = 16
	p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: 1 << 28}
	progs := pipelinedRing(n, p.Count, 16<<10)
	benchSim(b, p, progs)
}

// BenchmarkSegring16x1GiB simulates algo's "segring" allreduce of 1 GiB of
// float32 on 16 ranks with Segment 64 KiB (which algo caps at 512 segments
// per block, 128 KiB each).
func BenchmarkSegring16x1GiB(b *testing.B) {
	const n = 16
	p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: 1 << 28, Segment: 16 << 10}
	progs := schedule(b, "segring", p)
	benchSim(b, p, progs)
}

func benchSim(b *testing.B, p sched.Params, progs []sched.Program) {
	m := cost.Default()
	net, err := sim.FromModel(m, p.Layout, p.NRanks)
	if err != nil {
		b.Fatal(err)
	}
	steps := 0
	for _, pr := range progs {
		steps += len(pr.Steps)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var res *sim.Result
	for b.Loop() {
		res, err = sim.Run(context.Background(), p, progs, net, sim.Config{Gamma: m.Gamma})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(steps), "steps")
	b.ReportMetric(float64(res.Events), "events")
	b.ReportMetric(res.Time*1e6, "sim-µs")
}

// BenchmarkAlltoallSharedNIC64 simulates 64 ranks on 8 hosts that each
// send 1 MiB to every other rank at once, through one port per host: 4032
// concurrent flows, 3584 of them sharing the 16 port links.
func BenchmarkAlltoallSharedNIC64(b *testing.B) {
	const n, hosts, elems = 64, 8, 1 << 18
	layout := &sched.Layout{Host: make([]int, n)}
	for r := range n {
		layout.Host[r] = r / (n / hosts)
	}
	p := sched.Params{Coll: sched.Barrier, NRanks: n, Layout: layout}
	progs := make([]sched.Program, n)
	for r := range n {
		bl := sched.NewBuilder(r)
		for k := 1; k < n; k++ {
			bl.Send((r+k)%n, 0, sched.Chunk{Buf: sched.Tmp, Len: elems})
			bl.Recv((r-k+n)%n, 0, sched.Chunk{Buf: sched.Tmp, Off: k * elems, Len: elems})
		}
		progs[r] = bl.P
	}
	net, err := sim.FromModel(cost.Default(), layout, n, sim.SharedNIC)
	if err != nil {
		b.Fatal(err)
	}
	var res *sim.Result
	for b.Loop() {
		if res, err = sim.Run(context.Background(), p, progs, net, sim.Config{}); err != nil {
			b.Fatal(err)
		}
	}
	// Every flow between hosts gets 1/448 of a port: each port carries
	// 8·56 MiB, all of which ends together.
	inter := cost.Default().Link(cost.Inter)
	if want := inter.Alpha + 8*56*elems*4/inter.Beta; math.Abs(res.Time-want) > 1e-9*want {
		b.Fatalf("time %g s, want %g s", res.Time, want)
	}
	b.ReportMetric(res.Time*1e6, "sim-µs")
	b.ReportMetric(float64(res.Events), "events")
}
