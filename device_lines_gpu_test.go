package braid

import (
	"os"
	"testing"
	"time"

	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// deviceLinesEnv marks the ranks that TestDeviceLinesUnaligned starts.
const deviceLinesEnv = "BRAID_DEVICE_TEST_LINES"

// TestDeviceLinesUnaligned runs the kernels in low-latency lines (the
// one-shot allreduce, the reduce-scatter and the allgather of small
// blocks) on buffers that are not 8-byte aligned on every other rank, as
// a caller's pointers into a larger allocation may be: the size alone
// chooses the kernel, so every rank runs the same one, and a rank whose
// buffers are unaligned runs it on aligned scratch (gpu's
// fusedState.staged). Every 4-byte dtype × op, in place and not, checked
// against the host reference. It runs one rank per GPU, or
// BRAID_TEST_GPUS ranks sharing them, and is skipped without a GPU.
func TestDeviceLinesUnaligned(t *testing.T) {
	if os.Getenv(deviceLinesEnv) != "" {
		deviceLinesRank(t)
		return
	}
	launchDeviceTest(t, "TestDeviceLinesUnaligned", deviceLinesEnv, 8*time.Minute)
}

// deviceLinesRank is one rank of TestDeviceLinesUnaligned.
func deviceLinesRank(t *testing.T) {
	ctx, c, dev := deviceTestInit(t, 7*time.Minute)
	n, rank := c.Size(), c.Rank()
	d, err := c.NewDeviceComm(ctx, dev, nil)
	if err != nil {
		t.Fatalf("rank %d: NewDeviceComm: %v", rank, err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Errorf("rank %d: close: %v", rank, err)
		}
	}()
	if ok, why := d.g.Fused(); !ok {
		t.Skipf("no fused kernels: %s", why)
	}
	const count = 1000 // 4000-byte blocks and vectors: whole 8-byte words
	w := d.Worker()
	bufA, bufB, free := deviceBuffers(ctx, t, w, n*count*8+64)
	defer free()
	off := 4 * (rank % 2) // odd ranks' buffers are 4 bytes past an 8-byte boundary
	want := map[sched.Collective]fused.Kind{sched.Allreduce: fused.OneShotLL, sched.ReduceScatter: fused.ReduceScatterLL,
		sched.Allgather: fused.AllgatherLL}
	ran := 0
	for _, coll := range []sched.Collective{sched.Allreduce, sched.ReduceScatter, sched.Allgather} {
		for _, dt := range dtype.All() {
			if dt.Size() != 4 {
				continue // the offset keeps 4-byte elements aligned to their size
			}
			ops := []Op{Sum}
			if coll.Reduces() {
				ops = nil
				for _, op := range dtype.AllOps() {
					if dtype.Supports(dt, op) {
						ops = append(ops, op)
					}
				}
			}
			for _, op := range ops {
				d.mu.Lock()
				pl, err := d.plan(sched.Params{Coll: coll, NRanks: n, Count: count}, dt, op)
				d.mu.Unlock()
				if err != nil || pl.fused == nil || pl.fused.Kind != want[coll] {
					t.Fatalf("rank %d: %v of %d %v: %+v, %v: want the %v kernel", rank, coll, count, dt, pl, err, want[coll])
				}
				for _, inPlace := range []bool{false, true} {
					k := deviceCase{coll, "", dt, op, count, 0, inPlace, false}
					call := func(send, recv Device) error {
						switch coll {
						case sched.ReduceScatter:
							return d.ReduceScatter(ctx, send, recv, op)
						case sched.Allgather:
							return d.Allgather(ctx, send, recv)
						}
						return d.Allreduce(ctx, send, recv, op)
					}
					ran++
					if err := runDeviceCase(ctx, w, call, k, rank, n, bufA.Add(off), bufB.Add(off), ran); err != nil {
						t.Errorf("rank %d: %v (buffers %d bytes past 8-byte alignment): %v", rank, k, off, err)
					}
				}
			}
		}
	}
	t.Logf("rank %d: %d calls in low-latency lines checked on GPU %d, buffers %d bytes past alignment", rank, ran, dev, off)
}
