package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/sched"
)

// graphWarmCalls are the calls braid bench --device cuda makes one by one
// before it captures a graph: the kernels are loaded and the buffers
// exported, as the timed loops of the other modes find them.
const graphWarmCalls = 3

// benchGraph captures calls calls of call on dc into a CUDA graph, after
// graphWarmCalls of them one by one and sync; the caller closes it. Where
// the calls cannot be captured (the planner runs them as a schedule) it
// returns no graph and why; every rank gets the same answer, since every
// rank has the same plan.
func benchGraph(ctx context.Context, dc *braid.DeviceComm, call, sync func() error, calls int) (*braid.DeviceGraph, string, error) {
	for range graphWarmCalls {
		if err := call(); err != nil {
			return nil, "", err
		}
	}
	if err := sync(); err != nil {
		return nil, "", err
	}
	g, err := dc.Capture(ctx, func() error {
		for range calls {
			if err := call(); err != nil {
				return err
			}
		}
		return nil
	})
	var be *braid.Error
	if errors.As(err, &be) && be.Kind == braid.Unsupported {
		return nil, "not capturable: " + be.Err.Error(), nil
	}
	return g, "", err
}

// reportGraphSkip prints, on rank 0, that a size has no graph figure and
// why, as a row of the table or a JSON record with an error (which
// scripts/compare_gpu_table.py lists under the configurations that
// failed).
func reportGraphSkip(format string, col sched.Collective, n int, size int64, count int, algo, why string) {
	if format == "json" {
		b, _ := json.Marshal(map[string]any{"api": "braid", "op": col.String(), "n": n, "bytes": size, "algo": algo, "mode": "graph", "error": why})
		fmt.Println(string(b))
		return
	}
	fmt.Printf("%10s %12d %-12s %-8s %12s  %s\n", bench.FormatSize(size), count, algo, "graph", "-", why)
}

// benchAlgoName is the algorithm column of a row: a forced algorithm's
// name, or auto: and the planner's choice.
func benchAlgoName(dc *braid.DeviceComm, a string, col sched.Collective, count, es int) string {
	if a != "auto" {
		return a
	}
	name, _ := dc.Algorithm(col, count, es)
	return "auto:" + name
}
