package cuda

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
)

// TestNoDriver checks the errors of a machine without a CUDA driver: every
// entry point fails with an error that wraps ErrNoDriver and says so.
func TestNoDriver(t *testing.T) {
	err := Init()
	if err == nil {
		t.Skip("a CUDA driver is present; the no-driver path is exercised on machines without one")
	}
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "unsupported: no CUDA driver") {
		t.Fatalf("Init() = %v, want an error wrapping ErrNoDriver", err)
	}
	if Available() {
		t.Error("Available() = true without a driver")
	}
	if _, err := DeviceCount(); !errors.Is(err, ErrNoDriver) {
		t.Errorf("DeviceCount error %v does not wrap ErrNoDriver", err)
	}
	if _, err := Device(0).Name(); !errors.Is(err, ErrNoDriver) {
		t.Errorf("Device(0).Name error %v does not wrap ErrNoDriver", err)
	}
	if _, err := DriverVersion(); !errors.Is(err, ErrNoDriver) {
		t.Errorf("DriverVersion error %v does not wrap ErrNoDriver", err)
	}
	if _, err := PointerMemoryType(0x1000); !errors.Is(err, ErrNoDriver) {
		t.Errorf("PointerMemoryType error %v does not wrap ErrNoDriver", err)
	}
	if w, err := NewWorker(0, WorkerOptions{}); !errors.Is(err, ErrNoDriver) || w != nil {
		t.Errorf("NewWorker = %v, %v; want nil and an error wrapping ErrNoDriver", w, err)
	}
}

func TestResultError(t *testing.T) {
	e := &Error{Func: "cuMemAlloc_v2", Code: ErrOutOfMemory}
	if !errors.Is(e, ErrOutOfMemory) || errors.Is(e, ErrInvalidValue) {
		t.Errorf("errors.Is on %v does not match its code alone", e)
	}
	msg := e.Error()
	if !strings.HasPrefix(msg, "cuda: cuMemAlloc_v2: ") {
		t.Errorf("message %q does not name the function", msg)
	}
	if Available() {
		// With a driver the message carries the driver's name and text.
		if !strings.Contains(msg, "CUDA_ERROR_OUT_OF_MEMORY") || !strings.Contains(msg, "out of memory") {
			t.Errorf("message %q lacks the driver's name and description", msg)
		}
	} else if !strings.Contains(msg, "CUDA error 2") {
		t.Errorf("message %q lacks the code", msg)
	}
	if check("f", Success) != nil {
		t.Error("check(Success) is not nil")
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:06:00.0": "0000:06:00.0",
		"0000:1A:00.0":     "0000:1a:00.0",
		"00000001:c1:00.0": "0001:c1:00.0",
		"garbage":          "garbage",
	} {
		if got := NormalizeBusID(in); got != want {
			t.Errorf("NormalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDevices(t *testing.T) {
	needDevices(t, 1)
	v, err := DriverVersion()
	if err != nil || v < 11000 {
		t.Fatalf("DriverVersion() = %d, %v", v, err)
	}
	n, _ := DeviceCount()
	t.Logf("driver CUDA %d.%d, %d devices", v/1000, v%1000/10, n)
	busRE := regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$`)
	uuidRE := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for d := Device(0); int(d) < n; d++ {
		info, err := d.Info()
		if err != nil {
			t.Fatal(err)
		}
		t.Log(info)
		if info.Name == "" || info.SMs <= 0 || info.CCMajor < 5 || info.TotalMem < 1<<30 || !info.UnifiedAddr {
			t.Errorf("implausible device info %+v", info)
		}
		if !busRE.MatchString(strings.ToLower(info.PCIBusID)) || !uuidRE.MatchString(info.UUID) {
			t.Errorf("bad PCI bus id %q or UUID %q", info.PCIBusID, info.UUID)
		}
		if seen[info.UUID] {
			t.Errorf("UUID %s seen twice", info.UUID)
		}
		seen[info.UUID] = true
		if ok, err := d.CanAccessPeer(d); err != nil || ok {
			t.Errorf("device %d CanAccessPeer(itself) = %v, %v; want false", d, ok, err)
		}
	}
	if _, err := Device(n).Name(); !errors.Is(err, ErrInvalidDevice) {
		t.Errorf("Device(%d).Name() error = %v, want CUDA_ERROR_INVALID_DEVICE", n, err)
	}
}

func TestWorkerDo(t *testing.T) {
	needDevices(t, 1)
	w := newWorker(t, 0)
	ctx := testCtx(t)
	// Closures from one goroutine run in order, one at a time.
	var order []int
	for i := range 100 {
		if err := w.Do(ctx, func(c *Ctx) error { order = append(order, i); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("closure %d ran as %d", i, v)
		}
	}
	// The closure's error comes back; a panic becomes an error.
	sentinel := errors.New("sentinel")
	if err := w.Do(ctx, func(c *Ctx) error { return sentinel }); err != sentinel {
		t.Errorf("Do returned %v, want the closure's error", err)
	}
	if err := w.Do(ctx, func(c *Ctx) error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panicking closure gave %v", err)
	}
	// Do from inside a closure of the same worker fails instead of hanging.
	err := w.Do(ctx, func(c *Ctx) error {
		return c.Worker().Do(ctx, func(*Ctx) error { return nil })
	})
	if err == nil || !strings.Contains(err.Error(), "same worker") {
		t.Errorf("nested Do gave %v", err)
	}
	// A cancelled context keeps the closure from running.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	if err := w.Do(cctx, func(*Ctx) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("Do with a cancelled context = %v (ran %v)", err, ran)
	}
	// A caller whose context ends while its closure waits in the queue
	// returns at once, and the closure never runs.
	release := make(chan struct{})
	busy := w.Go(func(*Ctx) error { <-release; return nil })
	tctx, tcancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer tcancel()
	ran = false
	begin := time.Now()
	if err := w.Do(tctx, func(*Ctx) error { ran = true; return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do behind a busy closure with a 5ms deadline = %v", err)
	}
	if el := time.Since(begin); el > time.Second {
		t.Errorf("cancelled Do returned after %v", el)
	}
	close(release)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	do(t, w, func(*Ctx) error { return nil })
	if ran {
		t.Error("a cancelled closure ran")
	}
	// Go queues and reports through its channel.
	if err := <-w.Go(func(c *Ctx) error { return sentinel }); err != sentinel {
		t.Errorf("Go reported %v", err)
	}
	// CUDA calls work on the worker's thread: the context is current.
	do(t, w, func(c *Ctx) error {
		free, total, err := c.MemInfo()
		if err == nil && (free == 0 || free > total) {
			err = errors.New("implausible MemInfo")
		}
		return err
	})
	// After Close every call fails with ErrWorkerClosed.
	w2, err := NewWorker(0, WorkerOptions{Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w2.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := w2.Do(ctx, func(*Ctx) error { return nil }); !errors.Is(err, ErrWorkerClosed) {
		t.Errorf("Do after Close = %v", err)
	}
	// Close answers closures still queued without running them.
	w3, err := NewWorker(0, WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release = make(chan struct{})
	started := make(chan struct{})
	first := w3.Go(func(*Ctx) error { close(started); <-release; return nil })
	<-started
	ran = false
	queued := w3.Go(func(*Ctx) error { ran = true; return nil })
	closed := make(chan error)
	go func() { closed <- w3.Close() }()
	for !w3.stopping.Load() {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Errorf("running closure = %v", err)
	}
	if err := <-queued; !errors.Is(err, ErrWorkerClosed) || ran {
		t.Errorf("queued closure at Close = %v (ran %v)", err, ran)
	}
}

func TestMemory(t *testing.T) {
	needDevices(t, 1)
	w := newWorker(t, 0)
	s := stream(t, w)
	const n = 1<<20 + 13
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(rand.Uint32())
	}
	a, b := alloc(t, w, n), alloc(t, w, n)
	upload(t, w, s, a, src)
	do(t, w, func(c *Ctx) error { return c.CopyDtoD(b, a, n, s) })
	if got := download(t, w, s, b, n); !bytes.Equal(got, src) {
		t.Fatal("H2D, D2D, D2H round trip changed the data")
	}
	// Memset8 and Memset32 on parts of the buffer.
	do(t, w, func(c *Ctx) error {
		if err := c.Memset8(b.Add(1), 0xab, 7, s); err != nil {
			return err
		}
		return c.Memset32(b.Add(64), 0x01020304, 3, s)
	})
	got := download(t, w, s, b, 128)
	want := append([]byte(nil), src[:128]...)
	for i := 1; i < 8; i++ {
		want[i] = 0xab
	}
	for i := 64; i < 76; i += 4 {
		copy(want[i:], []byte{4, 3, 2, 1})
	}
	if !bytes.Equal(got, want) {
		t.Errorf("memset: got %x\nwant %x", got, want)
	}
	// Pinned host memory, both through the typed copies and through Copy
	// on unified addresses.
	h := hostAlloc(t, w, n)
	do(t, w, func(c *Ctx) error {
		if err := c.CopyDtoH(h.Bytes(), a, s); err != nil {
			return err
		}
		return c.StreamSynchronize(s)
	})
	if !bytes.Equal(h.Bytes(), src) {
		t.Error("D2H into pinned memory changed the data")
	}
	clear(h.Bytes())
	do(t, w, func(c *Ctx) error {
		if err := c.Copy(h.Ptr(), b, n, s); err != nil {
			return err
		}
		return c.StreamSynchronize(s)
	})
	if !bytes.Equal(h.Bytes()[128:], src[128:]) || !bytes.Equal(h.Bytes()[:128], want) {
		t.Error("unified-address copy into pinned memory changed the data")
	}
	// Registered memory: an anonymous mapping, as a shared-memory segment
	// would be, mapped into the device too.
	m, err := syscall.Mmap(-1, 0, 1<<21, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	do(t, w, func(c *Ctx) error {
		if err := c.HostRegister(m, HostRegisterPortable|HostRegisterDeviceMap); err != nil {
			return err
		}
		dp, err := c.HostDevicePointer(m)
		if err != nil {
			return err
		}
		if err := c.CopyDtoH(m[:4096], a, s); err != nil {
			return err
		}
		if err := c.Copy(b, dp, 4096, s); err != nil {
			return err
		}
		if err := c.StreamSynchronize(s); err != nil {
			return err
		}
		return c.HostUnregister(m)
	})
	if !bytes.Equal(m[:4096], src[:4096]) || !bytes.Equal(download(t, w, s, b, 4096), src[:4096]) {
		t.Error("copies through registered memory changed the data")
	}
	// Errors: sizes, out of memory.
	do(t, w, func(c *Ctx) error {
		if _, err := c.Alloc(0); err == nil {
			return errors.New("Alloc(0) succeeded")
		}
		_, err := c.Alloc(1 << 50)
		if !errors.Is(err, ErrOutOfMemory) {
			return errors.New("Alloc(1<<50) error " + err.Error() + " is not CUDA_ERROR_OUT_OF_MEMORY")
		}
		t.Logf("expected error: %v", err)
		return nil
	})
}

func TestStreamsAndEvents(t *testing.T) {
	needDevices(t, 1)
	w := newWorker(t, 0)
	ctx := testCtx(t)
	s1, s2 := stream(t, w), stream(t, w)
	const n = 64 << 20
	a, b, dst := alloc(t, w, n), alloc(t, w, n), alloc(t, w, n)
	var start, end, ev Event
	do(t, w, func(c *Ctx) (err error) {
		if start, err = c.NewEvent(EventDefault); err != nil {
			return err
		}
		if end, err = c.NewEvent(EventDefault); err != nil {
			return err
		}
		ev, err = c.NewEvent(EventDisableTiming)
		return err
	})
	defer w.Do(context.Background(), func(c *Ctx) error {
		c.DestroyEvent(start)
		c.DestroyEvent(end)
		return c.DestroyEvent(ev)
	})
	// s1: fill a and b, sum them into dst; s2 waits for that through ev,
	// then overwrites the first word. If the wait did not hold, the sum
	// would land after the overwrite.
	do(t, w, func(c *Ctx) error {
		// Compile the kernels first, so that the timing below is GPU work.
		if err := c.LoadKernels(); err != nil {
			return err
		}
		steps := []func() error{
			func() error { return c.Record(start, s1) },
			func() error { return c.Memset32(a, 1, n/4, s1) },
			func() error { return c.Memset32(b, 2, n/4, s1) },
			func() error {
				return c.Reduce(s1, Reduction{DType: dtype.Int32, Op: dtype.Sum, Dst: dst, A: a, B: b, Count: n / 4})
			},
			func() error { return c.Record(end, s1) },
			func() error { return c.Record(ev, s1) },
			func() error { return c.StreamWaitEvent(s2, ev) },
			func() error { return c.Memset32(dst, 7, 1, s2) },
		}
		for _, f := range steps {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	})
	if err := w.WaitEvent(ctx, end); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(ctx, s2); err != nil {
		t.Fatal(err)
	}
	got := download(t, w, s2, dst, 16)
	if !bytes.Equal(got, []byte{7, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0}) {
		t.Errorf("stream order not kept: %v", got)
	}
	do(t, w, func(c *Ctx) error {
		done, err := c.EventQuery(end)
		if err != nil || !done {
			return errors.New("EventQuery after WaitEvent: not done")
		}
		if done, err = c.StreamQuery(s1); err != nil || !done {
			return errors.New("StreamQuery after WaitEvent: not done")
		}
		d, err := c.Elapsed(start, end)
		if err != nil {
			return err
		}
		if d <= 0 || d > 10*time.Second {
			return errors.New("implausible elapsed time " + d.String())
		}
		t.Logf("fill 2 x 64 MiB and sum: %v on the GPU", d)
		if _, err := c.Elapsed(ev, ev); err == nil {
			return errors.New("Elapsed on a timing-free event succeeded")
		}
		return nil
	})
	// A wait that is cancelled returns at once with the context's error.
	var blocker Event
	do(t, w, func(c *Ctx) (err error) {
		blocker, err = c.NewEvent(EventDisableTiming)
		return err
	})
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	do(t, w, func(c *Ctx) error {
		// 1000 sums of 64 MiB arrays move 200 GB: over 40 ms at any
		// bandwidth a GPU has today, so the wait outlasts the deadline.
		for range 1000 {
			if err := c.Reduce(s1, Reduction{DType: dtype.Int32, Op: dtype.Sum, Dst: dst, A: a, B: b, Count: n / 4}); err != nil {
				return err
			}
		}
		return c.Record(blocker, s1)
	})
	if err := w.WaitEvent(cctx, blocker); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled WaitEvent = %v", err)
	}
	if err := w.WaitEvent(ctx, blocker); err != nil {
		t.Error(err)
	}
	do(t, w, func(c *Ctx) error { return c.DestroyEvent(blocker) })
}

// TestPointerMemoryType checks what the C API's device calls tell device
// memory from host memory by: memory of cuMemAlloc is MemoryDevice on
// its GPU, pinned host memory MemoryHost, and Go's heap (malloc's, to
// CUDA) an error or another type.
func TestPointerMemoryType(t *testing.T) {
	needDevices(t, 1)
	w := newWorker(t, 0)
	p := alloc(t, w, 4096)
	if mt, err := PointerMemoryType(p); err != nil || mt != MemoryDevice {
		t.Errorf("PointerMemoryType(cuMemAlloc's) = %v, %v; want %v", mt, err, MemoryDevice)
	}
	if d, err := PointerDevice(p.Add(100)); err != nil || d != 0 {
		t.Errorf("PointerDevice(cuMemAlloc's + 100) = %v, %v; want 0", d, err)
	}
	h := hostAlloc(t, w, 4096)
	if mt, err := PointerMemoryType(h.Ptr()); err != nil || mt != MemoryHost {
		t.Errorf("PointerMemoryType(pinned host memory) = %v, %v; want %v", mt, err, MemoryHost)
	}
	b := make([]byte, 4096)
	if mt, err := PointerMemoryType(DevicePtr(uintptr(unsafe.Pointer(&b[0])))); err == nil && mt == MemoryDevice {
		t.Error("PointerMemoryType(Go's heap) = MemoryDevice")
	}
}
