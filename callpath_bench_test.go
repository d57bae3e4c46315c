package braid_test

import (
	"context"
	"testing"

	"github.com/braid-ccl/braid"
)

// BenchmarkCallOverheadShm times an 8-byte allreduce on a one-rank
// communicator through the host's shared area: the fixed cost of Braid's
// call path to the area (arguments, plan, sequence and ticket, the
// check's registration, arrival stamps, confirmation) and the area's own
// flag protocol, without a peer to wait for.
func BenchmarkCallOverheadShm(b *testing.B) {
	comms, err := braid.NewLocal(1, &braid.Options{Algo: "shm"})
	if err != nil {
		b.Fatal(err)
	}
	defer comms[0].Close()
	ctx := context.Background()
	v := []float32{1, 2}
	if a, _, err := comms[0].Explain("allreduce", len(v), braid.Float32, 0); err != nil || a != "shm" {
		b.Fatalf("the call does not go through the area: %q, %v", a, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := comms[0].Allreduce(ctx, v, v, braid.Sum); err != nil {
			b.Fatal(err)
		}
	}
}
