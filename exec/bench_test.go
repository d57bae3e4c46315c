package exec_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport/inproc"
)

// BenchmarkRunLocal times the executor's loop alone: a one-rank program
// of 64 copies and reductions of 8 float32 each, every step depending on
// the one before, without a transport.
func BenchmarkRunLocal(b *testing.B) {
	bl := sched.NewBuilder(0)
	in, out := sched.Chunk{Buf: sched.In, Len: 8}, sched.Chunk{Buf: sched.Out, Len: 8}
	tmp := sched.Chunk{Buf: sched.Tmp, Len: 8}
	prev := bl.Copy(in, out)
	for range 32 {
		prev = bl.Copy(out, tmp, prev)
		prev = bl.Reduce(tmp, out, prev)
	}
	bl.P.TmpLen = 8
	prog := bl.P
	env := &exec.Env{Tag: baseTag}
	bufs := exec.Buffers{In: make([]byte, 32), Out: make([]byte, 32), DType: dtype.Float32, Op: dtype.Sum, NRanks: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := exec.Run(ctx, &prog, env, bufs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunRing times a ring allreduce of 64 float32 on 2 ranks over
// the in-process transport: the executor's sends, receives and polls.
// Rank 1 runs in a goroutine of its own, as many calls as rank 0. The
// waits spin 64 polls, then block on the request (Env.Spin 0): a rank
// mostly parks and is woken, so this times Go's scheduler as much as
// the executor.
func BenchmarkRunRing(b *testing.B) { benchRing(b, 0) }

// BenchmarkRunRingSpin is BenchmarkRunRing with the waits of a
// communicator whose ranks have a core each (Env.Spin 50µs).
func BenchmarkRunRingSpin(b *testing.B) { benchRing(b, 50*time.Microsecond) }

func benchRing(b *testing.B, spin time.Duration) {
	const n, count = 2, 64
	a, err := algo.Lookup(sched.Allreduce, "ring")
	if err != nil {
		b.Fatal(err)
	}
	p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count}
	meshes := inproc.NewWorld(n, nil)
	defer func() {
		for _, m := range meshes {
			m.Close()
		}
	}()
	progs := make([]sched.Program, n)
	bufs := make([]exec.Buffers, n)
	for r := range n {
		progs[r] = a.Program(p, r)
		bufs[r] = exec.Buffers{In: make([]byte, 4*count), Out: make([]byte, 4*count), DType: dtype.Float32, Op: dtype.Sum, NRanks: n}
	}
	ctx := context.Background()
	calls := make(chan int)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		env := envFor(meshes[1])
		env.Spin = spin
		for k := range calls {
			for range k {
				env.Tag.Seq++
				if err := exec.Run(ctx, &progs[1], env, bufs[1]); err != nil {
					panic(err)
				}
			}
		}
	}()
	defer func() { close(calls); wg.Wait() }()
	env := envFor(meshes[0])
	env.Spin = spin
	b.ReportAllocs()
	b.ResetTimer()
	calls <- b.N
	for range b.N {
		env.Tag.Seq++
		if err := exec.Run(ctx, &progs[0], env, bufs[0]); err != nil {
			b.Fatal(err)
		}
	}
}
