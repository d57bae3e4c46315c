package exec_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
)

// fakeBackend is a Backend whose steps complete after a number of polls
// each (polls[i]: 0 completes at Start), step i completing fuse[i] steps
// after it with it, and whose own work stays busy for busy polls.
type fakeBackend struct {
	polls   []int
	fuse    []int
	busy    int
	failAt  int // a step whose Start fails, or -1
	waitFor func(i int) bool
	started []int
	tests   []int
	pollN   int
}

func (f *fakeBackend) result(i int) int {
	if f.polls[i] > 0 || f.waitFor != nil && f.waitFor(i) {
		return 0
	}
	return 1 + f.fuse[i]
}

func (f *fakeBackend) Start(i int) (int, error) {
	f.started = append(f.started, i)
	if i == f.failAt {
		return 0, errors.New("no room")
	}
	return f.result(i), nil
}

func (f *fakeBackend) Test(i int) (int, error) {
	f.tests = append(f.tests, i)
	if f.polls[i] > 0 {
		f.polls[i]--
	}
	return f.result(i), nil
}

func (f *fakeBackend) Poll() (bool, bool) {
	f.pollN++
	if f.busy > 0 {
		f.busy--
		return false, true
	}
	return false, false
}

func newFake(n int) *fakeBackend {
	return &fakeBackend{polls: make([]int, n), fuse: make([]int, n), failAt: -1}
}

// chain is a program of n steps: receives from rank 1 with even indices,
// copies with odd ones, each step depending on deps[i].
func chain(deps [][]int32) *sched.Program {
	p := &sched.Program{Rank: 0}
	for i, d := range deps {
		s := sched.Step{Kind: sched.KindRecv, Peer: 1, Tag: int32(i), Dst: sched.Chunk{Buf: sched.Out, Len: 1}, Deps: d}
		if i%2 == 1 {
			s = sched.Step{Kind: sched.KindCopy, Src: sched.Chunk{Buf: sched.In, Len: 1}, Dst: sched.Chunk{Buf: sched.Out, Len: 1}, Deps: d}
		}
		p.Steps = append(p.Steps, s)
	}
	return p
}

// TestDriveOrder checks Drive's loop over a backend: steps start in
// program order once their dependencies have completed, a step under way
// is polled until it completes, steps fused with one before them (Start
// returning 3) are never started on their own, and the run waits for the
// backend's own work.
func TestDriveOrder(t *testing.T) {
	prog := chain([][]int32{nil, {0}, nil, {1, 2}, {3}, {4}, {5}})
	f := newFake(7)
	f.polls[0] = 3 // step 1 waits for it; step 2 starts only after
	f.fuse[3] = 2  // steps 4 and 5 complete with step 3
	f.busy = 4
	env := &exec.Env{Tag: baseTag}
	if err := exec.Drive(context.Background(), prog, env, f); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2, 3, 6}; !slices.Equal(f.started, want) {
		t.Errorf("started %v, want %v (program order; steps 4 and 5 fused with 3)", f.started, want)
	}
	if want := []int{0, 0, 0}; !slices.Equal(f.tests, want) {
		t.Errorf("tests %v, want %v", f.tests, want)
	}
	if f.busy != 0 {
		t.Errorf("the run ended with the backend busy for %d more polls", f.busy)
	}
}

// TestDriveAhead checks Env.Ahead: a step whose dependencies have
// completed starts while an earlier step waits for its own, and the step
// under way that it lets complete (waitFor) then completes.
func TestDriveAhead(t *testing.T) {
	prog := chain([][]int32{nil, {0}, nil})
	f := newFake(3)
	// Step 0 completes only once step 2 has started: in program order,
	// step 2 waits behind step 1, which waits for step 0.
	f.waitFor = func(i int) bool { return i == 0 && !slices.Contains(f.started, 2) }
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := exec.Drive(ctx, prog, &exec.Env{Tag: baseTag, Ahead: true}, f); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 2, 1}; !slices.Equal(f.started, want) {
		t.Errorf("started %v, want %v", f.started, want)
	}

	// Steps that become ready together start in program order, the one
	// the loop waited to start first.
	f = newFake(3)
	f.polls[0] = 2
	if err := exec.Drive(ctx, chain([][]int32{nil, {0}, {0}}), &exec.Env{Tag: baseTag, Ahead: true}, f); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2}; !slices.Equal(f.started, want) {
		t.Errorf("started %v, want %v", f.started, want)
	}

	// Without Ahead the same backend waits: step 2 never starts.
	f = newFake(3)
	f.waitFor = func(i int) bool { return i == 0 && !slices.Contains(f.started, 2) }
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := exec.Drive(ctx, prog, &exec.Env{Tag: baseTag}, f)
	var se *exec.StepError
	if !errors.As(err, &se) || se.Index != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("in program order: %v, want a deadline naming step 0", err)
	}
}

// TestDriveErrors checks that a backend's failure and the end of a wait
// are StepErrors naming the step, and that a backend that claims to have
// fused a step that already started is refused.
func TestDriveErrors(t *testing.T) {
	prog := chain([][]int32{nil, nil, {1}})
	f := newFake(3)
	f.failAt = 2
	err := exec.Drive(context.Background(), prog, &exec.Env{Tag: baseTag}, f)
	var se *exec.StepError
	if !errors.As(err, &se) || se.Index != 2 || se.Rank != 0 || se.Seq != baseTag.Seq || !strings.Contains(err.Error(), "no room") {
		t.Errorf("a failed start: %v, want a StepError of step 2", err)
	}

	// A deadline while a copy (step 1) and a receive (step 0) are under
	// way names the receive.
	f = newFake(3)
	f.polls[0], f.polls[1] = 1<<30, 1<<30
	err = exec.Drive(context.Background(), prog, &exec.Env{Tag: baseTag, Timeout: 20 * time.Millisecond}, f)
	if !errors.As(err, &se) || se.Index != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a timeout: %v, want a deadline naming the receive, step 0", err)
	}

	// The backend's own work counts too: a deadline while only it is busy
	// names the last step.
	f = newFake(3)
	f.busy = 1 << 30
	err = exec.Drive(context.Background(), prog, &exec.Env{Tag: baseTag, Timeout: 20 * time.Millisecond}, f)
	if !errors.As(err, &se) || se.Index != 2 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a timeout with the backend busy: %v, want a deadline naming step 2", err)
	}

	// Step 0 completes fused with step 1, which is under way: refused.
	f = newFake(3)
	prog = chain([][]int32{nil, nil, nil})
	f.polls[0], f.polls[1] = 1, 1<<30
	f.fuse[0] = 1
	err = exec.Drive(context.Background(), prog, &exec.Env{Tag: baseTag}, f)
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "had started") {
		t.Errorf("a fusion of a started step: %v, want it refused", err)
	}
}

// TestDriveAllocs checks that a Drive over a backend allocates nothing
// (the run is pooled).
func TestDriveAllocs(t *testing.T) {
	prog := chain([][]int32{nil, {0}, nil, {1, 2}})
	f := newFake(4)
	env := &exec.Env{Tag: baseTag, Wait: &transport.Backoff{Spin: time.Microsecond, Goroutines: true}}
	ctx := context.Background()
	// The fewest of three counts: AllocsPerRun counts every allocation of
	// the process while it runs, and a goroutine that an earlier test left
	// winding down (under the race detector, on a loaded machine) once
	// made one count 1. An allocation of Drive's own shows in every count.
	allocs := math.Inf(1)
	for range 3 {
		allocs = min(allocs, testing.AllocsPerRun(100, func() {
			f.started, f.tests = f.started[:0], f.tests[:0]
			f.polls[0] = 2
			if err := exec.Drive(ctx, prog, env, f); err != nil {
				t.Fatal(err)
			}
		}))
	}
	if allocs != 0 {
		t.Errorf("%v allocations a Drive, want 0", allocs)
	}
}
