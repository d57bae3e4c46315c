// Command loop is a test program: every rank runs allreduce in a loop, and
// one rank can be marked as the victim that tests kill. Tests build it and
// run it under braid run or mpirun.
//
//	LOOP_ITERS      iterations (default 1000000)
//	LOOP_COUNT      float32 elements per allreduce (default 1<<20)
//	LOOP_VICTIM     rank whose pid is written to LOOP_PIDFILE once it is looping
//	LOOP_PIDFILE    where to write it
//
// A rank whose call fails prints "rank R: ERROR" to stderr and exits 3; a
// rank that finishes prints "rank R: ok" and exits 0.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

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
	iters, count, victim := env("LOOP_ITERS", 1000000), env("LOOP_COUNT", 1<<20), env("LOOP_VICTIM", -1)
	buf := make([]float32, count)
	for i := 0; i < iters; i++ {
		if err := c.Allreduce(ctx, buf, buf, braid.Sum); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", c.Rank(), err)
			os.Exit(3)
		}
		if i == 2 && c.Rank() == victim {
			if f := os.Getenv("LOOP_PIDFILE"); f != "" {
				os.WriteFile(f+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o644)
				os.Rename(f+".tmp", f)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "rank %d: ok\n", c.Rank())
}
