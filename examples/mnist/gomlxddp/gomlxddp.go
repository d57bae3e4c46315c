// Package gomlxddp trains a GoMLX model data-parallel over a Braid
// communicator. Each step runs in two compiled graphs with the gradient
// average between them: the first computes the loss and the gradients of
// the trainable variables on this rank's share of the batch; ddp.Reducer
// averages the gradients across the ranks; the second hands the averages
// to the optimizer (train.OptimizeWithGradients.UpdateGraphWithGradients),
// which updates the variables. GoMLX's own AllReduce is not implemented
// by its pure-Go backend, and its graphs run on one device, so the
// exchange happens between the graphs, on the host.
//
// It lives in the example's module so that Braid's core module does not
// depend on GoMLX.
package gomlxddp

import (
	stdctx "context"
	"fmt"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/ddp"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"
)

// ModelFn builds the model's output (logits) from its input.
type ModelFn func(ctx *context.Context, x *Node) *Node

// LossFn builds the scalar loss from labels and the model's output.
type LossFn func(labels, logits *Node) *Node

// Trainer runs data-parallel training steps of one GoMLX model.
type Trainer struct {
	backend backends.Backend
	ctx     *context.Context
	comm    *braid.Comm
	opts    *ddp.Options

	grads *context.Exec // (x, labels) → loss, gradients
	apply *context.Exec // gradients → (variables updated)
	vars  []*context.Variable
	bufs  [][]float32 // the gradients as the Reducer sees them
	red   *ddp.Reducer

	// Times of the last step: computing the gradients, averaging them
	// (copies in and out included), applying them.
	Compute, Comm, Apply time.Duration
}

// New prepares a Trainer. The optimizer must implement
// train.OptimizeWithGradients (GoMLX's SGD and Adam do). opts tunes the
// gradient averaging (nil: ddp's defaults).
func New(backend backends.Backend, ctx *context.Context, comm *braid.Comm, model ModelFn, loss LossFn, opt train.OptimizeWithGradients, opts *ddp.Options) (*Trainer, error) {
	t := &Trainer{backend: backend, ctx: ctx, comm: comm, opts: opts}
	var err error
	t.grads, err = context.NewExec(backend, ctx, func(ctx *context.Context, in []*Node) []*Node {
		ctx.SetTraining(in[0].Graph(), true)
		l := loss(in[1], model(ctx, in[0]))
		return append([]*Node{l}, ctx.BuildTrainableVariablesGradientsGraph(l)...)
	})
	if err != nil {
		return nil, err
	}
	t.apply, err = context.NewExec(backend, ctx, func(ctx *context.Context, grads []*Node) {
		g := grads[0].Graph()
		// The optimizer pairs the gradients with the trainable variables
		// this graph uses, in the context's order: use them all first.
		for _, v := range t.vars {
			v.ValueGraph(g)
		}
		opt.UpdateGraphWithGradients(ctx, grads, dtypes.Float32)
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Init builds the gradient graph on a first batch (creating and
// initialising the variables), copies rank 0's variables to every rank,
// and registers the gradients with a ddp.Reducer. Call it once, on every
// rank, before Step.
func (t *Trainer) Init(c stdctx.Context, x, labels *tensors.Tensor) error {
	if _, err := t.grads.Exec(x, labels); err != nil {
		return err
	}
	var params []any
	for v := range t.ctx.IterVariables() {
		if !v.Trainable {
			continue
		}
		if v.Shape().DType != dtypes.Float32 {
			return fmt.Errorf("gomlxddp: variable %s is %s: only float32 variables are supported", v.ScopeAndName(), v.Shape().DType)
		}
		val, err := v.Value()
		if err != nil {
			return err
		}
		flat, err := tensors.CopyFlatData[float32](val)
		if err != nil {
			return err
		}
		t.vars = append(t.vars, v)
		params = append(params, flat)
	}
	if err := ddp.Broadcast(c, t.comm, params, 0); err != nil {
		return err
	}
	for i, v := range t.vars {
		if err := v.SetValue(tensors.FromFlatDataAndDimensions(params[i].([]float32), v.Shape().Dimensions...)); err != nil {
			return err
		}
	}
	grads := make([]any, len(t.vars))
	t.bufs = make([][]float32, len(t.vars))
	for i, v := range t.vars {
		t.bufs[i] = make([]float32, v.Shape().Size())
		grads[i] = t.bufs[i]
	}
	var err error
	t.red, err = ddp.New(c, t.comm, grads, t.opts)
	return err
}

// Step trains on this rank's share of one global batch and returns this
// rank's loss on it.
func (t *Trainer) Step(c stdctx.Context, x, labels *tensors.Tensor) (float32, error) {
	start := time.Now()
	out, err := t.grads.Exec(x, labels)
	if err != nil {
		return 0, err
	}
	lossV := tensors.ToScalar[float32](out[0])
	gs := out[1:]
	if len(gs) != len(t.bufs) {
		return 0, fmt.Errorf("gomlxddp: %d gradients for %d trainable variables", len(gs), len(t.bufs))
	}
	t.Compute = time.Since(start)

	start = time.Now()
	for i, g := range gs {
		if err := g.ConstFlatData(func(flat any) { copy(t.bufs[i], flat.([]float32)) }); err != nil {
			return 0, err
		}
		// The Reducer may start on this gradient while the others are copied.
		if err := t.red.Ready(i); err != nil {
			return 0, err
		}
	}
	if err := t.red.Wait(c); err != nil {
		return 0, err
	}
	avg := make([]any, len(gs))
	for i, v := range t.vars {
		avg[i] = tensors.FromFlatDataAndDimensions(t.bufs[i], v.Shape().Dimensions...)
	}
	t.Comm = time.Since(start)

	start = time.Now()
	if _, err := t.apply.Exec(avg...); err != nil {
		return 0, err
	}
	t.Apply = time.Since(start)
	return lossV, nil
}

// Close releases the Reducer.
func (t *Trainer) Close() error {
	if t.red == nil {
		return nil
	}
	return t.red.Close()
}
