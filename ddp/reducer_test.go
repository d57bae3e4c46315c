package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/ddp"
	"github.com/x448/float16"
)

// ranks runs f on every rank of a fresh local job of n goroutine ranks
// and returns their errors.
func ranks(t *testing.T, n int, f func(c *braid.Comm) error) []error {
	t.Helper()
	comms, err := braid.NewLocal(n, &braid.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() { errs[r] = f(c) })
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	return errs
}

// layout is the model of the tests: gradients of every element type,
// of sizes from 0 to a few thousand elements.
var layout = []struct {
	d braid.DType
	n int
}{
	{braid.Float32, 1000}, {braid.Float32, 3}, {braid.Float16, 77}, {braid.Float64, 10},
	{braid.Float32, 0}, {braid.BFloat16, 300}, {braid.Float32, 4096}, {braid.Float16, 1},
	{braid.Float64, 129}, {braid.Float32, 17},
}

// value is gradient g's element i on rank r at step s: a small integer,
// exact in every element type, so that sums are exact.
func value(s, r, g, i int) float64 { return float64((s*7+r*3+g*5+i)%23 - 11) }

func alloc(rank, step int) []any {
	gs := make([]any, len(layout))
	for g, l := range layout {
		switch l.d {
		case braid.Float32:
			gs[g] = make([]float32, l.n)
		case braid.Float64:
			gs[g] = make([]float64, l.n)
		case braid.Float16:
			gs[g] = make([]braid.Half, l.n)
		case braid.BFloat16:
			gs[g] = make([]braid.BF16, l.n)
		}
	}
	fill(gs, rank, step)
	return gs
}

func fill(gs []any, rank, step int) {
	for g, buf := range gs {
		switch v := buf.(type) {
		case []float32:
			for i := range v {
				v[i] = float32(value(step, rank, g, i))
			}
		case []float64:
			for i := range v {
				v[i] = value(step, rank, g, i)
			}
		case []braid.Half:
			for i := range v {
				v[i] = braid.Half(float16.Fromfloat32(float32(value(step, rank, g, i))).Bits())
			}
		case []braid.BF16:
			for i := range v {
				v[i] = braid.BF16(math.Float32bits(float32(value(step, rank, g, i))) >> 16)
			}
		}
	}
}

func get(buf any, i int) float64 {
	switch v := buf.(type) {
	case []float32:
		return float64(v[i])
	case []float64:
		return v[i]
	case []braid.Half:
		return float64(float16.Frombits(uint16(v[i])).Float32())
	case []braid.BF16:
		return float64(math.Float32frombits(uint32(v[i]) << 16))
	}
	panic(fmt.Sprintf("%T", buf))
}

// check compares the reduced gradients with the sequential sum over the
// ranks (divided by n to average), within the rounding of one division
// in each element type.
func check(gs []any, n, step int, sum bool) error {
	for g, l := range layout {
		rel := map[braid.DType]float64{braid.Float32: 1e-6, braid.Float64: 1e-14, braid.Float16: 1e-3, braid.BFloat16: 8e-3}[l.d]
		for i := range l.n {
			want := 0.0
			for r := range n {
				want += value(step, r, g, i)
			}
			if !sum {
				want /= float64(n)
			}
			if got := get(gs[g], i); math.Abs(got-want) > rel*math.Abs(want) {
				return fmt.Errorf("step %d: gradient %d (%v) element %d = %v, want %v", step, g, l.d, i, got, want)
			}
		}
	}
	return nil
}

// TestReducer checks the averages (and sums) against a sequential sum, on
// 1 to 5 ranks, with fusion on, off and with a threshold small enough to
// make several buckets, with and without a cycle time, each rank marking
// its gradients ready in its own random order.
func TestReducer(t *testing.T) {
	opts := map[string]*ddp.Options{
		"default":       nil,
		"no-fusion":     {FusionThreshold: -1},
		"small-buckets": {FusionThreshold: 1500, CycleTime: -1},
		"short-cycles":  {FusionThreshold: 4000, CycleTime: 100 * time.Microsecond},
		"sum":           {Sum: true, CycleTime: -1},
	}
	for name, o := range opts {
		for _, n := range []int{1, 2, 3, 5} {
			t.Run(fmt.Sprintf("%s/n=%d", name, n), func(t *testing.T) {
				sum := o != nil && o.Sum
				errs := ranks(t, n, func(c *braid.Comm) error {
					ctx := context.Background()
					gs := alloc(c.Rank(), 0)
					r, err := ddp.New(ctx, c, gs, o)
					if err != nil {
						return err
					}
					defer r.Close()
					rng := rand.New(rand.NewPCG(uint64(c.Rank()), 1))
					for step := range 4 {
						fill(gs, c.Rank(), step)
						// Mark some gradients ready in random order; Wait marks the rest.
						for _, g := range rng.Perm(len(gs))[:rng.IntN(len(gs)+1)] {
							if err := r.Ready(g); err != nil {
								return err
							}
						}
						if err := r.Wait(ctx); err != nil {
							return err
						}
						if err := check(gs, n, step, sum); err != nil {
							return err
						}
					}
					s := r.Stats()
					if s.Steps != 4 {
						return fmt.Errorf("Stats.Steps = %d after 4 steps", s.Steps)
					}
					if n > 1 && o != nil && o.FusionThreshold < 0 && s.Fused != 0 {
						return fmt.Errorf("fusion off, yet %d fused allreduces", s.Fused)
					}
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

// TestFusion checks that with everything ready at once the default
// threshold packs the gradients into one allreduce per element type, and
// that a small threshold splits them.
func TestFusion(t *testing.T) {
	for _, tc := range []struct {
		thresh    int
		wantFused bool
		maxReduce int
	}{
		{0, true, 4},      // one bucket per element type
		{2048, true, 100}, // several per type
	} {
		errs := ranks(t, 2, func(c *braid.Comm) error {
			gs := alloc(c.Rank(), 0)
			r, err := ddp.New(context.Background(), c, gs, &ddp.Options{FusionThreshold: tc.thresh})
			if err != nil {
				return err
			}
			defer r.Close()
			if err := r.Wait(context.Background()); err != nil {
				return err
			}
			s := r.Stats()
			if s.Cycles != 1 || s.Allreduces > tc.maxReduce || (s.Fused > 0) != tc.wantFused {
				return fmt.Errorf("threshold %d: %+v", tc.thresh, s)
			}
			if tc.thresh == 0 && s.Allreduces != 4 {
				return fmt.Errorf("default threshold: %d allreduces for 4 element types, want 4", s.Allreduces)
			}
			if tc.thresh > 0 && s.Allreduces <= 4 {
				return fmt.Errorf("threshold %d: only %d allreduces: %+v", tc.thresh, s.Allreduces, s)
			}
			return check(gs, 2, 0, false)
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	}
}

// TestOverlap checks that a gradient marked ready is reduced before Wait
// is called: its allreduce runs while the caller would still compute.
func TestOverlap(t *testing.T) {
	errs := ranks(t, 2, func(c *braid.Comm) error {
		gs := alloc(c.Rank(), 0)
		r, err := ddp.New(context.Background(), c, gs, &ddp.Options{CycleTime: -1})
		if err != nil {
			return err
		}
		defer r.Close()
		if err := r.Ready(0); err != nil {
			return err
		}
		for end := time.Now().Add(20 * time.Second); r.Stats().Allreduces == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				return errors.New("gradient 0 was not reduced within 20 s of being marked ready")
			}
		}
		if err := r.Wait(context.Background()); err != nil {
			return err
		}
		return check(gs, 2, 0, false)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestMisuse checks the errors of bad calls.
func TestMisuse(t *testing.T) {
	comms, err := braid.NewLocal(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	ctx := context.Background()
	if _, err := ddp.New(ctx, comms[0], []any{braid.Raw{Bytes: make([]byte, 8), Type: braid.Int32}}, nil); err == nil || !strings.Contains(err.Error(), "floating point") {
		t.Errorf("int32 gradient: %v", err)
	}
	if _, err := ddp.New(ctx, comms[0], []any{[]string{"x"}}, nil); err == nil || !strings.Contains(err.Error(), "unsupported buffer type") {
		t.Errorf("[]string gradient: %v", err)
	}
	r, err := ddp.New(ctx, comms[0], []any{make([]float32, 4)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(1); err == nil || !strings.Contains(err.Error(), "numbered 0 to 0") {
		t.Errorf("Ready(1) of 1 gradient: %v", err)
	}
	if err := r.Ready(0); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(0); err == nil || !strings.Contains(err.Error(), "already marked ready") {
		t.Errorf("Ready(0) twice: %v", err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(0); err != nil { // a new step
		t.Errorf("Ready(0) in the next step: %v", err)
	}
	r.Close()
	if err := r.Wait(ctx); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Wait after Close: %v", err)
	}
}

// TestDisagreement checks that ranks that registered different gradients
// get an error on every rank, not a hang or a wrong average.
func TestDisagreement(t *testing.T) {
	errs := ranks(t, 2, func(c *braid.Comm) error {
		gs := []any{make([]float32, 100+c.Rank()), make([]float32, 10)}
		r, err := ddp.New(context.Background(), c, gs, nil)
		if err != nil {
			return err
		}
		defer r.Close()
		return r.Wait(context.Background())
	})
	for r, err := range errs {
		var be *braid.Error
		if !errors.As(err, &be) || be.Kind != braid.Mismatch {
			t.Errorf("rank %d: %v, want a braid.Error of kind Mismatch", r, err)
		}
	}
}

// TestBroadcast checks that every rank gets root's parameters, fused and
// alone.
func TestBroadcast(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		errs := ranks(t, n, func(c *braid.Comm) error {
			ps := alloc(c.Rank(), 0)
			root := n - 1
			if err := ddp.Broadcast(context.Background(), c, ps, root); err != nil {
				return err
			}
			want := alloc(root, 0)
			for g, l := range layout {
				for i := range l.n {
					if get(ps[g], i) != get(want[g], i) {
						return fmt.Errorf("parameter %d element %d = %v, want root's %v", g, i, get(ps[g], i), get(want[g], i))
					}
				}
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("n=%d rank %d: %v", n, r, err)
			}
		}
	}
}
