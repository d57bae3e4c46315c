package multipath

import (
	"context"
	"testing"
	"time"

	"github.com/braid-ccl/braid/cuda"
)

// needDevices skips the test unless a CUDA driver and n devices are there.
func needDevices(t testing.TB, n int) {
	t.Helper()
	cnt, err := cuda.DeviceCount()
	if err != nil {
		t.Skip("no CUDA driver: " + err.Error())
	}
	if cnt < n {
		t.Skipf("needs %d CUDA devices, have %d", n, cnt)
	}
}

// newWorker starts a worker for dev, closed when the test ends.
func newWorker(t testing.TB, dev cuda.Device) *cuda.Worker {
	t.Helper()
	w, err := cuda.NewWorker(dev, cuda.WorkerOptions{})
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
func do(t testing.TB, w *cuda.Worker, fn func(c *cuda.Ctx) error) {
	t.Helper()
	if err := w.Do(testCtx(t), fn); err != nil {
		t.Fatal(err)
	}
}

// stream creates a stream on w, destroyed when the test ends.
func stream(t testing.TB, w *cuda.Worker) cuda.Stream {
	t.Helper()
	var s cuda.Stream
	do(t, w, func(c *cuda.Ctx) (err error) { s, err = c.NewStream(0); return err })
	t.Cleanup(func() { w.Do(context.Background(), func(c *cuda.Ctx) error { return c.DestroyStream(s) }) })
	return s
}

// alloc allocates n bytes on w, freed when the test ends.
func alloc(t testing.TB, w *cuda.Worker, n int) cuda.DevicePtr {
	t.Helper()
	var p cuda.DevicePtr
	do(t, w, func(c *cuda.Ctx) (err error) { p, err = c.Alloc(n); return err })
	t.Cleanup(func() { w.Do(context.Background(), func(c *cuda.Ctx) error { return c.Free(p) }) })
	return p
}

// download copies n bytes at p to a new slice and waits for the copy.
func download(t testing.TB, w *cuda.Worker, s cuda.Stream, p cuda.DevicePtr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	do(t, w, func(c *cuda.Ctx) error {
		if err := c.CopyDtoH(b, p, s); err != nil {
			return err
		}
		return c.StreamSynchronize(s)
	})
	return b
}

// upload copies b to p and waits for the copy.
func upload(t testing.TB, w *cuda.Worker, s cuda.Stream, p cuda.DevicePtr, b []byte) {
	t.Helper()
	do(t, w, func(c *cuda.Ctx) error {
		if err := c.CopyHtoD(p, b, s); err != nil {
			return err
		}
		return c.StreamSynchronize(s)
	})
}

// benchWorkers starts workers for GPUs 0 and 1 with peer access between
// them, closed when the benchmark ends; it skips without two GPUs.
func benchWorkers(b *testing.B) (*cuda.Worker, *cuda.Worker) {
	b.Helper()
	needDevices(b, 2)
	w0, w1 := newWorker(b, 0), newWorker(b, 1)
	if err := cuda.EnablePeers(testCtx(b), w0, w1); err != nil {
		b.Fatal(err)
	}
	return w0, w1
}
