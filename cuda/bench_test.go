package cuda

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
)

// Benchmarks share one worker per device for the whole run, so that context
// creation and kernel loading stay out of every figure.
var benchWorkers struct {
	once sync.Once
	w    []*Worker
	err  error
}

func benchWorker(b *testing.B, dev int) *Worker {
	b.Helper()
	needDevices(b, dev+1)
	benchWorkers.once.Do(func() {
		n, _ := DeviceCount()
		for d := range min(n, 2) {
			w, err := NewWorker(Device(d), WorkerOptions{})
			if err != nil {
				benchWorkers.err = err
				return
			}
			benchWorkers.w = append(benchWorkers.w, w)
			if err := w.Do(context.Background(), func(c *Ctx) error { return c.LoadKernels() }); err != nil {
				benchWorkers.err = err
				return
			}
		}
		if len(benchWorkers.w) == 2 {
			benchWorkers.err = EnablePeers(context.Background(), benchWorkers.w...)
		}
	})
	if benchWorkers.err != nil {
		b.Fatal(benchWorkers.err)
	}
	return benchWorkers.w[dev]
}

// BenchmarkDo measures a round trip through a worker: the caller hands an
// empty closure over and waits for its result.
func BenchmarkDo(b *testing.B) {
	for _, spin := range []time.Duration{0, -1} {
		name := "spin"
		if spin < 0 {
			name = "nospin"
		}
		b.Run(name, func(b *testing.B) {
			// The shared worker keeps the primary context alive, so that
			// this worker, of the same device, starts cheaply.
			benchWorker(b, 0)
			w, err := NewWorker(0, WorkerOptions{Spin: spin})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			ctx := context.Background()
			nop := func(*Ctx) error { return nil }
			b.ResetTimer()
			for range b.N {
				if err := w.Do(ctx, nop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// tiny is the smallest kernel launch: a float32 sum of one element.
func tiny(c *Ctx, s Stream, p DevicePtr) error {
	return c.Reduce(s, Reduction{DType: dtype.Float32, Op: dtype.Sum, Dst: p, A: p, B: p, Count: 1})
}

// BenchmarkLaunch measures the host time to enqueue one small kernel
// (launches issued back to back inside one closure, synchronised every 256).
func BenchmarkLaunch(b *testing.B) {
	w := benchWorker(b, 0)
	s := stream(b, w)
	p := alloc(b, w, 256)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i += 256 {
		k := min(256, b.N-i)
		if err := w.Do(ctx, func(c *Ctx) error {
			for range k {
				if err := tiny(c, s, p); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if err := w.Sync(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLaunchGPU measures the GPU time per small kernel launched back to
// back, with events on the stream (the launch rate the GPU sustains).
func BenchmarkLaunchGPU(b *testing.B) {
	w := benchWorker(b, 0)
	s := stream(b, w)
	p := alloc(b, w, 256)
	var total time.Duration
	b.ResetTimer()
	do(b, w, func(c *Ctx) error {
		start, err := c.NewEvent(EventDefault)
		if err != nil {
			return err
		}
		defer c.DestroyEvent(start)
		end, err := c.NewEvent(EventDefault)
		if err != nil {
			return err
		}
		defer c.DestroyEvent(end)
		if err := c.Record(start, s); err != nil {
			return err
		}
		for range b.N {
			if err := tiny(c, s, p); err != nil {
				return err
			}
		}
		if err := c.Record(end, s); err != nil {
			return err
		}
		if err := c.EventSynchronize(end); err != nil {
			return err
		}
		total, err = c.Elapsed(start, end)
		return err
	})
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N)/1e3, "gpu-us/launch")
}

// BenchmarkLaunchWait measures one small kernel from Go to completion: Do
// enqueues it and an event, WaitEvent waits (what one step of a small
// collective costs). "blocking" waits inside the closure with
// EventSynchronize instead.
func BenchmarkLaunchWait(b *testing.B) {
	w := benchWorker(b, 0)
	s := stream(b, w)
	p := alloc(b, w, 256)
	ev := event(b, w)
	ctx := context.Background()
	b.Run("waitevent", func(b *testing.B) {
		for range b.N {
			if err := w.Do(ctx, func(c *Ctx) error {
				if err := tiny(c, s, p); err != nil {
					return err
				}
				return c.Record(ev, s)
			}); err != nil {
				b.Fatal(err)
			}
			if err := w.WaitEvent(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("blocking", func(b *testing.B) {
		for range b.N {
			if err := w.Do(ctx, func(c *Ctx) error {
				if err := tiny(c, s, p); err != nil {
					return err
				}
				if err := c.Record(ev, s); err != nil {
					return err
				}
				return c.EventSynchronize(ev)
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// copyBench enqueues b.N copies of size bytes inside one closure and
// waits for them; bytes per op is size (both directions: 2*size).
func copyBench(b *testing.B, w *Worker, size int, enqueue func(c *Ctx, s Stream) error) {
	s := stream(b, w)
	ctx := context.Background()
	// One warm-up copy.
	do(b, w, func(c *Ctx) error { return enqueue(c, s) })
	if err := w.Sync(ctx, s); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	do(b, w, func(c *Ctx) error {
		for range b.N {
			if err := enqueue(c, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err := w.Sync(ctx, s); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.ReportMetric(float64(size)*float64(b.N)/el.Seconds()/1e9, "GB/s")
}

// BenchmarkCopy measures copy-engine bandwidth: pinned host to device and
// back, device to device on one GPU, and GPU 0 to GPU 1 (CopyPeer) one way
// and both ways at once (bytes counted once per direction).
func BenchmarkCopy(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20, 256 << 20} {
		name := fmt.Sprintf("%dMiB", size>>20)
		b.Run("H2D/"+name, func(b *testing.B) {
			w := benchWorker(b, 0)
			h, d := hostAlloc(b, w, size), alloc(b, w, size)
			copyBench(b, w, size, func(c *Ctx, s Stream) error { return c.CopyHtoD(d, h.Bytes(), s) })
		})
		b.Run("D2H/"+name, func(b *testing.B) {
			w := benchWorker(b, 0)
			h, d := hostAlloc(b, w, size), alloc(b, w, size)
			copyBench(b, w, size, func(c *Ctx, s Stream) error { return c.CopyDtoH(h.Bytes(), d, s) })
		})
		b.Run("D2D/"+name, func(b *testing.B) {
			w := benchWorker(b, 0)
			x, y := alloc(b, w, size), alloc(b, w, size)
			copyBench(b, w, size, func(c *Ctx, s Stream) error { return c.CopyDtoD(y, x, size, s) })
		})
		b.Run("Peer/"+name, func(b *testing.B) {
			w0, w1 := benchWorker(b, 0), benchWorker(b, 1)
			x, y := alloc(b, w0, size), alloc(b, w1, size)
			copyBench(b, w0, size, func(c *Ctx, s Stream) error {
				return c.CopyPeer(y, w1.Context(), x, w0.Context(), size, s)
			})
		})
		b.Run("PeerBidir/"+name, func(b *testing.B) {
			w0, w1 := benchWorker(b, 0), benchWorker(b, 1)
			x0, y0 := alloc(b, w0, size), alloc(b, w0, size)
			x1, y1 := alloc(b, w1, size), alloc(b, w1, size)
			s0, s1 := stream(b, w0), stream(b, w1)
			ctx := context.Background()
			push := func(n int) {
				// Each GPU pushes to the other on its own stream, enqueued
				// by its own worker.
				var wg sync.WaitGroup
				for _, p := range []struct {
					w        *Worker
					s        Stream
					dst, src DevicePtr
					dc, sc   Context
				}{{w0, s0, y1, x0, w1.Context(), w0.Context()}, {w1, s1, y0, x1, w0.Context(), w1.Context()}} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						err := p.w.Do(ctx, func(c *Ctx) error {
							for range n {
								if err := c.CopyPeer(p.dst, p.dc, p.src, p.sc, size, p.s); err != nil {
									return err
								}
							}
							return nil
						})
						if err == nil {
							err = p.w.Sync(ctx, p.s)
						}
						if err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			push(1)
			b.SetBytes(int64(2 * size))
			b.ResetTimer()
			start := time.Now()
			push(b.N)
			b.ReportMetric(2*float64(size)*float64(b.N)/time.Since(start).Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkCopyLatency measures a small copy from Go to completion (Do
// enqueues it and an event, WaitEvent waits).
func BenchmarkCopyLatency(b *testing.B) {
	for _, kind := range []string{"D2D", "Peer"} {
		b.Run(kind, func(b *testing.B) {
			w0 := benchWorker(b, 0)
			x := alloc(b, w0, 256)
			y := alloc(b, w0, 256)
			if kind == "Peer" {
				y = alloc(b, benchWorker(b, 1), 256)
			}
			s := stream(b, w0)
			ev := event(b, w0)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if err := w0.Do(ctx, func(c *Ctx) error {
					if err := c.CopyDtoD(y, x, 8, s); err != nil {
						return err
					}
					return c.Record(ev, s)
				}); err != nil {
					b.Fatal(err)
				}
				if err := w0.WaitEvent(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReduce measures the reduction kernels on 64 MiB inputs: GB/s
// counts every byte moved (two inputs read, one output written, and the
// second output when there is one). "peer" reads B from GPU 1 and writes
// the second destination to GPU 1, over NVLink.
func BenchmarkReduce(b *testing.B) {
	const size = 64 << 20
	type cfg struct {
		name   string
		d      dtype.DType
		blocks int
		peer   bool
		dual   bool
	}
	cfgs := []cfg{
		{"f32", dtype.Float32, 0, false, false},
		{"bf16", dtype.BFloat16, 0, false, false},
		{"f16", dtype.Float16, 0, false, false},
		{"f64", dtype.Float64, 0, false, false},
		{"f32-dual", dtype.Float32, 0, false, true},
		{"f32-blocks132", dtype.Float32, 132, false, false},
		{"f32-blocks32", dtype.Float32, 32, false, false},
		{"f32-blocks8", dtype.Float32, 8, false, false},
		{"f32-peer-dual", dtype.Float32, 0, true, true},
		{"f32-peer-dual-blocks32", dtype.Float32, 32, true, true},
	}
	for _, cf := range cfgs {
		b.Run(cf.name, func(b *testing.B) {
			w := benchWorker(b, 0)
			x, y, z := alloc(b, w, size), alloc(b, w, size), alloc(b, w, size)
			var z2 DevicePtr
			if cf.peer {
				w1 := benchWorker(b, 1)
				y, z2 = alloc(b, w1, size), alloc(b, w1, size)
			} else if cf.dual {
				z2 = alloc(b, w, size)
			}
			moved := 3 * size
			if z2 != 0 {
				moved += size
			}
			do(b, w, func(c *Ctx) error {
				s, err := c.NewStream(0)
				if err != nil {
					return err
				}
				defer c.DestroyStream(s)
				if err := c.Memset32(x, 0x3f800000, size/4, s); err != nil {
					return err
				}
				return c.StreamSynchronize(s)
			})
			copyBench(b, w, moved, func(c *Ctx, s Stream) error {
				return c.Reduce(s, Reduction{DType: cf.d, Op: dtype.Sum, Dst: z, Dst2: z2, A: x, B: y, Count: size / cf.d.Size(), Blocks: cf.blocks})
			})
		})
	}
}

// BenchmarkZeroCopy measures kernels that read or write mapped pinned host
// memory across the bus (the host path of a multi-path kernel), on one GPU
// and on up to four at once: "write" stores size bytes into host memory,
// "read" loads them from it, "both" does both at once. host-GB/s counts
// the bytes that cross one GPU's bus.
func BenchmarkZeroCopy(b *testing.B) {
	const size = 128 << 20
	n, _ := DeviceCount()
	for _, gpus := range []int{1, 4} {
		for _, mode := range []string{"write", "read", "both"} {
			b.Run(fmt.Sprintf("%dgpu/%s", gpus, mode), func(b *testing.B) {
				if n < gpus {
					b.Skipf("%d GPUs, want %d", n, gpus)
				}
				ctx := context.Background()
				type gpu struct {
					w      *Worker
					s      Stream
					h1, h2 *HostBuffer
					d1, d2 DevicePtr
				}
				gs := make([]gpu, gpus)
				for i := range gs {
					w, err := NewWorker(Device(i), WorkerOptions{})
					if err != nil {
						b.Fatal(err)
					}
					defer w.Close()
					g := &gs[i]
					g.w = w
					do(b, w, func(c *Ctx) (err error) {
						if err = c.LoadKernels(); err != nil {
							return err
						}
						if g.s, err = c.NewStream(0); err != nil {
							return err
						}
						for _, h := range []**HostBuffer{&g.h1, &g.h2} {
							if *h, err = c.HostAlloc(size, HostAllocPortable|HostAllocDeviceMap); err != nil {
								return err
							}
						}
						for _, d := range []*DevicePtr{&g.d1, &g.d2} {
							if *d, err = c.Alloc(size); err != nil {
								return err
							}
						}
						return nil
					})
					defer do(b, w, func(c *Ctx) error {
						return errors.Join(c.FreeHost(g.h1), c.FreeHost(g.h2), c.Free(g.d1), c.Free(g.d2), c.DestroyStream(g.s))
					})
				}
				run := func(iters int) {
					var wg sync.WaitGroup
					for i := range gs {
						g := &gs[i]
						wg.Add(1)
						go func() {
							defer wg.Done()
							err := g.w.Do(ctx, func(c *Ctx) error {
								r := Reduction{DType: dtype.Float32, Op: dtype.Sum, Count: size / 4, Dst: g.d2, A: g.d1, B: g.d1}
								switch mode {
								case "write":
									r.Dst = g.h1.Ptr()
								case "read":
									r.A = g.h2.Ptr()
								case "both":
									r.Dst, r.A = g.h1.Ptr(), g.h2.Ptr()
								}
								for range iters {
									if err := c.Reduce(g.s, r); err != nil {
										return err
									}
								}
								return c.StreamSynchronize(g.s)
							})
							if err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
				}
				run(1)
				b.ResetTimer()
				start := time.Now()
				run(b.N)
				sec := time.Since(start).Seconds()
				b.ReportMetric(float64(size)*float64(b.N)/sec/1e9, "host-GB/s")
			})
		}
	}
}

// BenchmarkCompletion measures one small kernel from launch to the host
// knowing it has finished, by each way the host can learn it: inside a
// closure (no hand-over to the worker) with cuStreamSynchronize, an event's
// cuEventSynchronize, a loop of cuEventQuery, or a stream memory operation
// (cuStreamWriteValue32) storing the call's number into mapped pinned host
// memory that the thread polls without a driver call; and "go+value", where
// the caller hands the launch and the store to the worker without waiting
// for the closure's return and polls the word itself, as a synchronous
// collective could.
func BenchmarkCompletion(b *testing.B) {
	w := benchWorker(b, 0)
	s := stream(b, w)
	p := alloc(b, w, 256)
	ev := event(b, w)
	ctx := context.Background()
	var hb *HostBuffer
	var word DevicePtr
	do(b, w, func(c *Ctx) (err error) {
		if hb, err = c.HostAlloc(64, HostAllocDeviceMap|HostAllocPortable); err != nil {
			return err
		}
		word, err = c.HostDevicePointer(hb.Bytes())
		return err
	})
	defer w.Do(ctx, func(c *Ctx) error { return c.FreeHost(hb) })
	flag := (*atomic.Uint32)(unsafe.Pointer(&hb.Bytes()[0]))
	var seq uint32
	spin := func(want uint32) {
		// A store that never comes (a failed closure) must not hang the
		// run: give up after some seconds of polling.
		for i := 0; flag.Load() != want; i++ {
			if i == 1<<32-1 {
				panic("cuda: BenchmarkCompletion: the stream's store never came")
			}
		}
	}
	ways := []struct {
		name string
		wait func(c *Ctx) error
	}{
		{"streamsync", func(c *Ctx) error { return c.StreamSynchronize(s) }},
		{"eventsync", func(c *Ctx) error {
			if err := c.Record(ev, s); err != nil {
				return err
			}
			return c.EventSynchronize(ev)
		}},
		{"eventquery", func(c *Ctx) error {
			if err := c.Record(ev, s); err != nil {
				return err
			}
			for {
				done, err := c.EventQuery(ev)
				if done || err != nil {
					return err
				}
			}
		}},
		{"value", func(c *Ctx) error {
			seq++
			if err := c.StreamWriteValue32(s, word, seq); err != nil {
				return err
			}
			spin(seq)
			return nil
		}},
	}
	for _, way := range ways {
		b.Run(way.name, func(b *testing.B) {
			do(b, w, func(c *Ctx) error {
				for range b.N {
					if err := tiny(c, s, p); err != nil {
						return err
					}
					if err := way.wait(c); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	b.Run("go+value", func(b *testing.B) {
		if api.cuStreamWriteValue32 == 0 {
			b.Skip("the driver has no cuStreamWriteValue32")
		}
		for range b.N {
			seq++
			want := seq
			w.Go(func(c *Ctx) error {
				if err := tiny(c, s, p); err != nil {
					return err
				}
				return c.StreamWriteValue32(s, word, want)
			})
			spin(want)
		}
	})
	b.Run("do+streamsync", func(b *testing.B) {
		for range b.N {
			if err := w.Do(ctx, func(c *Ctx) error {
				if err := tiny(c, s, p); err != nil {
					return err
				}
				return c.StreamSynchronize(s)
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
