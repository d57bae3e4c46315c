package tcp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/transporttest"
)

// benchPair connects two ranks in this process over loopback.
func benchPair(b *testing.B, streams int) (a, c transport.Conn) {
	b.Helper()
	ctx := context.Background()
	ms, err := transporttestConnect(ctx, New(local(streams, 0)), 2)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ms[0].Close()
		ms[1].Close()
	})
	return ms[0].Conn(1), ms[1].Conn(0)
}

// BenchmarkPingPong measures the round trip of an 8-byte message between
// two ranks of this process; the reported us/one-way is half of it.
func BenchmarkPingPong(b *testing.B) {
	for _, streams := range []int{1, 2} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			a, c := benchPair(b, streams)
			ctx := context.Background()
			done := make(chan error, 1)
			n := b.N
			go func() {
				buf := make([]byte, 8)
				for i := range n {
					tag := transport.Tag{Comm: 1, Seq: uint32(i), Step: 1}
					r, _ := c.Irecv(tag, buf)
					if err := transport.Wait(ctx, nil, r); err != nil {
						done <- err
						return
					}
					tag.Step = 2
					s, _ := c.Isend(tag, buf)
					if err := transport.Wait(ctx, nil, s); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			msg := make([]byte, 8)
			buf := make([]byte, 8)
			b.ResetTimer()
			for i := range n {
				tag := transport.Tag{Comm: 1, Seq: uint32(i), Step: 2}
				r, _ := a.Irecv(tag, buf)
				tag.Step = 1
				s, _ := a.Isend(tag, msg)
				if err := transport.Wait(ctx, nil, s, r); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n)/2/1000, "us/one-way")
		})
	}
}

// BenchmarkThroughput streams messages from one rank to the other, with
// up to 4 in flight, and reports GB/s (10^9 B/s).
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		for _, streams := range []int{1, 2} {
			b.Run(fmt.Sprintf("size=%dM/streams=%d", size>>20, streams), func(b *testing.B) {
				a, c := benchPair(b, streams)
				ctx := context.Background()
				const window = 4
				n := b.N
				done := make(chan error, 1)
				go func() {
					bufs := make([][]byte, window)
					for i := range bufs {
						bufs[i] = make([]byte, size)
					}
					var reqs []transport.Request
					for i := range n {
						r, _ := c.Irecv(transport.Tag{Comm: 2, Seq: uint32(i)}, bufs[i%window])
						reqs = append(reqs, r)
						if len(reqs) == window {
							if err := transport.Wait(ctx, nil, reqs...); err != nil {
								done <- err
								return
							}
							reqs = reqs[:0]
						}
					}
					done <- transport.Wait(ctx, nil, reqs...)
				}()
				data := make([]byte, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				var reqs []transport.Request
				for i := range n {
					s, _ := a.Isend(transport.Tag{Comm: 2, Seq: uint32(i)}, data)
					reqs = append(reqs, s)
					if len(reqs) == window {
						if err := transport.Wait(ctx, nil, reqs...); err != nil {
							b.Fatal(err)
						}
						reqs = reqs[:0]
					}
				}
				if err := transport.Wait(ctx, nil, reqs...); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(float64(size)*float64(n)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// procPair starts an echo or sink child process and connects to it.
func procPair(b *testing.B, role string, streams int, arg string) (transport.Conn, func()) {
	b.Helper()
	dir := b.TempDir()
	cmd, out := startChild(b, role, dir, 1, 2, streams, arg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := procConnect(ctx, dir, 0, 2, streams, nil)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatal(err)
	}
	return m.Conn(1), func() {
		if err := cmd.Wait(); err != nil {
			b.Errorf("child: %v\n%s", err, out)
		}
		m.Close()
	}
}

// BenchmarkPingPongProcs is BenchmarkPingPong with the far rank in another
// process, as ranks run in practice. wait=spin waits with transport.Wait
// (spin, yield, then block, as the executor does); wait=block blocks on
// the Done channels at once.
func BenchmarkPingPongProcs(b *testing.B) {
	for _, mode := range []string{"spin", "block"} {
		for _, streams := range []int{1, 2} {
			b.Run(fmt.Sprintf("wait=%s/streams=%d", mode, streams), func(b *testing.B) {
				a, finish := procPair(b, "echo", streams, fmt.Sprintf("%d,%s", b.N, mode))
				ctx := context.Background()
				msg := make([]byte, 8)
				buf := make([]byte, 8)
				b.ResetTimer()
				for i := range b.N {
					tag := transport.Tag{Comm: 1, Seq: uint32(i), Step: 2}
					r, _ := a.Irecv(tag, buf)
					tag.Step = 1
					s, _ := a.Isend(tag, msg)
					if err := waitMode(ctx, mode, s, r); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1000, "us/one-way")
				s, _ := a.Isend(transport.Tag{Comm: 9}, nil)
				transport.Wait(ctx, nil, s)
				finish()
			})
		}
	}
}

// BenchmarkThroughputProcs is BenchmarkThroughput with the receiver in
// another process.
func BenchmarkThroughputProcs(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		for _, streams := range []int{1, 2} {
			b.Run(fmt.Sprintf("size=%dM/streams=%d", size>>20, streams), func(b *testing.B) {
				a, finish := procPair(b, "sink", streams, fmt.Sprintf("%d,%d", b.N, size))
				ctx := context.Background()
				const window = 4
				data := make([]byte, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				var reqs []transport.Request
				for i := range b.N {
					s, _ := a.Isend(transport.Tag{Comm: 2, Seq: uint32(i)}, data)
					reqs = append(reqs, s)
					if len(reqs) == window {
						if err := transport.Wait(ctx, nil, reqs...); err != nil {
							b.Fatal(err)
						}
						reqs = reqs[:0]
					}
				}
				r, _ := a.Irecv(transport.Tag{Comm: 9}, nil)
				if err := transport.Wait(ctx, nil, append(reqs, r)...); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				finish()
			})
		}
	}
}

// BenchmarkUnexpected sends each message before its receive is posted:
// the receiver posts it only once the message's first frame has arrived,
// so that its payload goes through the buffers for unexpected messages.
// It reports GB/s (10^9 B/s) of one message at a time.
func BenchmarkUnexpected(b *testing.B) {
	for _, size := range []int{8, 64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			ctx := context.Background()
			arrived := make(chan struct{}, 1)
			ms, err := transporttest.Connect(ctx, New(local(1, 0)), 2, transporttest.Hooks{
				Unexpected: func(rank, peer int, tag transport.Tag) {
					if rank == 1 {
						arrived <- struct{}{}
					}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				ms[0].Close()
				ms[1].Close()
			})
			a, c := ms[0].Conn(1), ms[1].Conn(0)
			data, buf := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := range b.N {
				tag := transport.Tag{Comm: 3, Seq: uint32(i)}
				s, _ := a.Isend(tag, data)
				<-arrived
				r, _ := c.Irecv(tag, buf)
				if err := transport.Wait(ctx, nil, s, r); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
