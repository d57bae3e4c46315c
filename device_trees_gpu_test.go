package braid

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// deviceTreesEnv marks the ranks that TestDeviceTreesRun starts.
const deviceTreesEnv = "BRAID_DEVICE_TEST_TREES"

// treeAllocations places n ranks on a DGX-1 V100 for TestDeviceTreesRun:
// allocations whose NVLinks form no ring (Blink, MLSys 2020, §2.1), so
// that the trees take routes through PCIe where a pair has no NVLink (2
// ranks on GPUs 0 and 5 have none at all).
var treeAllocations = map[int][]int{
	2: {0, 5}, 3: {0, 1, 5}, 4: {1, 4, 5, 6}, 5: {0, 1, 2, 4, 5},
	6: {0, 1, 2, 3, 4, 6}, 7: {0, 1, 2, 3, 4, 5, 6}, 8: {0, 1, 2, 3, 4, 5, 6, 7},
}

// TestDeviceTreesRun runs broadcast, reduce and allreduce on device
// buffers as Blink's packed trees (forced by DeviceOptions.Algo, the
// device's form of BRAID_ALGO=bcast=treepack), packed on a DGX-1 V100
// topology (Options.Topology) on which the ranks are placed as
// treeAllocations says, whatever GPUs run them: the schedule's steps go
// through the GPU executor (pushes, reductions with cuda.Ctx.Reduce), and
// every rank checks every dtype × op × count, roots 0 and n−1, in place
// and not, against the host reference, with the segment the planner
// tunes and with 4 KiB segments (many pieces per tree). It runs one rank
// per GPU, or BRAID_TEST_GPUS ranks sharing them (2 to 8), and is skipped
// without a GPU.
func TestDeviceTreesRun(t *testing.T) {
	if os.Getenv(deviceTreesEnv) != "" {
		deviceTreesRank(t)
		return
	}
	if n := deviceTestRanks(t); treeAllocations[n] == nil {
		t.Skipf("%d ranks: the DGX-1 topology has 8 GPUs", n)
	}
	launchDeviceTest(t, "TestDeviceTreesRun", deviceTreesEnv, 8*time.Minute)
}

// deviceTreesRank is one rank of TestDeviceTreesRun.
func deviceTreesRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	defer cancel()
	tp := topo.DGX1V100()
	n0, err := strconv.Atoi(os.Getenv(deviceTreesEnv))
	if err != nil {
		t.Fatalf("%s: %v", deviceTreesEnv, err)
	}
	c, err := Init(ctx, &Options{Topology: tp, Devices: gpusOf(tp, treeAllocations[n0]...)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dev := deviceTestGPU(t, c)
	n, rank := c.Size(), c.Rank()
	forced := map[string]string{"bcast": "treepack", "reduce": "treepack", "allreduce": "treepack"}
	var comms []*DeviceComm
	open := func(o DeviceOptions) *DeviceComm {
		o.Algo = forced
		d, err := c.NewDeviceComm(ctx, dev, &o)
		if err != nil {
			t.Fatalf("rank %d: NewDeviceComm: %v", rank, err)
		}
		comms = append(comms, d)
		return d
	}
	defer func() {
		for _, d := range comms {
			if err := d.Close(); err != nil {
				t.Errorf("rank %d: close: %v", rank, err)
			}
		}
	}()
	tuned, small, ordered := open(DeviceOptions{}), open(DeviceOptions{Segment: 4 << 10}), open(DeviceOptions{StreamOrdered: true})
	// big is the matrix's largest count; miadCount the allreduce that MIAD
	// adapts, 16 MiB of float32.
	const big, miadCount = 1<<20 + 3, 4 << 20
	bufBytes := max(big*8, miadCount*4) + 8
	w := tuned.Worker()
	bufA, bufB, free := deviceBuffers(ctx, t, w, bufBytes)
	defer free()

	// BRAID_TEST_DEVICE_SAMPLE=k runs every k-th case only, as in
	// TestDeviceCollectives.
	every := deviceTestSample(t)
	start, ran, failures, i := time.Now(), 0, 0, 0
	for _, d := range []*DeviceComm{tuned, small} {
		for _, coll := range []sched.Collective{sched.Bcast, sched.Reduce, sched.Allreduce} {
			for _, dt := range dtype.All() {
				// Every op on a float, a half and an integer type; sums
				// on the others (the trees' steps do not depend on the op,
				// the reductions are cuda.Ctx.Reduce's, tested with every
				// op by TestDeviceCollectives).
				ops := []Op{Sum}
				if coll.Reduces() && (dt == Float32 || dt == Float16 || dt == Int32) {
					ops = nil
					for _, op := range dtype.AllOps() {
						if dtype.Supports(dt, op) {
							ops = append(ops, op)
						}
					}
				}
				for _, op := range ops {
					for _, count := range []int{1, 7, 1000, 65537, big} {
						// The largest count: float32 sums at the tuned
						// segment; 4 KiB segments (many pieces, each a
						// message) up to 65537 float32s.
						if count == big && (d != tuned || dt != Float32 || op != Sum) || d == small && count == 65537 && dt != Float32 {
							continue
						}
						if algo, err := d.Algorithm(coll, count, dt.Size()); err != nil || algo != "treepack" {
							t.Fatalf("rank %d: %v of %d: %q, %v; want treepack", rank, coll, count, algo, err)
						}
						roots := []int{0}
						if coll.Rooted() {
							roots = []int{0, n - 1}
						}
						for _, root := range roots {
							for _, inPlace := range []bool{false, true} {
								if inPlace && coll != sched.Allreduce {
									continue
								}
								if i++; (i-1)%every != 0 {
									continue
								}
								k := deviceCase{coll, "treepack", dt, op, count, root, inPlace, false}
								call := func(send, recv Device) error {
									switch coll {
									case sched.Bcast:
										return d.Bcast(ctx, recv, root)
									case sched.Reduce:
										return d.Reduce(ctx, send, recv, op, root)
									}
									return d.Allreduce(ctx, send, recv, op)
								}
								ran++
								if err := runDeviceCase(ctx, w, call, k, rank, n, bufA, bufB, ran); err != nil {
									t.Errorf("rank %d: %v (segment %d B): %v", rank, k, d.opts.Segment, err)
									if failures++; failures > 20 {
										t.Fatal("too many failures")
									}
								}
							}
						}
					}
				}
			}
		}
	}
	// Back-to-back stream-ordered allreduces as trees.
	for _, count := range []int{1, 3000, 40000} {
		if err := orderedChain(ctx, ordered, w, bufA, count, rank, n, false); err != nil {
			t.Errorf("rank %d: chain of stream-ordered treepack allreduces of %d int64: %v", rank, count, err)
		}
	}
	// MIAD on the trees' segment: allreduces of 16 MiB until it settles,
	// every result checked, then every rank on the same segment.
	adapting := open(DeviceOptions{})
	key := devKey{sched.Allreduce, miadCount, 0, Float32, Sum}
	calls := 0
	for ; calls < 2*trialCalls*plan.MIADMaxTrials; calls++ {
		k := deviceCase{sched.Allreduce, "treepack", Float32, Sum, miadCount, 0, false, false}
		call := func(send, recv Device) error { return adapting.Allreduce(ctx, send, recv, Sum) }
		if err := runDeviceCase(ctx, w, call, k, rank, n, bufA, bufB, 1000+calls); err != nil {
			t.Fatalf("rank %d: MIAD's call %d (segment %d): %v", rank, calls, adapting.plans[key].params.Segment, err)
		}
		if adapting.plans[key].miad == nil {
			break
		}
	}
	pl := adapting.plans[key]
	if pl.miad != nil {
		t.Errorf("rank %d: MIAD has not settled after %d calls", rank, calls)
	}
	segs := make([]int64, n)
	if err := c.Allgather(ctx, []int64{int64(pl.params.Segment)}, segs); err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if s != segs[0] {
			t.Errorf("rank %d: MIAD settled on %v elements by rank", rank, segs)
			break
		}
	}
	t.Logf("rank %d: MIAD settled on %d elements after %d calls", rank, pl.params.Segment, calls+1)
	t.Logf("rank %d: %d tree calls checked on GPU %d, placed on %s's %v, in %v", rank, ran, dev, tp.Name, treeAllocations[n0], time.Since(start).Round(time.Millisecond))
}
