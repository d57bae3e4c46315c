package braid

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// deviceStrideEnv marks the ranks that TestDeviceReduceScatterStride
// starts.
const deviceStrideEnv = "BRAID_DEVICE_TEST_STRIDE"

// TestDeviceReduceScatterStride runs the fused reduce-scatter on blocks
// whose size is not a whole number of 16-byte words, from
// fused.StrideMin up, which the kernel runs staged at an aligned stride
// (fused.Kernel.Stride): every dtype × op, in place and not, checked
// against the host reference, then back to back in stream order. It runs
// one rank per GPU, or BRAID_TEST_GPUS ranks sharing them, and is skipped
// without a GPU.
func TestDeviceReduceScatterStride(t *testing.T) {
	if os.Getenv(deviceStrideEnv) != "" {
		deviceStrideRank(t)
		return
	}
	launchDeviceTest(t, "TestDeviceReduceScatterStride", deviceStrideEnv, 8*time.Minute)
}

// deviceStrideRank is one rank of TestDeviceReduceScatterStride.
func deviceStrideRank(t *testing.T) {
	ctx, c, dev := deviceTestInit(t, 7*time.Minute)
	n, rank := c.Size(), c.Rank()
	var comms []*DeviceComm
	defer func() {
		for _, d := range comms {
			if err := d.Close(); err != nil {
				t.Errorf("rank %d: close: %v", rank, err)
			}
		}
	}()
	open := func(ordered bool) *DeviceComm {
		d, err := c.NewDeviceComm(ctx, dev, &DeviceOptions{Algo: map[string]string{"reducescatter": "fused"}, StreamOrdered: ordered})
		if err != nil {
			t.Fatalf("rank %d: NewDeviceComm: %v", rank, err)
		}
		comms = append(comms, d)
		return d
	}
	d, ordered := open(false), open(true)
	if ok, why := d.g.Fused(); !ok {
		t.Skipf("no fused kernels: %s", why)
	}
	// Blocks just past StrideMin and three times it, a few elements past a
	// 16-byte word (for bytes: past StrideMin, odd).
	counts := func(es int) []int { return []int{fused.StrideMin/es + 1, 3*fused.StrideMin/es + 5} }
	most := n*(3*fused.StrideMin+5*8) + 64
	w := d.Worker()
	bufA, bufB, free := deviceBuffers(ctx, t, w, most)
	defer free()
	start, ran, failures := time.Now(), 0, 0
	for _, dt := range dtype.All() {
		for _, op := range dtype.AllOps() {
			if !dtype.Supports(dt, op) {
				continue
			}
			for _, count := range counts(dt.Size()) {
				d.mu.Lock()
				pl, err := d.plan(sched.Params{Coll: sched.ReduceScatter, NRanks: n, Count: count}, dt, op)
				d.mu.Unlock()
				if err != nil || pl.fused == nil || pl.fused.Stride <= count {
					t.Fatalf("rank %d: reduce-scatter of %d %v: %+v, %v: want the fused kernel at a stride", rank, count, dt, pl, err)
				}
				for _, inPlace := range []bool{false, true} {
					k := deviceCase{sched.ReduceScatter, "fused", dt, op, count, 0, inPlace, false}
					call := func(send, recv Device) error { return d.ReduceScatter(ctx, send, recv, op) }
					ran++
					if err := runDeviceCase(ctx, w, call, k, rank, n, bufA, bufB, ran); err != nil {
						t.Errorf("rank %d: %v (stride %d): %v", rank, k, pl.fused.Stride, err)
						if failures++; failures > 20 {
							t.Fatal("too many failures")
						}
					}
				}
			}
		}
	}
	// Back to back in stream order, in place: each call's input is the
	// last call's whole buffer, so a call that read scratch of another
	// would break the sums. From x = rank+1 everywhere, after the first
	// call block r of rank r holds Σ(q+1) = n(n+1)/2; the calls that
	// follow each take a block of all ranks' buffers.
	if err := strideChain(ctx, ordered, w, bufA, counts(4)[0], rank, n); err != nil {
		t.Errorf("rank %d: stream-ordered reduce-scatters at a stride: %v", rank, err)
	}
	t.Logf("rank %d: %d reduce-scatters at a stride checked on GPU %d in %v", rank, ran, dev, time.Since(start).Round(time.Millisecond))
}

// strideChain runs the chain that deviceStrideRank describes: k in-place
// int32 reduce-scatters of count-element blocks, stream-ordered, on buf
// that starts as ones; block r of rank r then holds n + (k−1)(n−1) and
// every other block its ones.
func strideChain(ctx context.Context, d *DeviceComm, w *cuda.Worker, buf cuda.DevicePtr, count, rank, n int) error {
	const k = 10
	x := make([]int32, n*count)
	for i := range x {
		x[i] = 1
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
	if err := w.Do(ctx, func(cc *cuda.Ctx) error {
		if err := cc.CopyHtoD(buf, b, 0); err != nil {
			return err
		}
		return cc.Synchronize()
	}); err != nil {
		return err
	}
	send := Device{Ptr: buf, Count: n * count, Type: Int32}
	recv := Device{Ptr: buf.Add(rank * count * 4), Count: count, Type: Int32}
	for range k {
		if err := d.ReduceScatter(ctx, send, recv, Sum); err != nil {
			return err
		}
	}
	if err := d.Synchronize(ctx); err != nil {
		return err
	}
	if err := readDevice(ctx, w, b, buf); err != nil {
		return err
	}
	for i, v := range x {
		want := int32(1)
		if i/count == rank {
			want = int32(n + (k-1)*(n-1))
		}
		if v != want {
			return fmt.Errorf("element %d (block %d) is %d, want %d", i, i/count, v, want)
		}
	}
	return nil
}
