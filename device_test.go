package braid

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/launch"
	"github.com/braid-ccl/braid/sched"
)

// TestDeviceParams checks the argument rules of device calls; it needs no
// GPU.
func TestDeviceParams(t *testing.T) {
	buf := func(n int) Device { return Device{Ptr: 0x1000, Count: n, Type: Float32} }
	cases := []struct {
		coll       sched.Collective
		rank, root int
		send, recv Device
		op         Op
		count      int
		in, out    bool
		bad        string
	}{
		{coll: sched.Allreduce, send: buf(10), recv: buf(10), op: Sum, count: 10, in: true, out: true},
		{coll: sched.Allreduce, send: buf(10), recv: buf(9), op: Sum, bad: "recv has 9 elements, want 10"},
		{coll: sched.Allreduce, send: buf(4), recv: Device{Ptr: 1, Count: 4, Type: Int32}, op: Sum, bad: "send is float32 and recv int32"},
		{coll: sched.Allreduce, send: Device{Ptr: 1, Count: 4, Type: Int32}, recv: Device{Ptr: 1, Count: 4, Type: Int32}, op: Avg, bad: "op avg is not defined on int32"},
		{coll: sched.Allreduce, send: Device{Count: 4, Type: Float32}, recv: buf(4), op: Sum, bad: "send is a nil device pointer"},
		{coll: sched.Bcast, rank: 1, root: 0, send: buf(8), recv: buf(8), count: 8, out: true},
		{coll: sched.Bcast, rank: 0, root: 0, send: buf(8), recv: buf(8), count: 8, in: true, out: true},
		{coll: sched.Bcast, root: 3, send: buf(8), recv: buf(8), bad: "root 3 out of range [0, 3)"},
		{coll: sched.Allgather, send: buf(5), recv: buf(15), count: 5, in: true, out: true},
		{coll: sched.Allgather, send: buf(5), recv: buf(10), bad: "recv has 10 elements, want 15"},
		{coll: sched.ReduceScatter, send: buf(15), recv: buf(5), op: Max, count: 5, in: true, out: true},
		{coll: sched.Reduce, rank: 1, root: 0, send: buf(7), recv: Device{}, op: Sum, count: 7, in: true},
		{coll: sched.Alltoall, send: buf(7), recv: buf(7), bad: "not a whole number of blocks"},
	}
	if deviceArgs([]float32{1}, []float32{1}) || !deviceArgs(buf(1), buf(1)) {
		t.Error("deviceArgs confuses host and device buffers")
	}
	for _, tc := range cases {
		p, _, in, out, err := deviceParams(tc.coll, 3, tc.rank, tc.send, tc.recv, tc.op, tc.root)
		if tc.bad != "" {
			if err == nil || !contains(err.Error(), tc.bad) {
				t.Errorf("%v %+v: error %v, want %q", tc.coll, tc, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v %+v: %v", tc.coll, tc, err)
			continue
		}
		if p.Count != tc.count || (in != 0) != tc.in || (out != 0) != tc.out {
			t.Errorf("%v rank %d: count %d in %#x out %#x, want %d %v %v", tc.coll, tc.rank, p.Count, in, out, tc.count, tc.in, tc.out)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestDeviceNoDriver checks that without a CUDA driver every rank fails
// with Unsupported, none waits for the others. It needs no GPU; on a
// machine with one it is skipped.
func TestDeviceNoDriver(t *testing.T) {
	if cuda.Available() {
		t.Skip("a CUDA driver is present: the no-driver path is not reachable here")
	}
	comms, err := NewLocal(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(comms)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(comms))
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.NewDeviceComm(ctx, 0, nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		var e *Error
		if !errors.As(err, &e) || e.Kind != Unsupported {
			t.Errorf("rank %d: %v, want an Unsupported error", i, err)
		}
	}
}

// TestDeviceOptionsEnv checks the BRAID_GPU_* variables: each fills its
// field where the caller left zero, and a value it does not take is named
// in the error. It needs no GPU.
func TestDeviceOptionsEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	var o DeviceOptions
	err := o.resolve(env(map[string]string{"BRAID_GPU_LL_MAX": "64K", "BRAID_GPU_HOST_SHARE": "0", "BRAID_GPU_THREADS": "256",
		"BRAID_GPU_BCAST_RAMP": "2", "BRAID_GPU_PULL": "1", "BRAID_GPU_LL2_MAX": "0", "BRAID_GPU_RESIDENT": "200us",
		"BRAID_GPU_RESIDENT_MAX": "64K"}))
	if err != nil || o.LLMax != 64<<10 || o.HostShare != -1 || o.Threads != 256 || o.BcastRamp != 2 || !o.Pull || o.LL2Max != -1 ||
		o.Resident != 200*time.Microsecond || o.ResidentMax != 64<<10 {
		t.Errorf("resolve: %v, %+v", err, o)
	}
	o = DeviceOptions{Threads: 128}
	if err := o.resolve(env(map[string]string{"BRAID_GPU_THREADS": "bad"})); err != nil || o.Threads != 128 {
		t.Errorf("a field set by the caller: %v, threads %d (the variable is not read)", err, o.Threads)
	}
	for _, c := range []struct{ name, v string }{
		{"BRAID_GPU_THREADS", "33"}, {"BRAID_GPU_THREADS", "1024"}, {"BRAID_GPU_BLOCKS", "0"}, {"BRAID_GPU_BLOCKS", "x"},
		{"BRAID_GPU_LL_MAX", "-5"}, {"BRAID_GPU_HOST_SHARE", "51"}, {"BRAID_GPU_BCAST_RAMP", "5"}, {"BRAID_GPU_ROUNDS", "0"},
		{"BRAID_GPU_PULL", "yes"}, {"BRAID_GPU_STATS", "2"}, {"BRAID_GPU_LL_BLOCKS", "257"}, {"BRAID_GPU_LL2_MAX", "1Q"},
		{"BRAID_GPU_RESIDENT", "5"}, {"BRAID_GPU_RESIDENT", "-1ms"}, {"BRAID_GPU_RESIDENT_MAX", "12"}, {"BRAID_GPU_RESIDENT_MAX", "1M"},
	} {
		var o DeviceOptions
		if err := o.resolve(env(map[string]string{c.name: c.v})); err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s=%s: %v, want an error naming it", c.name, c.v, err)
		}
	}
	o = DeviceOptions{Threads: 48}
	if err := o.resolve(env(nil)); err == nil || !strings.Contains(err.Error(), "Threads") {
		t.Errorf("DeviceOptions.Threads 48: %v, want an error naming it", err)
	}
	o = DeviceOptions{Resident: -time.Second}
	if err := o.resolve(env(nil)); err == nil || !strings.Contains(err.Error(), "Resident") {
		t.Errorf("DeviceOptions.Resident -1s: %v, want an error naming it", err)
	}
	o = DeviceOptions{}
	if err := o.resolve(env(map[string]string{"BRAID_GPU_RESIDENT": "0"})); err != nil || o.Resident != 0 {
		t.Errorf("BRAID_GPU_RESIDENT=0: %v, resident %v, want off", err, o.Resident)
	}
	// Through NewDeviceComm, on every rank: this rank's own error is an
	// InvalidArgument naming the variable, with or without a GPU.
	t.Setenv("BRAID_GPU_THREADS", "33")
	comms, err := NewLocal(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(comms)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Go(func() { _, errs[i] = c.NewDeviceComm(ctx, 0, nil) })
	}
	wg.Wait()
	for i, err := range errs {
		var e *Error
		if !errors.As(err, &e) || e.Kind != InvalidArgument || !strings.Contains(err.Error(), "BRAID_GPU_THREADS") {
			t.Errorf("rank %d: %v, want an InvalidArgument error naming BRAID_GPU_THREADS", i, err)
		}
	}
}

func closeAll(comms []*Comm) {
	for _, c := range comms {
		c.Close()
	}
}

// deviceTestEnv marks the ranks that TestDeviceCollectives starts.
const deviceTestEnv = "BRAID_DEVICE_TEST_RANKS"

// TestDeviceCollectives runs the device collectives on every GPU of the
// machine (BRAID_TEST_GPUS limits the count), one process per GPU: the
// test binary starts itself once per GPU through launch (as braid run
// does), and every rank checks every dtype × op × algorithm × count,
// in place and not, against the host reference of internal/check. It is
// skipped without a CUDA driver or with fewer than two GPUs.
func TestDeviceCollectives(t *testing.T) {
	if os.Getenv(deviceTestEnv) != "" {
		deviceRank(t)
		return
	}
	var short []string
	if testing.Short() {
		short = append(short, "-test.short")
	}
	launchDeviceTest(t, "TestDeviceCollectives", deviceTestEnv, 8*time.Minute, short...)
}

// launchDeviceTest starts the ranks of the device test named test
// (deviceTestRanks of them) as processes of this test binary, through
// launch as braid run would, with env set to the rank count so that they
// run the rank's side, and fails t if any rank fails or limit passes.
func launchDeviceTest(t *testing.T, test, env string, limit time.Duration, args ...string) {
	t.Helper()
	n := deviceTestRanks(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	args = append([]string{"-test.run=^" + test + "$", "-test.v"}, args...)
	err := launch.Run(ctx, launch.Config{N: n, Prog: os.Args[0], Args: args, Env: []string{env + "=" + strconv.Itoa(n)}, Prefix: true})
	if err != nil {
		t.Fatalf("%d ranks: %v", n, err)
	}
}

// deviceTestRanks returns how many ranks the device tests run: one per
// GPU, or BRAID_TEST_GPUS. More ranks than GPUs is the shared test mode:
// rank r runs on GPU r mod the GPUs there are, and the ranks on one GPU
// take turns on it (the driver time-slices their contexts; every wait of
// the fused kernels is bounded by the call's deadline and the host's waits
// yield the core), so that the whole matrix runs on a one-GPU machine:
// BRAID_TEST_GPUS=4 go test -run '^TestDevice' . It skips the test
// without a CUDA driver, or with fewer than 2 ranks.
func deviceTestRanks(t *testing.T) int {
	if !cuda.Available() {
		t.Skip("no CUDA driver here: the device tests run on a machine with a GPU (BRAID_TEST_GPUS=n runs n ranks, sharing the GPUs where n exceeds them)")
	}
	gpus, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	n := gpus
	if s := os.Getenv("BRAID_TEST_GPUS"); s != "" {
		m, err := strconv.Atoi(s)
		if err != nil || m < 1 || m > fused.MaxRanks*4 {
			t.Fatalf("BRAID_TEST_GPUS=%q: want a count of ranks from 1 to %d", s, fused.MaxRanks*4)
		}
		n = m
	}
	if n < 2 {
		t.Skipf("needs 2 ranks, have %d GPU(s): BRAID_TEST_GPUS=2 (or more) runs them sharing the GPU", gpus)
	}
	if n > gpus {
		t.Logf("shared test mode: %d ranks on %d GPU(s), rank r on GPU r mod %d, time-sliced", n, gpus, gpus)
	}
	return n
}

// deviceTestInit starts one rank of a device test: a context that ends
// after timeout, the communicator (closed, then the context cancelled,
// when the test ends) and the rank's GPU (deviceTestGPU).
func deviceTestInit(t *testing.T, timeout time.Duration) (context.Context, *Comm, cuda.Device) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	c, err := Init(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return ctx, c, deviceTestGPU(t, c)
}

// deviceTestSample returns k of BRAID_TEST_DEVICE_SAMPLE=k, which runs
// every k-th case of a device test only (1 without it).
func deviceTestSample(t *testing.T) int {
	s := os.Getenv("BRAID_TEST_DEVICE_SAMPLE")
	if s == "" {
		return 1
	}
	every, err := strconv.Atoi(s)
	if err != nil || every < 1 {
		t.Fatalf("BRAID_TEST_DEVICE_SAMPLE=%q: want a positive integer", s)
	}
	return every
}

// deviceBuffers allocates two buffers of bytes each on w's GPU for a
// device test's inputs and outputs, failing t if it cannot; free releases
// them (call it before the communicator whose worker w is closes).
func deviceBuffers(ctx context.Context, t *testing.T, w *cuda.Worker, bytes int) (a, b cuda.DevicePtr, free func()) {
	t.Helper()
	if err := w.Do(ctx, func(cc *cuda.Ctx) (err error) {
		if a, err = cc.Alloc(bytes); err != nil {
			return err
		}
		b, err = cc.Alloc(bytes)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return a, b, func() { w.Do(context.Background(), func(cc *cuda.Ctx) error { cc.Free(a); return cc.Free(b) }) }
}

// readDevice copies len(dst) bytes at src on w's GPU into dst and waits
// for the copy.
func readDevice(ctx context.Context, w *cuda.Worker, dst []byte, src cuda.DevicePtr) error {
	return w.Do(ctx, func(cc *cuda.Ctx) error {
		if err := cc.CopyDtoH(dst, src, 0); err != nil {
			return err
		}
		return cc.Synchronize()
	})
}

// deviceTestGPU is the GPU of c's rank in the device tests: its local rank
// modulo the GPUs there are (deviceTestRanks).
func deviceTestGPU(t *testing.T, c *Comm) cuda.Device {
	gpus, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	return cuda.Device(c.LocalRank() % gpus)
}

// deviceCase is one call of the matrix.
type deviceCase struct {
	coll    sched.Collective
	algo    string
	d       DType
	op      Op
	count   int
	root    int
	inPlace bool
	ordered bool // DeviceOptions.StreamOrdered
}

func (k deviceCase) String() string {
	s := fmt.Sprintf("%v/%s %v %v count %d", k.coll, k.algo, k.d, k.op, k.count)
	if k.coll.Rooted() {
		s += fmt.Sprintf(" root %d", k.root)
	}
	if k.inPlace {
		s += " in place"
	}
	if k.ordered {
		s += " stream-ordered"
	}
	return s
}

// deviceRank is one rank of TestDeviceCollectives.
func deviceRank(t *testing.T) {
	ctx, c, dev := deviceTestInit(t, 7*time.Minute)
	n, rank := c.Size(), c.Rank()
	counts := []int{0, 1, 7, 1000, 65537, 1<<20 + 3}
	if testing.Short() {
		counts = []int{0, 1, 7, 1000, 65537}
	}
	algos := map[sched.Collective][]string{
		sched.Allreduce:     {"gpu_oneshot", "ll2", "direct", "direct-host", "direct-program", "pipe", "ring", "segring", "hierpipe", "recdouble", "rabenseifner", ""},
		sched.Bcast:         {"linear", "chain", "binomial", "pipe", "pipe-host", ""},
		sched.Allgather:     {"direct", "ring", "recdouble", "pipe", ""},
		sched.ReduceScatter: {"direct", "ring", "segring", "pipe", ""},
		sched.Reduce:        {"linear", "binomial", ""},
		sched.Gather:        {""},
		sched.Scatter:       {""},
		sched.Alltoall:      {""},
	}
	var cases []deviceCase
	for _, coll := range []sched.Collective{sched.Allreduce, sched.ReduceScatter, sched.Allgather, sched.Bcast,
		sched.Reduce, sched.Gather, sched.Scatter, sched.Alltoall} {
		for _, name := range algos[coll] {
			if name != "" && name != "gpu_oneshot" && !strings.HasPrefix(name, "pipe") && name != "ll2" {
				a, err := algo.Lookup(coll, strings.TrimSuffix(strings.TrimSuffix(name, "-program"), "-host"))
				if err != nil || a.Supports(sched.Params{Coll: coll, NRanks: n, Count: 1}) != nil {
					continue
				}
			}
			for _, d := range dtype.All() {
				ops := []Op{Sum}
				if coll.Reduces() {
					ops = nil
					for _, op := range dtype.AllOps() {
						if dtype.Supports(d, op) {
							ops = append(ops, op)
						}
					}
				}
				cs := counts
				if coll == sched.Bcast && strings.HasPrefix(name, "pipe") {
					// Above fused.BcastDirectMax: the broadcast in two
					// phases, in many rounds through the stages of 4 KiB slots.
					cs = append(cs[:len(cs):len(cs)], (fused.BcastDirectMax+4099)/d.Size())
				}
				for _, op := range ops {
					for _, count := range cs {
						// The largest count runs with the default algorithm only.
						if count > 1<<20 && name != "" {
							continue
						}
						roots := []int{0}
						if coll.Rooted() {
							roots = []int{0, n - 1}
						}
						for _, root := range roots {
							for _, inPlace := range []bool{false, true} {
								if inPlace && !inPlaceCase(coll) {
									continue
								}
								cases = append(cases, deviceCase{coll, name, d, op, count, root, inPlace, false})
								// Stream-ordered calls: the fused one-shot kernel and programs
								// whose sends then all wait for events.
								if coll == sched.Allreduce && (name == "gpu_oneshot" || name == "ll2" || name == "direct" || name == "direct-host" || name == "pipe" || name == "segring") {
									cases = append(cases, deviceCase{coll, name, d, op, count, root, inPlace, true})
								}
							}
						}
					}
				}
			}
		}
	}
	// One communicator per algorithm choice, so that each runs what it names.
	comms := map[string]*DeviceComm{}
	get := func(coll sched.Collective, name string, ordered bool) *DeviceComm {
		key := fmt.Sprint(coll, "/", name, "/", ordered)
		if d := comms[key]; d != nil {
			return d
		}
		opts := &DeviceOptions{StreamOrdered: ordered}
		if name == "segring" || name == "chain" || name == "hierpipe" {
			// Many segments: pipelines whose pushes run beside reductions.
			opts.Segment = 4 << 10
		}
		if name == "gpu_oneshot" {
			// The fused kernel up to 4 KiB, the program above.
			opts.OneShotMax = 4 << 10
		}
		algoName := name
		switch name {
		case "direct", "direct-host":
			if coll == sched.Allreduce {
				// The fused two-shot kernel, in many rounds through 4 KiB
				// slots; direct-host moves a third of every round through
				// host memory (on more than 2 GPUs).
				algoName, opts.SlotBytes, opts.OneShotMax = "direct", 4<<10, -1
				if name == "direct-host" {
					defer setEnv("BRAID_GPU_HOST_SHARE", "33")()
				}
			}
		case "direct-program":
			// The direct allreduce as a program.
			algoName, opts.DirectMax = "direct", -1
		case "pipe", "pipe-host":
			// The default choice, with slots of 4 KiB: fused kernels in
			// many rounds (allreduce: one-shot to 1 KiB, two-shot above);
			// pipe-host moves a third of every broadcast round through
			// host memory. Broadcasts above fused.BcastDirectMax cut their
			// last full round in the most halvings (pipe) or none
			// (pipe-host); the default (fused.DefaultBcastRamp) runs with the
			// default algorithm.
			algoName, opts.SlotBytes, opts.OneShotMax = "", 4<<10, 1<<10
			if name == "pipe-host" {
				defer setEnv("BRAID_GPU_HOST_SHARE", "33")()
				defer setEnv("BRAID_GPU_BCAST_RAMP", "0")()
			} else {
				defer setEnv("BRAID_GPU_BCAST_RAMP", strconv.Itoa(fused.MaxRamp))()
			}
		case "ll2":
			// The one-shot as a two-shot in low-latency lines wherever it
			// fits (on 2 GPUs too, where it is not the default).
			algoName, opts.LLMax = "gpu_oneshot", -1
			defer setEnv("BRAID_GPU_LL2_MAX", "1073741824")()
		}
		if name == "hierpipe" {
			// Two groups: the lower and the upper half of the ranks.
			for r := range n {
				opts.Groups = append(opts.Groups, 2*r/n)
			}
		}
		if algoName != "" {
			opts.Algo = map[string]string{coll.String(): algoName}
		}
		d, err := c.NewDeviceComm(ctx, dev, opts)
		if err != nil {
			t.Fatalf("rank %d: NewDeviceComm: %v", rank, err)
		}
		comms[key] = d
		return d
	}
	defer func() {
		for _, d := range comms {
			if err := d.Close(); err != nil {
				t.Errorf("rank %d: close: %v", rank, err)
			}
		}
	}()
	// Buffers for the largest call: inputs and outputs of up to n·count
	// elements of 8 bytes, and a broadcast above fused.BcastDirectMax.
	maxBytes := max(n*counts[len(counts)-1]*8, fused.BcastDirectMax+4099+8)
	first := get(sched.Allreduce, "", false)
	w := first.Worker()
	bufA, bufB, free := deviceBuffers(ctx, t, w, maxBytes+8)
	defer free()

	// BRAID_TEST_DEVICE_SAMPLE=k runs every k-th case only (from a
	// different first case on each run of the test binary is not wanted:
	// from case 0), for the shared test mode, where every call waits for
	// the driver to switch between the ranks' contexts.
	every := deviceTestSample(t)
	start := time.Now()
	failures, ran := 0, 0
	for i, k := range cases {
		if i%every != 0 {
			continue
		}
		ran++
		d := get(k.coll, k.algo, k.ordered)
		call := func(send, recv Device) error {
			switch k.coll {
			case sched.Allreduce:
				if err := d.Allreduce(ctx, send, recv, k.op); err != nil {
					return err
				}
				return d.Synchronize(ctx)
			case sched.ReduceScatter:
				return d.ReduceScatter(ctx, send, recv, k.op)
			case sched.Allgather:
				return d.Allgather(ctx, send, recv)
			case sched.Bcast:
				return d.Bcast(ctx, recv, k.root)
			case sched.Reduce:
				return d.Reduce(ctx, send, recv, k.op, k.root)
			case sched.Gather:
				return d.Gather(ctx, send, recv, k.root)
			case sched.Scatter:
				return d.Scatter(ctx, send, recv, k.root)
			case sched.Alltoall:
				return d.Alltoall(ctx, send, recv)
			}
			return fmt.Errorf("no call for %v", k.coll)
		}
		if err := runDeviceCase(ctx, w, call, k, rank, n, bufA, bufB, i); err != nil {
			t.Errorf("rank %d: %v: %v", rank, k, err)
			if failures++; failures > 20 {
				t.Fatal("too many failures")
			}
		}
	}
	// Back-to-back stream-ordered allreduces in place, with no
	// synchronisation between them: x ← Σ x, k times, from x = rank+1 on
	// element 0 and 1 elsewhere. A call that read a peer's slot or flag of
	// another call would break the powers.
	for _, name := range []string{"gpu_oneshot", "ll2", "direct", "direct-host", "pipe", "segring"} {
		for _, count := range []int{1, 3000, 40000} {
			if err := orderedChain(ctx, get(sched.Allreduce, name, true), w, bufA, count, rank, n, false); err != nil {
				t.Errorf("rank %d: chain of stream-ordered %s allreduces of %d int64: %v", rank, name, count, err)
			}
		}
	}
	// Chains whose every other call reduces only element 0: a one-shot in
	// low-latency lines between two-shots in rounds ("pipe", 3000) or
	// between one-shots through the slots (the default, 40000).
	for _, c := range []struct {
		name  string
		count int
	}{{"pipe", 3000}, {"", 40000}, {"ll2", 40000}} {
		if err := orderedChain(ctx, get(sched.Allreduce, c.name, true), w, bufA, c.count, rank, n, true); err != nil {
			t.Errorf("rank %d: mixed chain of stream-ordered %q allreduces of %d int64: %v", rank, c.name, c.count, err)
		}
	}
	// Every fused kind and mixed kinds back to back at 64 MiB, and across
	// the reset of the sequence.
	bigChains(ctx, t, c, dev)
	// The same through Comm's entry point for device buffers.
	k := deviceCase{sched.Allreduce, "", Float32, Sum, 4099, 0, true, false}
	call := func(send, recv Device) error {
		if !deviceArgs(send, recv) {
			return errors.New("deviceArgs does not recognise device buffers")
		}
		return c.deviceCall(ctx, "allreduce", sched.Allreduce, send, recv, Sum, 0)
	}
	if err := runDeviceCase(ctx, w, call, k, rank, n, bufA, bufB, len(cases)); err != nil {
		t.Errorf("rank %d: through Comm: %v", rank, err)
	}
	if err := c.closeDevice(); err != nil {
		t.Errorf("rank %d: closing the device communicator of Comm's calls: %v", rank, err)
	}
	t.Logf("rank %d: %d device calls of %d checked on GPU %d, and the chains, in %v", rank, ran+1, len(cases)+1, dev, time.Since(start).Round(time.Millisecond))
}

// setEnv sets the environment variable key to v and returns a function
// that restores it.
func setEnv(key, v string) func() {
	old, had := os.LookupEnv(key)
	os.Setenv(key, v)
	return func() {
		if had {
			os.Setenv(key, old)
		} else {
			os.Unsetenv(key)
		}
	}
}

// inPlaceCase reports whether the matrix runs coll in place too: the
// collectives whose in-place form runDeviceCase sets up.
func inPlaceCase(coll sched.Collective) bool {
	switch coll {
	case sched.Allreduce, sched.Bcast, sched.Allgather, sched.ReduceScatter:
		return true
	}
	return false
}

// orderedChain runs the chain of stream-ordered allreduces that
// deviceRank describes on buf and checks the result. Mixed, every odd
// step reduces element 0 alone.
func orderedChain(ctx context.Context, d *DeviceComm, w *cuda.Worker, buf cuda.DevicePtr, count, rank, n int, mixed bool) error {
	const steps = 30
	x := make([]int64, count)
	for i := range x {
		x[i] = 1
	}
	x[0] = int64(rank + 1)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 8*count)
	if err := w.Do(ctx, func(cc *cuda.Ctx) error {
		if err := cc.CopyHtoD(buf, b, 0); err != nil {
			return err
		}
		return cc.Synchronize()
	}); err != nil {
		return err
	}
	dev := Device{Ptr: buf, Count: count, Type: Int64}
	one := Device{Ptr: buf, Count: 1, Type: Int64}
	full := 0
	for i := range steps {
		x := dev
		if mixed && i%2 == 1 {
			x = one
		} else {
			full++
		}
		if err := d.Allreduce(ctx, x, x, Sum); err != nil {
			return err
		}
	}
	if err := d.Synchronize(ctx); err != nil {
		return err
	}
	if err := readDevice(ctx, w, b, buf); err != nil {
		return err
	}
	// After the first step every element is the same on every rank:
	// n(n+1)/2 for element 0, n elsewhere; each later step that reduces
	// an element multiplies it by n.
	pow := func(k int) int64 {
		p := int64(1)
		for range k {
			p *= int64(n)
		}
		return p
	}
	want0, want := int64(n*(n+1)/2)*pow(steps-1), int64(n)*pow(full-1)
	for i, v := range x {
		if w := want; i == 0 && v != want0 || i > 0 && v != w {
			if i == 0 {
				w = want0
			}
			return fmt.Errorf("element %d is %d, want %d", i, v, w)
		}
	}
	return nil
}

// runDeviceCase fills the input, poisons the output where it does not
// hold input, runs k through call and checks the output against the
// reference.
func runDeviceCase(ctx context.Context, w *cuda.Worker, call func(send, recv Device) error, k deviceCase, rank, n int, bufA, bufB cuda.DevicePtr, salt int) error {
	p := sched.Params{Coll: k.coll, NRanks: n, Count: k.count, Root: k.root}
	es := k.d.Size()
	inLen, outLen := p.InLen(rank)*es, p.OutLen(rank)*es
	in := make([]byte, inLen)
	check.FillInput(p, k.d, k.op, in, rank, salt)
	// Place the buffers apart, or as the in-place call aliases them.
	inPtr, outPtr := bufA, bufB
	poison := true
	if k.inPlace || k.coll == sched.Bcast {
		switch k.coll {
		case sched.Allreduce, sched.Bcast:
			outPtr = bufA
			poison = inLen == 0
		case sched.Allgather:
			inPtr = bufA.Add(rank * k.count * es)
			outPtr = bufA
		case sched.ReduceScatter:
			outPtr = bufA.Add(rank * k.count * es)
			poison = false
		}
	}
	out := make([]byte, outLen)
	err := w.Do(ctx, func(cc *cuda.Ctx) error {
		if poison && outLen > 0 {
			if err := cc.Memset8(outPtr, 0xff, outLen, 0); err != nil {
				return err
			}
		}
		if inLen > 0 {
			if err := cc.CopyHtoD(inPtr, in, 0); err != nil {
				return err
			}
		}
		return cc.Synchronize()
	})
	if err != nil {
		return fmt.Errorf("preparing buffers: %w", err)
	}
	send := Device{Ptr: inPtr, Count: p.InLen(rank), Type: k.d}
	recv := Device{Ptr: outPtr, Count: p.OutLen(rank), Type: k.d}
	if k.coll == sched.Bcast {
		recv.Count = k.count
	}
	if err := call(send, recv); err != nil {
		return err
	}
	if outLen == 0 {
		return nil
	}
	if err := readDevice(ctx, w, out, outPtr); err != nil {
		return fmt.Errorf("reading the result: %w", err)
	}
	return check.Verify(p, k.d, k.op, rank, out, salt)
}

// deviceLateEnv marks the ranks that TestDeviceLatePeer starts.
const deviceLateEnv = "BRAID_DEVICE_TEST_LATE"

// TestDeviceLatePeer checks that a rank whose peer does not come to a call
// gets an error once the call's deadline passes, instead of hanging: the
// fused one-shot kernel (its wait on the peer's flag is bounded on the
// GPU), a stream-ordered call (reported by Synchronize), and a program
// (its wait for the peer's notices is bounded on the host), and the
// resident kernel. Rank 1 stays away; rank 0 calls each with a one-second
// deadline.
func TestDeviceLatePeer(t *testing.T) {
	if os.Getenv(deviceLateEnv) != "" {
		deviceLateRank(t)
		return
	}
	deviceTestRanks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := launch.Run(ctx, launch.Config{N: 2, Prog: os.Args[0], Args: []string{"-test.run=^TestDeviceLatePeer$", "-test.v"},
		Env: []string{deviceLateEnv + "=1"}, Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
}

func deviceLateRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := Init(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rank := c.Rank()
	cases := []struct {
		name string
		opts DeviceOptions
	}{
		{"fused one-shot", DeviceOptions{}},
		{"fused one-shot, stream-ordered", DeviceOptions{StreamOrdered: true}},
		{"program", DeviceOptions{Algo: map[string]string{"allreduce": "ring"}}},
		{"fused two-shot, many rounds", DeviceOptions{Algo: map[string]string{"allreduce": "direct"}, SlotBytes: 4096, OneShotMax: -1}},
		// The resident kernel's wait for the peer's lines is bounded on
		// the GPU as the launched kernel's is (where ranks share a GPU it
		// is off, and the call is the first case's).
		{"resident", DeviceOptions{Resident: 10 * time.Millisecond}},
	}
	for _, k := range cases {
		opts := k.opts
		d, err := c.NewDeviceComm(ctx, deviceTestGPU(t, c), &opts)
		if err != nil {
			t.Fatalf("rank %d: %s: %v", rank, k.name, err)
		}
		var buf cuda.DevicePtr
		if err := d.Worker().Do(ctx, func(cc *cuda.Ctx) (err error) { buf, err = cc.Alloc(4096); return err }); err != nil {
			t.Fatal(err)
		}
		if rank == 0 {
			start := time.Now()
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			err := d.Allreduce(cctx, Device{Ptr: buf, Count: 1024, Type: Float32}, Device{Ptr: buf, Count: 1024, Type: Float32}, Sum)
			if err == nil {
				err = d.Synchronize(cctx)
			}
			ccancel()
			took := time.Since(start)
			var e *Error
			switch {
			case err == nil:
				t.Errorf("%s: the call succeeded without its peer", k.name)
			case !errors.As(err, &e) || e.Kind != Timeout:
				t.Errorf("%s: %v, want a Timeout error", k.name, err)
			case took > 10*time.Second:
				t.Errorf("%s: the error came after %v, for a deadline of 1s", k.name, took)
			default:
				t.Logf("%s: error after %v: %v", k.name, took.Round(time.Millisecond), err)
			}
		}
		// Both ranks meet again before the next case; rank 1 has stayed
		// away from the call. The communicators are broken for device
		// calls, not for host ones.
		if err := c.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		d.Worker().Do(ctx, func(cc *cuda.Ctx) error { return cc.Free(buf) })
		d.Close()
	}
}

// chainOp is one step of a bigChain: a collective on the chain's vector
// A (or, for chainSmall, on the small vector S).
type chainOp int

const (
	chainAllreduce chainOp = iota // A ← Σ A, in place
	chainBcast                    // A ← the root's A (root: the step's index mod n)
	chainRS                       // T ← block r of Σ A (out of place), then block r of A += T on the stream
	chainAG                       // block q of A ← rank q's block q, in place
	chainSmall                    // S ← Σ S, in place: a one-shot in low-latency lines between the large kernels
)

// affine is a block of a rank's vector whose element i (its index in the
// whole vector) holds a + b·i, modulo 2^64.
type affine struct{ a, b uint64 }

func (x affine) add(y affine) affine { return affine{x.a + y.a, x.b + y.b} }

// bigChain runs ops back to back on d (stream-ordered), on a vector of at
// least minBytes of uint64 per rank, with no synchronisation between them:
// before every op each rank adds its own R to the vector on the stream
// (a reduction kernel), so that every call moves data that no call before
// moved. After the loop it reads the vectors back and checks them against
// a model of every rank's blocks (each block of each rank stays affine in
// the element's index). A call that read a stale slot, flag or line, of
// its own kind or of another, breaks the sums.
func bigChain(ctx context.Context, d *DeviceComm, ops []chainOp, minBytes, rank, n int) error {
	w, s := d.Worker(), d.Stream()
	blk := (minBytes/8 + n - 1) / n
	m := blk * n
	const ms = 1024 // S: 8 KiB, a one-shot in low-latency lines
	// Every rank's start and R, for the model; this rank's on the GPU.
	start := func(q int) affine { return affine{uint64(7 * q), uint64(q + 2)} }
	radd := func(q int) affine { return affine{uint64(q + 1), uint64(2*q + 3)} }
	host := make([]uint64, m)
	fill := func(x affine, k int) []byte {
		for i := range k {
			host[i] = x.a + x.b*uint64(i)
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), 8*k)
	}
	var A, R, T, S cuda.DevicePtr
	if err := w.Do(ctx, func(cc *cuda.Ctx) (err error) {
		for _, p := range []struct {
			p *cuda.DevicePtr
			b int
		}{{&A, 8 * m}, {&R, 8 * m}, {&T, 8 * blk}, {&S, 8 * ms}} {
			if *p.p, err = cc.Alloc(p.b); err != nil {
				return err
			}
		}
		if err = cc.CopyHtoD(A, fill(start(rank), m), 0); err != nil {
			return err
		}
		if err = cc.CopyHtoD(S, fill(start(rank), ms), 0); err != nil {
			return err
		}
		if err = cc.CopyHtoD(R, fill(radd(rank), m), 0); err != nil {
			return err
		}
		return cc.Synchronize()
	}); err != nil {
		return err
	}
	defer w.Do(context.Background(), func(cc *cuda.Ctx) error {
		return errors.Join(cc.Free(A), cc.Free(R), cc.Free(T), cc.Free(S))
	})
	// The model: model[q][b] is rank q's block b; small[q] is rank q's S.
	model := make([][]affine, n)
	small := make([]affine, n)
	for q := range n {
		model[q] = make([]affine, n)
		for b := range n {
			model[q][b] = start(q)
		}
		small[q] = start(q)
	}
	addOn := func(dst, src cuda.DevicePtr, count int) error {
		return w.Do(ctx, func(cc *cuda.Ctx) error {
			return cc.Reduce(s, cuda.Reduction{DType: dtype.Uint64, Op: dtype.Sum, Dst: dst, A: dst, B: src, Count: count})
		})
	}
	vec := Device{Ptr: A, Count: m, Type: Uint64}
	for j, op := range ops {
		if op == chainSmall {
			if err := addOn(S, R, ms); err != nil {
				return err
			}
			var sum affine
			for q := range n {
				small[q] = small[q].add(radd(q))
				sum = sum.add(small[q])
			}
			for q := range n {
				small[q] = sum
			}
			if err := d.Allreduce(ctx, Device{Ptr: S, Count: ms, Type: Uint64}, Device{Ptr: S, Count: ms, Type: Uint64}, Sum); err != nil {
				return fmt.Errorf("step %d (small allreduce): %w", j, err)
			}
			continue
		}
		if err := addOn(A, R, m); err != nil {
			return err
		}
		for q := range n {
			for b := range n {
				model[q][b] = model[q][b].add(radd(q))
			}
		}
		var err error
		switch op {
		case chainAllreduce:
			err = d.Allreduce(ctx, vec, vec, Sum)
			for b := range n {
				var sum affine
				for q := range n {
					sum = sum.add(model[q][b])
				}
				for q := range n {
					model[q][b] = sum
				}
			}
		case chainBcast:
			root := j % n
			err = d.Bcast(ctx, vec, root)
			for q := range n {
				copy(model[q], model[root])
			}
		case chainRS:
			err = d.ReduceScatter(ctx, vec, Device{Ptr: T, Count: blk, Type: Uint64}, Sum)
			if err == nil {
				err = addOn(A.Add(8*rank*blk), T, blk)
			}
			sums := make([]affine, n)
			for b := range n {
				for q := range n {
					sums[b] = sums[b].add(model[q][b])
				}
			}
			for q := range n {
				model[q][q] = model[q][q].add(sums[q])
			}
		case chainAG:
			err = d.Allgather(ctx, Device{Ptr: A.Add(8 * rank * blk), Count: blk, Type: Uint64}, vec)
			for b := range n {
				for q := range n {
					if q != b {
						model[q][b] = model[b][b]
					}
				}
			}
		}
		if err != nil {
			return fmt.Errorf("step %d (%d): %w", j, op, err)
		}
	}
	if err := d.Synchronize(ctx); err != nil {
		return err
	}
	got := make([]uint64, m)
	gs := make([]uint64, ms)
	if err := w.Do(ctx, func(cc *cuda.Ctx) error {
		if err := cc.CopyDtoH(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 8*m), A, 0); err != nil {
			return err
		}
		if err := cc.CopyDtoH(unsafe.Slice((*byte)(unsafe.Pointer(&gs[0])), 8*ms), S, 0); err != nil {
			return err
		}
		return cc.Synchronize()
	}); err != nil {
		return err
	}
	bad := 0
	var first error
	for i, v := range got {
		x := model[rank][i/blk]
		if want := x.a + x.b*uint64(i); v != want {
			if bad == 0 {
				first = fmt.Errorf("element %d (block %d) is %d, want %d", i, i/blk, v, want)
			}
			bad++
		}
	}
	for i, v := range gs {
		if want := small[rank].a + small[rank].b*uint64(i); v != want {
			if bad == 0 {
				first = fmt.Errorf("small vector: element %d is %d, want %d", i, v, want)
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d elements wrong; first: %w", bad, m+ms, first)
	}
	return nil
}

// bigChains runs the stream-ordered chains of deviceRank at 64 MiB: each
// fused kind alone, then mixed, on a communicator that runs every size
// fused (FusedMax) and on one with the default choices (programs where the
// defaults choose them); then the mixed chain again from a sequence number
// just below gpu.SeqLimit, so that it crosses the reset of the flags.
func bigChains(ctx context.Context, t *testing.T, c *Comm, dev cuda.Device) {
	rank, n := c.Rank(), c.Size()
	mixed := []chainOp{chainAllreduce, chainSmall, chainBcast, chainRS, chainSmall, chainAG, chainAllreduce,
		chainBcast, chainRS, chainAG, chainSmall, chainAllreduce, chainBcast}
	chains := []struct {
		name string
		ops  []chainOp
	}{
		{"allreduce", []chainOp{chainAllreduce, chainAllreduce, chainAllreduce, chainAllreduce}},
		{"bcast", []chainOp{chainBcast, chainBcast, chainBcast, chainBcast}},
		{"reducescatter", []chainOp{chainRS, chainRS, chainRS, chainRS}},
		{"allgather", []chainOp{chainAG, chainAG, chainAG, chainAG}},
		{"mixed", mixed},
	}
	for _, o := range []struct {
		name string
		opts DeviceOptions
	}{
		{"fused", DeviceOptions{StreamOrdered: true, FusedMax: math.MaxInt}},
		{"default", DeviceOptions{StreamOrdered: true}},
		{"across the sequence's reset", DeviceOptions{StreamOrdered: true, FusedMax: math.MaxInt, firstSeq: gpu.SeqLimit - 12}},
	} {
		d, err := c.NewDeviceComm(ctx, dev, &o.opts)
		if err != nil {
			t.Errorf("rank %d: %s chains: %v", rank, o.name, err)
			continue
		}
		for _, ch := range chains {
			if o.opts.firstSeq != 0 && ch.name != "mixed" {
				continue
			}
			if err := bigChain(ctx, d, ch.ops, 64<<20, rank, n); err != nil {
				t.Errorf("rank %d: stream-ordered %s chain, %s kernels, 64 MiB: %v", rank, ch.name, o.name, err)
			}
		}
		if o.opts.firstSeq != 0 {
			if r := d.g.FusedResets(); r != 1 {
				t.Errorf("rank %d: the chain from sequence number %d reset the flags %d times, want once", rank, o.opts.firstSeq, r)
			}
		}
		if err := d.Close(); err != nil {
			t.Errorf("rank %d: close: %v", rank, err)
		}
	}
}
