package pack_test

import (
	"testing"

	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/topo"
)

// BenchmarkPlan16 measures planning for 16 GPUs (the target is well under
// 100 ms): the three-phase allreduce plan of a DGX-2 (one-hop trees) and
// of two DGX-1 V100 (a packing per server), and the generic broadcast
// packing on the DGX-2's NVSwitch graph and on the whole two-DGX-1 graph
// with PCIe and network routes.
func BenchmarkPlan16(b *testing.B) {
	dgx2 := topo.DGX2()
	two, err := topo.Preset("2xdgx1-v100")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("allreduce/dgx2", func(b *testing.B) {
		for b.Loop() {
			if _, err := pack.PlanAllReduce(dgx2, dgx2.GPUs(), pack.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("allreduce/2xdgx1-v100", func(b *testing.B) {
		for b.Loop() {
			if _, err := pack.PlanAllReduce(two, two.GPUs(), pack.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name string
		t    *topo.Topology
		sel  pack.Select
	}{
		{"broadcast/dgx2", dgx2, pack.Select{Routes: pack.Relayed, Classes: []topo.Class{topo.NVLink}}},
		{"broadcast/2xdgx1-v100", two, pack.Select{Routes: pack.Direct | pack.Relayed}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				g, err := pack.FromTopology(tc.t, tc.t.GPUs(), tc.sel)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := pack.Broadcast(g, 0, pack.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBroadcastDGX1V8 measures the packing of Blink §3.2 on all
// eight GPUs of a DGX-1 V100.
func BenchmarkBroadcastDGX1V8(b *testing.B) {
	tp := topo.DGX1V100()
	g, err := pack.FromTopology(tp, tp.GPUs(), pack.Select{Classes: []topo.Class{topo.NVLink}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := pack.Broadcast(g, 0, pack.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
