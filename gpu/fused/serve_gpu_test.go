package fused

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/wait"
)

// BenchmarkServerRing times the resident allreduce's round trip on one
// GPU, with no peer: the host writes a call's arguments and its ticket
// into the bell, the kernel (a one-rank communicator: it copies the
// vector) runs it and stores the ticket back, the host sees it. It is the
// part of a resident call that is not the exchange between GPUs: two
// trips over the bus and the kernel's own work. "spin" polls the done
// word in a tight loop, "backoff" as package gpu does (wait.Backoff).
// p50 and p99 are of the single calls.
func BenchmarkServerRing(b *testing.B) {
	if n, err := cuda.DeviceCount(); err != nil || n < 1 {
		b.Skip("no CUDA device: the resident kernel's round trip is measured on a GPU")
	}
	w, err := cuda.NewWorker(0, cuda.WorkerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	var region, seqs, buf, bellDev, statusDev cuda.DevicePtr
	var bell, status *cuda.HostBuffer
	var s cuda.Stream
	const slot = 256
	if err := w.Do(ctx, func(c *cuda.Ctx) (err error) {
		if region, err = c.Alloc(RegionBytes(1, slot)); err != nil {
			return err
		}
		if err = c.Memset8(region, 0, RegionBytes(1, slot), 0); err != nil {
			return err
		}
		if seqs, err = c.Alloc(4 * SeqWords); err != nil {
			return err
		}
		if err = c.Memset32(seqs, 1, SeqWords, 0); err != nil {
			return err
		}
		if buf, err = c.Alloc(64); err != nil {
			return err
		}
		if bell, err = c.HostAlloc(4*BellWords, cuda.HostAllocPortable|cuda.HostAllocDeviceMap); err != nil {
			return err
		}
		if bellDev, err = c.HostDevicePointer(bell.Bytes()); err != nil {
			return err
		}
		if status, err = c.HostAlloc(64, cuda.HostAllocPortable|cuda.HostAllocDeviceMap); err != nil {
			return err
		}
		if statusDev, err = c.HostDevicePointer(status.Bytes()); err != nil {
			return err
		}
		if s, err = c.NewStream(0); err != nil {
			return err
		}
		return c.Synchronize()
	}); err != nil {
		b.Fatal(err)
	}
	defer w.Do(ctx, func(c *cuda.Ctx) error {
		c.DestroyStream(s)
		c.FreeHost(bell)
		c.FreeHost(status)
		c.Free(buf)
		c.Free(seqs)
		return c.Free(region)
	})
	word := func(i int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&bell.Bytes()[4*i])) }
	var ticket, epoch uint32
	for _, way := range []string{"spin", "backoff"} {
		b.Run(way, func(b *testing.B) {
			epoch++
			v := Server{DType: dtype.Float32, Op: dtype.Sum, Bell: bellDev, Served: ticket, Epoch: epoch, Seqs: seqs,
				Regions: []cuda.DevicePtr{region}, SlotBytes: slot, Status: statusDev}
			if err := w.Do(ctx, func(c *cuda.Ctx) error {
				f, err := c.Kernel("llserve", v.DType, v.Op)
				if err != nil {
					return err
				}
				return c.Launch(f, cuda.D1(1), cuda.D1(Threads), 0, s, v.args().pack(nil)...)
			}); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			done := word(BellDone)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				ticket++
				Ring(bell.Bytes(), ticket, buf, buf, 2, time.Second)
				bo := wait.Backoff{Spin: 50 * time.Microsecond, Goroutines: true}
				for i := 0; done.Load() != ticket; i++ {
					if i == 1<<31 {
						b.Fatal("the resident kernel did not answer")
					}
					if way == "backoff" {
						if d := bo.Step(true); d > 0 {
							time.Sleep(d)
						}
					}
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			word(BellQuit).Store(epoch)
			if err := w.Do(ctx, func(c *cuda.Ctx) error { return c.StreamSynchronize(s) }); err != nil {
				b.Fatal(err)
			}
			if p := atomic.LoadUint32((*uint32)(unsafe.Pointer(&status.Bytes()[0]))); p != 0 {
				b.Fatalf("status %d", p)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
		})
	}
}
