package braid_test

import (
	"context"
	"sync"
	"testing"

	"github.com/braid-ccl/braid"
)

// BenchmarkCallOverhead times an 8-byte allreduce on a one-rank
// communicator: the fixed cost of Braid's call path (argument checks, plan
// lookup, executor) without any transport.
func BenchmarkCallOverhead(b *testing.B) {
	comms, err := braid.NewLocal(1, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	v := []float32{1, 2}
	b.ReportAllocs()
	for b.Loop() {
		if err := comms[0].Allreduce(ctx, v, v, braid.Sum); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllreduceInproc times an 8-byte allreduce between two goroutine
// ranks.
func BenchmarkAllreduceInproc(b *testing.B) {
	comms, err := braid.NewLocal(2, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	n := b.N
	var wg sync.WaitGroup
	b.ResetTimer()
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := []float32{1, 2}
			for i := 0; i < n; i++ {
				if err := c.Allreduce(ctx, v, v, braid.Sum); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
