package ddp_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/ddp"
)

// A tiny MLP written out by hand (8 inputs, 16 tanh units, 4 classes,
// softmax cross-entropy), trained with SGD on a synthetic problem, checks
// that data-parallel training on n ranks follows single-process training
// with the same global batch.
const (
	nIn, nHid, nOut = 8, 16, 4
	nSamples        = 512
	globalBatch     = 32
	trainSteps      = 40
	learningRate    = 0.5
)

type mlp struct{ w1, b1, w2, b2 []float32 }

func newMLP(seed uint64) *mlp {
	rng := rand.New(rand.NewPCG(seed, 2))
	m := &mlp{make([]float32, nHid*nIn), make([]float32, nHid), make([]float32, nOut*nHid), make([]float32, nOut)}
	for _, p := range [][]float32{m.w1, m.w2} {
		for i := range p {
			p[i] = float32(rng.NormFloat64() * 0.5)
		}
	}
	return m
}

func (m *mlp) params() []any { return []any{m.w1, m.b1, m.w2, m.b2} }

// dataset returns inputs and labels: the class of a random linear teacher.
func dataset() ([][]float32, []int) {
	rng := rand.New(rand.NewPCG(7, 7))
	teacher := make([]float64, nOut*nIn)
	for i := range teacher {
		teacher[i] = rng.NormFloat64()
	}
	xs, ys := make([][]float32, nSamples), make([]int, nSamples)
	for s := range xs {
		x := make([]float32, nIn)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		best, arg := math.Inf(-1), 0
		for o := range nOut {
			v := 0.0
			for i := range nIn {
				v += teacher[o*nIn+i] * float64(x[i])
			}
			if v > best {
				best, arg = v, o
			}
		}
		xs[s], ys[s] = x, arg
	}
	return xs, ys
}

// forward returns the hidden activations and the class probabilities.
func (m *mlp) forward(x []float32) (h, p []float32) {
	h, p = make([]float32, nHid), make([]float32, nOut)
	for j := range nHid {
		v := m.b1[j]
		for i := range nIn {
			v += m.w1[j*nIn+i] * x[i]
		}
		h[j] = float32(math.Tanh(float64(v)))
	}
	maxv := float32(math.Inf(-1))
	for o := range nOut {
		v := m.b2[o]
		for j := range nHid {
			v += m.w2[o*nHid+j] * h[j]
		}
		p[o] = v
		maxv = max(maxv, v)
	}
	var z float32
	for o := range p {
		p[o] = float32(math.Exp(float64(p[o] - maxv)))
		z += p[o]
	}
	for o := range p {
		p[o] /= z
	}
	return h, p
}

// backward writes the gradients of the mean loss over the batch into
// g (same layout as m), calling ready with each gradient's index in the
// Reducer's registration order (w2, b2, w1, b1) as soon as it is final.
func (m *mlp) backward(xs [][]float32, ys []int, g *mlp, ready func(int)) {
	for _, p := range g.params() {
		clear(p.([]float32))
	}
	scale := 1 / float32(len(xs))
	dh := make([][]float32, len(xs))
	hs := make([][]float32, len(xs))
	for s, x := range xs {
		h, p := m.forward(x)
		hs[s] = h
		p[ys[s]] -= 1 // d loss / d logits
		dh[s] = make([]float32, nHid)
		for o := range nOut {
			d := p[o] * scale
			g.b2[o] += d
			for j := range nHid {
				g.w2[o*nHid+j] += d * h[j]
				dh[s][j] += m.w2[o*nHid+j] * p[o] * scale
			}
		}
	}
	ready(0) // w2
	ready(1) // b2
	for s, x := range xs {
		for j := range nHid {
			d := dh[s][j] * (1 - hs[s][j]*hs[s][j])
			g.b1[j] += d
			for i := range nIn {
				g.w1[j*nIn+i] += d * x[i]
			}
		}
	}
	ready(2) // w1
	ready(3) // b1
}

func (m *mlp) sgd(g *mlp) {
	for k, p := range m.params() {
		gp := g.params()[k].([]float32)
		for i := range p.([]float32) {
			p.([]float32)[i] -= learningRate * gp[i]
		}
	}
}

func (m *mlp) accuracy(xs [][]float32, ys []int) float64 {
	right := 0
	for s, x := range xs {
		_, p := m.forward(x)
		arg := 0
		for o := range p {
			if p[o] > p[arg] {
				arg = o
			}
		}
		if arg == ys[s] {
			right++
		}
	}
	return float64(right) / float64(len(xs))
}

// train runs data-parallel training on n goroutine ranks and returns rank
// 0's model and every rank's error. Every rank starts from its own random
// model; Broadcast makes them rank 0's.
func train(t *testing.T, n int, opts *ddp.Options) (*mlp, []error) {
	xs, ys := dataset()
	comms, err := braid.NewLocal(n, nil)
	if err != nil {
		t.Fatal(err)
	}
	models := make([]*mlp, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank, c := range comms {
		wg.Go(func() {
			errs[rank] = func() error {
				ctx := context.Background()
				m := newMLP(uint64(rank) + 1)
				models[rank] = m
				if err := ddp.Broadcast(ctx, c, m.params(), 0); err != nil {
					return err
				}
				g := &mlp{make([]float32, nHid*nIn), make([]float32, nHid), make([]float32, nOut*nHid), make([]float32, nOut)}
				r, err := ddp.New(ctx, c, []any{g.w2, g.b2, g.w1, g.b1}, opts)
				if err != nil {
					return err
				}
				defer r.Close()
				local := globalBatch / n
				var readyErr error
				for step := range trainSteps {
					start := (step*globalBatch)%nSamples + rank*local
					m.backward(xs[start:start+local], ys[start:start+local], g, func(i int) {
						if err := r.Ready(i); err != nil && readyErr == nil {
							readyErr = err
						}
					})
					if readyErr != nil {
						return readyErr
					}
					if err := r.Wait(ctx); err != nil {
						return err
					}
					m.sgd(g)
				}
				return nil
			}()
		})
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	// Every rank holds the same model.
	for rank := 1; rank < n; rank++ {
		if errs[rank] != nil || errs[0] != nil {
			continue
		}
		for k, p := range models[0].params() {
			for i, v := range p.([]float32) {
				if w := models[rank].params()[k].([]float32)[i]; w != v {
					t.Errorf("n=%d: rank %d parameter %d[%d] = %v, rank 0 has %v", n, rank, k, i, w, v)
					return models[0], errs
				}
			}
		}
	}
	return models[0], errs
}

// TestTrainingMatchesOneProcess trains the MLP for 40 steps of a global
// batch of 32 on 1, 2 and 4 ranks and compares the parameters and the
// training accuracy with the one-rank run. The tolerance, 1e-4 absolute
// on every parameter, allows for float32 sums taken in another order (the
// per-rank means are averaged instead of one mean over the batch); the
// accuracy must be equal.
func TestTrainingMatchesOneProcess(t *testing.T) {
	xs, ys := dataset()
	ref, errs := train(t, 1, nil)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	refAcc := ref.accuracy(xs, ys)
	if refAcc < 0.6 {
		t.Fatalf("one-rank training reached %.3f accuracy after %d steps: the test model does not learn", refAcc, trainSteps)
	}
	for _, n := range []int{2, 4} {
		for name, o := range map[string]*ddp.Options{"default": nil, "no-fusion": {FusionThreshold: -1, CycleTime: -1}} {
			t.Run(fmt.Sprintf("n=%d/%s", n, name), func(t *testing.T) {
				m, errs := train(t, n, o)
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				worst := 0.0
				for k, p := range m.params() {
					for i, v := range p.([]float32) {
						worst = max(worst, math.Abs(float64(v-ref.params()[k].([]float32)[i])))
					}
				}
				if worst > 1e-4 {
					t.Errorf("largest parameter difference from one-rank training: %.3g, want ≤ 1e-4", worst)
				}
				if acc := m.accuracy(xs, ys); acc != refAcc {
					t.Errorf("accuracy %.4f, one-rank training %.4f", acc, refAcc)
				}
				t.Logf("largest parameter difference %.3g; accuracy %.4f", worst, refAcc)
			})
		}
	}
}
