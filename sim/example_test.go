package sim_test

import (
	"context"
	"fmt"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
)

// Two ranks on different hosts exchange 1 MiB; rank 1 adds what it gets
// to its own data.
func ExampleRun() {
	const count = 1 << 18 // float32 elements
	p := sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: count, Layout: &sched.Layout{Host: []int{0, 1}}}
	var progs []sched.Program
	for r := range 2 {
		b := sched.NewBuilder(r)
		c := b.Copy(sched.Chunk{Buf: sched.In, Len: count}, sched.Chunk{Buf: sched.Out, Len: count})
		b.Send(1-r, 0, sched.Chunk{Buf: sched.In, Len: count})
		b.RecvReduce(1-r, 0, sched.Chunk{Buf: sched.Out, Len: count}, c)
		progs = append(progs, b.P)
	}
	m := cost.Default() // 25 µs and 1.25 GB/s between hosts, γ = 0.1 ns/B
	net, err := sim.FromModel(m, p.Layout, p.NRanks)
	if err != nil {
		panic(err)
	}
	res, err := sim.Run(context.Background(), p, progs, net, sim.Config{Gamma: m.Gamma, InPlace: true})
	if err != nil {
		panic(err)
	}
	// α + M/β + M·γ = 25 + 838.9 + 104.9 µs
	fmt.Printf("%.1f µs, %d messages, link r0->r1 %.0f%% used\n", res.Time*1e6, res.Messages, 100*res.Links[0].Utilization)
	// Output: 968.7 µs, 2 messages, link r0->r1 87% used
}
