package shm

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/transporttest"
)

// BenchmarkPingPong measures ping-pong between two ranks, as goroutines of
// this process and as two processes (with single copy or without), and
// reports the one-way time and the bandwidth (bytes / one-way time). With
// BRAID_SHM_BENCH_SPIN=1 both ranks spin on Test instead of calling
// transport.Wait, which shows the transport's own latency apart from the
// backoff's.
func BenchmarkPingPong(b *testing.B) {
	for _, mode := range []string{"goroutines", "processes", "processes-nocma"} {
		for _, size := range []int{8, 4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("%s/%s", mode, sizeName(size)), func(b *testing.B) {
				benchPingPong(b, mode != "goroutines", mode == "processes-nocma", size)
			})
		}
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

func benchPingPong(b *testing.B, processes, noCMA bool, size int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var m transport.Mesh
	var echoed chan error
	var ch *child
	if processes {
		dir := b.TempDir()
		env := []string{fmt.Sprintf("%s=%d", envSize, size)}
		if noCMA {
			env = append(env, EnvCMA+"=0")
		}
		ch = spawn(b, "echo", dir, 1, 2, env...)
		var err error
		if m, err = connectRank(ctx, NewWithOptions(Options{NoCMA: noCMA}), dir, 0, 2, nil); err != nil {
			b.Fatal(err)
		}
	} else {
		meshes, err := transporttest.Connect(ctx, New(), 2, transporttest.Hooks{})
		if err != nil {
			b.Fatal(err)
		}
		defer meshes[1].Close()
		m = meshes[0]
		echoed = make(chan error, 1)
		go func() { echoed <- echo(ctx, meshes[1].Conn(0), size) }()
	}
	c := m.Conn(1)
	spin := os.Getenv(envBenchSpin) != ""
	data, buf := make([]byte, size), make([]byte, size)
	seq := uint32(0)
	round := func() {
		tag := transport.Tag{Seq: seq}
		seq++
		s, err := c.Isend(tag, data)
		if err != nil {
			b.Fatal(err)
		}
		r, err := c.Irecv(tag, buf)
		if err != nil {
			b.Fatal(err)
		}
		if spin {
			for _, q := range []transport.Request{s, r} {
				for {
					done, err := q.Test()
					if err != nil {
						b.Fatal(err)
					}
					if done {
						break
					}
				}
			}
			return
		}
		if err := transport.Wait(ctx, nil, s, r); err != nil {
			b.Fatal(err)
		}
	}
	for range 20 {
		round()
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		round()
	}
	oneway := time.Since(start).Seconds() / float64(2*b.N)
	b.StopTimer()
	b.ReportMetric(oneway*1e6, "us/oneway")
	b.ReportMetric(float64(size)/oneway/1e9, "GB/s")
	m.Close()
	if processes {
		ch.wait(b, 1)
	} else if err := <-echoed; err != nil {
		b.Error(err)
	}
}

// BenchmarkOverhead measures the processor time of one 8-byte message,
// sent and received by one goroutine: Isend, Irecv and Test, with no
// cache line crossing cores.
func BenchmarkOverhead(b *testing.B) {
	meshes, err := transporttest.Connect(context.Background(), New(), 2, transporttest.Hooks{})
	if err != nil {
		b.Fatal(err)
	}
	defer meshes[0].Close()
	defer meshes[1].Close()
	c01, c10 := meshes[0].Conn(1), meshes[1].Conn(0)
	data, buf := make([]byte, 8), make([]byte, 8)
	b.ReportAllocs()
	for i := range b.N {
		tag := transport.Tag{Seq: uint32(i)}
		r, err := c10.Irecv(tag, buf)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c01.Isend(tag, data); err != nil {
			b.Fatal(err)
		}
		for {
			done, err := r.Test()
			if err != nil {
				b.Fatal(err)
			}
			if done {
				break
			}
		}
	}
}
