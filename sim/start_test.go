package sim_test

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
)

// near fails unless got equals want to 1e-9 s (far below any time here).
func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12+1e-9*math.Abs(want) {
		t.Errorf("%s = %.9g s, want %.9g s", what, got, want)
	}
}

// TestStartLinearBcast: in the linear broadcast the root sends to every
// rank at once over its own link, by rendezvous, so the message to rank k
// goes when both have arrived: rank k finishes at max(s_root, s_k) + α +
// M/β, and the root when its last message arrives.
func TestStartLinearBcast(t *testing.T) {
	m := cost.Default()
	l := m.Link(cost.Intra)
	const n, count = 5, 1 << 16
	one := l.Alpha + float64(count*4)/l.Beta
	for _, root := range []int{0, 3} {
		p := sched.Params{Coll: sched.Bcast, NRanks: n, Count: count, Root: root}
		progs := schedule(t, "linear", p)
		start := []float64{0, 3 * one, 0.5 * one, 7 * one, 0}
		res := simulate(t, p, progs, m, sim.Config{ElemSize: 4, Start: start})
		last := 0.0
		for k := range n {
			if k == root {
				continue
			}
			want := max(start[root], start[k]) + one
			near(t, "rank finish", res.Finish[k], want)
			last = max(last, want)
		}
		near(t, "root finish", res.Finish[root], last)
		near(t, "Time", res.Time, last)
		near(t, "AfterLast", res.AfterLast(), last-7*one)
		var sum float64
		for k := range n {
			sum += res.Finish[k] - start[k]
		}
		near(t, "AvgLatency", res.AvgLatency(), sum/n)
		if !reflect.DeepEqual(res.Start, start) {
			t.Errorf("Result.Start = %v, want %v", res.Start, start)
		}
	}
}

// TestStartRingLate: in the ring allreduce every rank's last step depends,
// through the ring, on every rank's first, and no two messages share a
// link, so one rank arriving d late delays every rank's finish by exactly
// d: the late rank's own latency is the balanced time T, the others' T +
// d.
func TestStartRingLate(t *testing.T) {
	m := cost.Default()
	for _, n := range []int{2, 5, 8} {
		p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: n << 12}
		progs := schedule(t, "ring", p)
		cfg := sim.Config{ElemSize: 4, Gamma: m.Gamma}
		bal := simulate(t, p, progs, m, cfg)
		T := bal.Time
		for _, late := range []int{0, n - 1} {
			d := 3.7 * T
			cfg.Start = make([]float64, n)
			cfg.Start[late] = d
			res := simulate(t, p, progs, m, cfg)
			for r := range n {
				near(t, "finish", res.Finish[r], T+d)
			}
			near(t, "late rank's latency", res.Latency(late), T)
			near(t, "AfterLast", res.AfterLast(), T)
			near(t, "AvgLatency", res.AvgLatency(), T+d*float64(n-1)/float64(n))
			near(t, "MaxLatency", res.MaxLatency(), T+d)
		}
	}
}

// TestStartShift: every rank starting at the same c shifts every time by c
// and leaves the latencies as they were.
func TestStartShift(t *testing.T) {
	m := cost.Default()
	p := sched.Params{Coll: sched.Allreduce, NRanks: 6, Count: 6 << 12, Layout: &sched.Layout{Host: []int{0, 0, 0, 1, 1, 1}}}
	progs := schedule(t, "rabenseifner", p)
	cfg := sim.Config{ElemSize: 4, Gamma: m.Gamma, StepOverhead: 1e-7}
	bal := simulate(t, p, progs, m, cfg)
	const c = 1e-3
	cfg.Start = []float64{c, c, c, c, c, c}
	res := simulate(t, p, progs, m, cfg)
	near(t, "Time", res.Time, bal.Time+c)
	for r := range 6 {
		near(t, "latency", res.Latency(r), bal.Latency(r))
	}
}

// TestStartZero: offsets of zero give exactly the results of no offsets
// (which TestTraceGolden pins to the simulator's earlier output), timeline
// included, for rendezvous and eager messages and with computation.
func TestStartZero(t *testing.T) {
	m := cost.Default()
	p := sched.Params{Coll: sched.Allreduce, NRanks: 6, Count: 6 << 14, Segment: 1 << 10,
		Layout: &sched.Layout{Host: []int{0, 0, 0, 1, 1, 1}}}
	net, err := sim.FromModel(m, p.Layout, p.NRanks, sim.SharedNIC)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"segring", "rabenseifner", "recdouble", "hier"} {
		progs := schedule(t, name, p)
		for _, eager := range []int64{0, 1 << 20} {
			cfg := sim.Config{Gamma: m.Gamma, CopyBandwidth: 5e9, StepOverhead: 2e-7, Eager: eager, Timeline: true}
			a, err := sim.Run(context.Background(), p, progs, net, cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Start = make([]float64, p.NRanks)
			b, err := sim.Run(context.Background(), p, progs, net, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s eager %d: zero offsets change the result: time %g against %g", name, eager, b.Time, a.Time)
			}
			if !reflect.DeepEqual(a.Start, make([]float64, p.NRanks)) {
				t.Errorf("%s: Result.Start = %v without offsets, want zeros", name, a.Start)
			}
		}
	}
}

// TestStartErrors: offsets of the wrong count, negative, NaN or infinite
// are refused, naming the rank.
func TestStartErrors(t *testing.T) {
	m := cost.Default()
	p := sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: 3}
	progs := schedule(t, "ring", p)
	net, err := sim.FromModel(m, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		start []float64
		want  string
	}{
		{[]float64{0, 0}, "2 start offsets for 3 ranks"},
		{[]float64{0, -1e-6, 0}, "rank 1"},
		{[]float64{0, 0, math.NaN()}, "rank 2"},
		{[]float64{math.Inf(1), 0, 0}, "rank 0"},
	} {
		_, err := sim.Run(context.Background(), p, progs, net, sim.Config{Start: c.start})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Start %v: error %v, want one containing %q", c.start, err, c.want)
		}
	}
}

// TestStartEmptyProgram: a rank with nothing to do finishes when it starts.
func TestStartEmptyProgram(t *testing.T) {
	m := cost.Default()
	p := sched.Params{Coll: sched.Allreduce, NRanks: 1, Count: 8}
	progs := []sched.Program{{Rank: 0}}
	res := simulate(t, p, progs, m, sim.Config{Start: []float64{2e-3}})
	near(t, "finish", res.Finish[0], 2e-3)
	near(t, "latency", res.Latency(0), 0)
}
