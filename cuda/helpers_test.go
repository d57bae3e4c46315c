package cuda

import (
	"context"
	"testing"
	"time"
)

// needDevices skips the test unless a CUDA driver and n devices are there.
func needDevices(t testing.TB, n int) {
	t.Helper()
	cnt, err := DeviceCount()
	if err != nil {
		t.Skip("no CUDA driver: " + err.Error())
	}
	if cnt < n {
		t.Skipf("needs %d CUDA devices, have %d", n, cnt)
	}
}

// newWorker starts a worker for dev, closed when the test ends.
func newWorker(t testing.TB, dev Device) *Worker {
	t.Helper()
	w, err := NewWorker(dev, WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return w
}

// testCtx returns a context that ends with the test or after a minute.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// do runs fn on w and fails the test on error.
func do(t testing.TB, w *Worker, fn func(c *Ctx) error) {
	t.Helper()
	if err := w.Do(testCtx(t), fn); err != nil {
		t.Fatal(err)
	}
}

// stream creates a stream on w, destroyed when the test ends.
func stream(t testing.TB, w *Worker) Stream {
	t.Helper()
	var s Stream
	do(t, w, func(c *Ctx) (err error) { s, err = c.NewStream(0); return err })
	t.Cleanup(func() { w.Do(context.Background(), func(c *Ctx) error { return c.DestroyStream(s) }) })
	return s
}

// alloc allocates n bytes on w, freed when the test ends.
func alloc(t testing.TB, w *Worker, n int) DevicePtr {
	t.Helper()
	var p DevicePtr
	do(t, w, func(c *Ctx) (err error) { p, err = c.Alloc(n); return err })
	t.Cleanup(func() { w.Do(context.Background(), func(c *Ctx) error { return c.Free(p) }) })
	return p
}

// event creates an event on w without timing, destroyed when the test ends.
func event(t testing.TB, w *Worker) Event {
	t.Helper()
	var ev Event
	do(t, w, func(c *Ctx) (err error) { ev, err = c.NewEvent(EventDisableTiming); return err })
	t.Cleanup(func() { w.Do(context.Background(), func(c *Ctx) error { return c.DestroyEvent(ev) }) })
	return ev
}

// hostAlloc allocates n bytes of pinned host memory, freed when the test ends.
func hostAlloc(t testing.TB, w *Worker, n int) *HostBuffer {
	t.Helper()
	var h *HostBuffer
	do(t, w, func(c *Ctx) (err error) { h, err = c.HostAlloc(n, HostAllocPortable); return err })
	t.Cleanup(func() { w.Do(context.Background(), func(c *Ctx) error { return c.FreeHost(h) }) })
	return h
}

// download copies n bytes at p to a new slice and waits for the copy.
func download(t testing.TB, w *Worker, s Stream, p DevicePtr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	do(t, w, func(c *Ctx) error {
		if err := c.CopyDtoH(b, p, s); err != nil {
			return err
		}
		return c.StreamSynchronize(s)
	})
	return b
}

// upload copies b to p and waits for the copy.
func upload(t testing.TB, w *Worker, s Stream, p DevicePtr, b []byte) {
	t.Helper()
	do(t, w, func(c *Ctx) error {
		if err := c.CopyHtoD(p, b, s); err != nil {
			return err
		}
		return c.StreamSynchronize(s)
	})
}
