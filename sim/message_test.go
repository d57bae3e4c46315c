package sim_test

import (
	"context"
	"testing"

	"github.com/braid-ccl/braid/sim"
)

// TestMessageTime: one message's time is half a ping-pong's round trip on
// the simulator's model, each way its route's latency, the step overhead
// and the bytes over the bottleneck; here the two directions differ, so a
// one-way time of either alone would fail.
func TestMessageTime(t *testing.T) {
	net := sim.NewNetwork(3)
	sw := net.AddNode("sw")
	for _, l := range []sim.Link{
		{From: 0, To: sw, Bandwidth: 1e9, Latency: 1e-6},
		{From: sw, To: 1, Bandwidth: 4e9, Latency: 2e-6},
		{From: 1, To: 0, Bandwidth: 2e9, Latency: 5e-6},
		{From: 2, To: 0, Bandwidth: 1e9},
		{From: 0, To: 2, Bandwidth: 1e9},
	} {
		if _, err := net.AddLink(l); err != nil {
			t.Fatal(err)
		}
	}
	const bytes, overhead = 1 << 16, 0.5e-6
	there := 3e-6 + overhead + bytes/1e9
	back := 5e-6 + overhead + bytes/2e9
	ctx := context.Background()
	// Start and ElemSize do not change a message's time.
	cfg := sim.Config{StepOverhead: overhead, ElemSize: 8, Start: []float64{1, 2, 3}}
	for _, pair := range [][2]int{{0, 1}, {1, 0}} {
		got, err := sim.MessageTime(ctx, net, cfg, pair[0], pair[1], bytes)
		if err != nil {
			t.Fatal(err)
		}
		near(t, "MessageTime", got, (there+back)/2)
	}
	for _, bad := range [][3]int{{0, 0, 8}, {0, 3, 8}, {-1, 1, 8}, {0, 1, -8}} {
		if _, err := sim.MessageTime(ctx, net, cfg, bad[0], bad[1], int64(bad[2])); err == nil {
			t.Errorf("MessageTime(%d, %d, %d B): no error", bad[0], bad[1], bad[2])
		}
	}
	if _, err := sim.MessageTime(ctx, nil, cfg, 0, 1, 8); err == nil {
		t.Error("MessageTime on a nil network: no error")
	}
}
