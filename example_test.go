package braid_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/braid-ccl/braid"
)

// Four goroutine ranks sum their vectors in place.
func Example() {
	comms, err := braid.NewLocal(4, nil)
	if err != nil {
		panic(err)
	}
	out := make([][]float32, 4)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := []float32{float32(c.Rank()), 1}
			if err := c.Allreduce(context.Background(), v, v, braid.Sum); err != nil {
				panic(err)
			}
			out[c.Rank()] = v
		}()
	}
	wg.Wait()
	fmt.Println(out)
	// Output: [[6 4] [6 4] [6 4] [6 4]]
}
