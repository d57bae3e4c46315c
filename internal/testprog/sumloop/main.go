// Command sumloop is a test program: every rank runs allreduce (sum of
// float32) in a loop and checks every element of every result, so that a
// fault in the middle of a call (a daemon or rank killed) shows as a wrong
// result or an error, never as a silent one. It prints, on rank 0, the
// algorithm the planner would choose now and the mean time per call.
//
//	SUMLOOP_ITERS  iterations (default 20)
//	SUMLOOP_COUNT  float32 elements per allreduce (default 1<<24, 64 MiB)
//
// A rank whose call fails or is wrong prints "rank R: ERROR ..." to stderr
// and exits 3; one that finishes prints "rank R: ok ..." and exits 0.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/braid-ccl/braid"
)

func env(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

func main() {
	ctx := context.Background()
	c, err := braid.Init(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(2)
	}
	defer c.Close()
	iters, count := env("SUMLOOP_ITERS", 20), env("SUMLOOP_COUNT", 1<<24)
	n := c.Size()
	buf := make([]float32, count)
	t0 := time.Now()
	for i := range iters {
		// Element j of rank r is (r+1)·(j%7+i%3+1): small integers,
		// exact in float32 at any summation order.
		for j := range buf {
			buf[j] = float32((c.Rank() + 1) * (j%7 + i%3 + 1))
		}
		if err := c.Allreduce(ctx, buf, buf, braid.Sum); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: ERROR call %d: %v\n", c.Rank(), i, err)
			os.Exit(3)
		}
		for j, v := range buf {
			if want := float32(n * (n + 1) / 2 * (j%7 + i%3 + 1)); v != want {
				fmt.Fprintf(os.Stderr, "rank %d: ERROR call %d: element %d is %v, want %v\n", c.Rank(), i, j, v, want)
				os.Exit(3)
			}
		}
	}
	per := time.Since(t0) / time.Duration(max(iters, 1))
	algo, _, _ := c.Explain("allreduce", count, braid.Float32, 0)
	fmt.Fprintf(os.Stderr, "rank %d: ok: %d calls correct, %v per call, allreduce of %d now runs %s\n", c.Rank(), iters, per.Round(time.Millisecond), count, algo)
}
