package braid

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// deviceResidentEnv marks the ranks that TestDeviceResident starts.
const deviceResidentEnv = "BRAID_DEVICE_TEST_RESIDENT"

// TestDeviceResident runs small allreduces on the resident kernel
// (DeviceOptions.Resident): every type and op in low-latency lines, in
// place and not, sizes around ResidentMax (above it: a launched kernel,
// with the same counters and lines), a change of type (the kernel ends
// and another starts), a pause longer than Resident (it ends on its own,
// and the next call starts one), and a run of calls whose every result is
// checked. Where ranks share a GPU the kernel is off and the calls run as
// launched kernels: the test then checks that Resident says why.
func TestDeviceResident(t *testing.T) {
	if os.Getenv(deviceResidentEnv) != "" {
		deviceResidentRank(t)
		return
	}
	launchDeviceTest(t, "TestDeviceResident", deviceResidentEnv, 4*time.Minute)
}

func deviceResidentRank(t *testing.T) {
	ctx, c, dev := deviceTestInit(t, 3*time.Minute)
	n, rank := c.Size(), c.Rank()
	const idle = 2 * time.Millisecond
	d, err := c.NewDeviceComm(ctx, dev, &DeviceOptions{Resident: idle, ResidentMax: 4 << 10})
	if err != nil {
		t.Fatalf("rank %d: NewDeviceComm: %v", rank, err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Errorf("rank %d: close: %v", rank, err)
		}
	}()
	rs := d.g.Resident()
	on, why := rs.On, rs.Off
	gpus, _ := cuda.DeviceCount()
	if n > gpus {
		if on || why == "" {
			t.Fatalf("rank %d: %d ranks on %d GPUs, and the resident kernel is on (%v) or says no reason (%q)", rank, n, gpus, on, why)
		}
		t.Logf("rank %d: resident kernel off, as it should be: %s", rank, why)
	} else if !on {
		t.Fatalf("rank %d: no resident kernel on %d GPUs for %d ranks: %s", rank, gpus, n, why)
	}
	w := d.Worker()
	const bytes = 64 << 10
	bufA, bufB, free := deviceBuffers(ctx, t, w, bytes)
	defer free()
	call := func(send, recv Device, op Op) error { return d.Allreduce(ctx, send, recv, op) }
	salt := 0
	run := func(k deviceCase) {
		t.Helper()
		salt++
		if err := runDeviceCase(ctx, w, func(s, r Device) error { return call(s, r, k.op) }, k, rank, n, bufA, bufB, salt); err != nil {
			t.Fatalf("rank %d: %v (salt %d): %v", rank, k, salt, err)
		}
	}
	// Every type and op, in whole 8-byte words, at 8 bytes and 4 KiB (the
	// cap) and above it, in place and not.
	for _, dt := range dtype.All() {
		for _, op := range dtype.AllOps() {
			if !dtype.Supports(dt, op) {
				continue
			}
			for _, b := range []int{8, 4 << 10, 4<<10 + 8} {
				for _, inPlace := range []bool{false, true} {
					run(deviceCase{coll: sched.Allreduce, d: dt, op: op, count: b / dt.Size(), inPlace: inPlace})
				}
			}
		}
	}
	// A run of calls with nothing else on the GPU between them: one
	// kernel takes them all (the preparation of every case above
	// synchronises the whole context, which waits for the kernel to end:
	// there every call starts one). The input stays; every call writes
	// the same sum, checked after the last.
	salt++
	p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: 2}
	in, out := make([]byte, 8), make([]byte, 8)
	check.FillInput(p, Float32, Sum, in, rank, salt)
	if err := w.Do(ctx, func(cc *cuda.Ctx) error {
		if err := cc.CopyHtoD(bufA, in, 0); err != nil {
			return err
		}
		return cc.Synchronize()
	}); err != nil {
		t.Fatal(err)
	}
	before := d.g.Resident().Starts
	for range 200 {
		if err := d.Allreduce(ctx, Device{Ptr: bufA, Count: 2, Type: Float32}, Device{Ptr: bufB, Count: 2, Type: Float32}, Sum); err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
	starts := d.g.Resident().Starts - before
	if err := readDevice(ctx, w, out, bufB); err != nil {
		t.Fatal(err)
	}
	if err := check.Verify(p, Float32, Sum, rank, out, salt); err != nil {
		t.Fatalf("rank %d: after 200 calls: %v", rank, err)
	}
	if on && starts > 2 {
		t.Errorf("rank %d: 200 calls in a row started %d resident kernels, want 1 (2 if it idled out once)", rank, starts)
	}
	time.Sleep(5 * idle)
	run(deviceCase{coll: sched.Allreduce, d: Float32, op: Sum, count: 64})
	// A size the resident kernel does not take (not whole 8-byte words).
	run(deviceCase{coll: sched.Allreduce, d: Float32, op: Sum, count: 3})
	run(deviceCase{coll: sched.Allreduce, d: Float32, op: Sum, count: 4})
	if on {
		rs := d.g.Resident()
		// 2 of every 3 sizes above, twice, over every type and op, then
		// the run and two more.
		if rs.Calls < 200 {
			t.Errorf("rank %d: the resident kernel ran %d calls, want at least 200", rank, rs.Calls)
		}
		t.Logf("rank %d: the resident kernel ran %d calls, in %d kernels", rank, rs.Calls, rs.Starts)
	}
	if err := d.Synchronize(ctx); err != nil {
		t.Fatal(fmt.Errorf("rank %d: synchronize: %w", rank, err))
	}
}
