package multipath

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/braid-ccl/braid/cuda"
)

// errClosed is what Copy returns after Close.
var errClosed = errors.New("multipath: copier closed")

// align is the granularity, in bytes, of the host-staged chunks:
// every chunk but the last is a multiple of it, so that the copies start
// on aligned addresses.
const align = 256

// Split says how Copier.Copy divides n bytes: the first
// Direct bytes go over the peer path, the remaining Staged bytes through
// host memory in Chunks chunks of ChunkSize bytes (the last one may be
// shorter).
type Split struct {
	Direct    int
	Staged    int
	ChunkSize int
	Chunks    int
}

// SplitBytes divides n bytes between the direct path and chunks host
// chunks, with a fraction hostShare (0 to 1) of the bytes, rounded down,
// staged through the host. The chunk size is rounded up to 256 bytes, so
// fewer chunks than asked may result for small staged sizes.
func SplitBytes(n int, hostShare float64, chunks int) (Split, error) {
	switch {
	case n < 0:
		return Split{}, fmt.Errorf("multipath: copy of %d bytes", n)
	case !(hostShare >= 0 && hostShare <= 1):
		return Split{}, fmt.Errorf("multipath: host share %v outside [0, 1]", hostShare)
	case chunks < 1:
		return Split{}, fmt.Errorf("multipath: copy with %d chunks", chunks)
	}
	staged := int(float64(n) * hostShare)
	if staged == 0 {
		return Split{Direct: n}, nil
	}
	size := (staged + chunks - 1) / chunks
	size = (size + align - 1) / align * align
	return Split{
		Direct:    n - staged,
		Staged:    staged,
		ChunkSize: size,
		Chunks:    (staged + size - 1) / size,
	}, nil
}

// Copier copies buffers from one GPU to another over two paths at
// once (Algorithm 4.1 of Temuçin's MASc thesis, Queen's University 2021):
// the direct peer copy (NVLink where there is one) and a host-staged path,
// device to pinned host memory to device, split in chunks that each have a
// stream on either side so that the device-to-host copy of one chunk
// overlaps the host-to-device copy of another. On links where the host path
// adds bandwidth to the peer path, the aggregate exceeds the peer path
// alone. Table says which split to use at which size.
//
// The pinned staging buffer and the streams and events are allocated once,
// by NewCopier, and reused by every Copy. A copier serves one
// Copy at a time.
type Copier struct {
	src, dst  *cuda.Worker
	host      *cuda.HostBuffer
	maxChunks int
	direct    cuda.Stream   // on src: the peer copy
	d2h       []cuda.Stream // on src: chunk i to host
	h2d       []cuda.Stream // on dst: chunk i to the destination
	join      cuda.Stream   // on src: waits for every path
	staged    []cuda.Event  // on src: chunk i is in host memory
	landed    []cuda.Event  // on dst: chunk i is in the destination
	directEv  cuda.Event    // on src: the peer copy is done
	doneEv    cuda.Event    // on src: the whole copy is done

	// err is set once a Copy has failed or given up after handing work to
	// the workers: that work may still be queued or running, so the
	// copier refuses further copies until it is closed.
	err error
}

// NewCopier prepares copies from src's device to dst's device that
// stage at most hostBytes bytes through the host in at most maxChunks
// chunks. It enables peer access between the two devices where the
// hardware allows it; without it the direct path is staged by the driver.
func NewCopier(ctx context.Context, src, dst *cuda.Worker, hostBytes, maxChunks int) (m *Copier, err error) {
	if src.Device() == dst.Device() {
		return nil, fmt.Errorf("multipath: copy within device %d", int(src.Device()))
	}
	if hostBytes < 0 || maxChunks < 1 {
		return nil, fmt.Errorf("multipath: copier with %d host bytes and %d chunks", hostBytes, maxChunks)
	}
	if err := cuda.EnablePeers(ctx, src, dst); err != nil {
		return nil, err
	}
	m = &Copier{src: src, dst: dst, maxChunks: maxChunks}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.Close(context.Background()))
			m = nil
		}
	}()
	const timingOff = cuda.EventDisableTiming
	err = src.Do(ctx, func(c *cuda.Ctx) error {
		var err error
		if hostBytes > 0 {
			// Room for the rounding of the chunk size in SplitBytes.
			if m.host, err = c.HostAlloc(hostBytes+maxChunks*align, cuda.HostAllocPortable); err != nil {
				return err
			}
		}
		if m.direct, err = c.NewStream(0); err != nil {
			return err
		}
		if m.directEv, err = c.NewEvent(timingOff); err != nil {
			return err
		}
		if m.join, err = c.NewStream(0); err != nil {
			return err
		}
		if m.doneEv, err = c.NewEvent(timingOff); err != nil {
			return err
		}
		for range maxChunks {
			s, err := c.NewStream(0)
			if err != nil {
				return err
			}
			m.d2h = append(m.d2h, s)
			ev, err := c.NewEvent(timingOff)
			if err != nil {
				return err
			}
			m.staged = append(m.staged, ev)
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	err = dst.Do(ctx, func(c *cuda.Ctx) error {
		for range maxChunks {
			s, err := c.NewStream(0)
			if err != nil {
				return err
			}
			m.h2d = append(m.h2d, s)
			ev, err := c.NewEvent(timingOff)
			if err != nil {
				return err
			}
			m.landed = append(m.landed, ev)
		}
		return nil
	})
	return m, err
}

// HostBytes returns the size of the pinned staging buffer.
func (m *Copier) HostBytes() int {
	if m.host == nil {
		return 0
	}
	return m.host.Len()
}

// Copy copies n bytes from srcPtr on the source device to dstPtr on the
// destination device, staging a fraction hostShare of them through the
// host in the given number of chunks (see SplitBytes), and returns once
// all bytes have arrived. The caller must make sure that the source holds
// its data (its writes have completed) before calling Copy. It returns the
// split that was used.
//
// Copy hands the source worker one closure and waits once, for an event
// queued behind it on the same worker. The closure queues the whole copy:
// the peer copy first, so that it starts at once; each chunk's copy to
// host memory, followed by an event; each chunk's copy from host memory on
// a stream of the destination device, made to wait for that event on the
// GPU (cuStreamWaitEvent), followed by an event of its own; and a join
// stream that waits for every path and records the final event. The
// driver takes copies and event records on a stream of another device
// than the current one (the stream decides which device's copy engine
// moves the bytes, here the destination's, over its own host link), so
// the destination's worker has no part in a copy.
//
// Arguments that do not fit the copier (more chunks or staged bytes than
// it was made for) are refused before anything is queued. If a driver call
// fails, or ctx ends, after work was queued, Copy returns the error and the
// copier refuses every later copy with it: part of the copy may still be
// queued or running, and the destination's contents are undefined until
// Close has returned.
func (m *Copier) Copy(ctx context.Context, dstPtr, srcPtr cuda.DevicePtr, n int, hostShare float64, chunks int) (Split, error) {
	sp, err := SplitBytes(n, hostShare, chunks)
	if err != nil {
		return sp, err
	}
	if m.err != nil {
		return sp, m.err
	}
	if sp.Chunks > m.maxChunks {
		return sp, fmt.Errorf("multipath: copy in %d chunks, copier has %d", sp.Chunks, m.maxChunks)
	}
	if need := sp.Chunks * sp.ChunkSize; need > m.HostBytes() {
		return sp, fmt.Errorf("multipath: copy stages %d bytes, copier has %d", need, m.HostBytes())
	}
	if n == 0 {
		return sp, nil
	}
	if err := ctx.Err(); err != nil {
		return sp, err
	}
	srcCtx, dstCtx := m.src.Context(), m.dst.Context()
	var host []byte
	if sp.Staged > 0 {
		host = m.host.Bytes()
	}
	done := m.src.Go(func(c *cuda.Ctx) error {
		if sp.Staged == 0 {
			if err := c.CopyPeer(dstPtr, dstCtx, srcPtr, srcCtx, sp.Direct, m.direct); err != nil {
				return err
			}
			return c.Record(m.doneEv, m.direct)
		}
		if err := c.CopyPeer(dstPtr, dstCtx, srcPtr, srcCtx, sp.Direct, m.direct); err != nil {
			return err
		}
		if err := c.Record(m.directEv, m.direct); err != nil {
			return err
		}
		// All chunks go down before any goes up, so that the first
		// device-to-host copies start while the rest are being queued.
		for i := range sp.Chunks {
			off, size := sp.Direct+i*sp.ChunkSize, min(sp.ChunkSize, sp.Staged-i*sp.ChunkSize)
			if err := c.CopyDtoH(host[i*sp.ChunkSize:i*sp.ChunkSize+size], srcPtr.Add(off), m.d2h[i]); err != nil {
				return err
			}
			if err := c.Record(m.staged[i], m.d2h[i]); err != nil {
				return err
			}
		}
		for i := range sp.Chunks {
			off, size := sp.Direct+i*sp.ChunkSize, min(sp.ChunkSize, sp.Staged-i*sp.ChunkSize)
			if err := c.StreamWaitEvent(m.h2d[i], m.staged[i]); err != nil {
				return err
			}
			if err := c.CopyHtoD(dstPtr.Add(off), host[i*sp.ChunkSize:i*sp.ChunkSize+size], m.h2d[i]); err != nil {
				return err
			}
			if err := c.Record(m.landed[i], m.h2d[i]); err != nil {
				return err
			}
			if err := c.StreamWaitEvent(m.join, m.landed[i]); err != nil {
				return err
			}
		}
		if err := c.StreamWaitEvent(m.join, m.directEv); err != nil {
			return err
		}
		return c.Record(m.doneEv, m.join)
	})
	err = m.src.WaitEvent(ctx, m.doneEv)
	if err == nil || ctx.Err() == nil {
		// The closure ran before the wait was taken up (or was answered
		// when the worker closed): its reply is there. If it failed, the
		// final event was not recorded and the wait saw an earlier one.
		err = errors.Join(<-done, err)
	}
	return sp, m.fail(err)
}

// fail records err, if any, as the copier's sticky error and returns it.
func (m *Copier) fail(err error) error {
	if err != nil {
		m.err = fmt.Errorf("multipath: copy from device %d to %d failed, copier unusable until closed: %w", int(m.src.Device()), int(m.dst.Device()), err)
		return err
	}
	return nil
}

// Close waits for queued copies and frees the staging buffer, streams and
// events. The workers stay open.
func (m *Copier) Close(ctx context.Context) error {
	// The destination first: its streams read the staging buffer.
	errDst := m.dst.Do(ctx, func(c *cuda.Ctx) error {
		var errs []error
		for _, s := range m.h2d {
			if s != 0 {
				errs = append(errs, c.StreamSynchronize(s), c.DestroyStream(s))
			}
		}
		for _, ev := range m.landed {
			if ev != 0 {
				errs = append(errs, c.DestroyEvent(ev))
			}
		}
		return errors.Join(errs...)
	})
	errSrc := m.src.Do(ctx, func(c *cuda.Ctx) error {
		var errs []error
		for _, s := range append([]cuda.Stream{m.direct, m.join}, m.d2h...) {
			if s != 0 {
				errs = append(errs, c.StreamSynchronize(s), c.DestroyStream(s))
			}
		}
		for _, ev := range append([]cuda.Event{m.directEv, m.doneEv}, m.staged...) {
			if ev != 0 {
				errs = append(errs, c.DestroyEvent(ev))
			}
		}
		if m.host != nil {
			errs = append(errs, c.FreeHost(m.host))
		}
		return errors.Join(errs...)
	})
	*m = Copier{src: m.src, dst: m.dst, err: errClosed}
	return errors.Join(errSrc, errDst)
}

// Sweep says what Measure times.
type Sweep struct {
	Sizes        []int     // copy sizes in bytes
	Shares       []float64 // host shares of the split grid, each above 0 and below 1
	Chunks       []int     // chunk counts of the split grid
	StagedChunks []int     // chunk counts of the host-staged path alone
	// Reps is how many times each configuration is timed; the fastest
	// counts, since interference only slows a copy. 0 means 3.
	Reps int
	// MinBytes is how many bytes one timing copies at least: smaller
	// copies are repeated back to back. 0 means 64 MiB.
	MinBytes int
	// Progress, if set, is called after each size with its results.
	Progress func(size int, results []Result)
}

// DefaultSweep returns the sweep of braid tune --device cuda:
// 4 MiB to 1 GiB by factors of 4; host shares 0.04 to 0.14 by 0.02, each
// in 4, 8 and 16 chunks; the host-staged path alone in 8 and 16 chunks;
// the fastest of 5 timings.
func DefaultSweep() Sweep {
	return Sweep{
		Sizes:        []int{4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30},
		Shares:       []float64{0.04, 0.06, 0.08, 0.10, 0.12, 0.14},
		Chunks:       []int{4, 8, 16},
		StagedChunks: []int{8, 16},
		Reps:         5,
	}
}

// Result is the time of one configuration of Measure.
type Result struct {
	Size      int
	HostShare float64       // 0: the peer copy alone; 1: the host-staged path alone
	Chunks    int           // host chunks; 1 for the peer copy alone
	Copies    int           // copies per timing, back to back
	Time      time.Duration // per copy, in the fastest timing
	GBps      float64       // Size / Time, in 10^9 bytes per second
}

// Measure times Copier.Copy from src's device to dst's
// at every size of the sweep: the peer copy alone, the host-staged path
// alone in each of StagedChunks, and both paths with every host share and
// chunk count of the grid. Each time is on the host clock from the first
// call to the return of the last, as a caller of Copy sees it. The
// configurations of a size are timed in turn, Reps rounds over all of
// them, so that a slow spell of the machine does not favour one. It
// allocates buffers of the largest size on both devices and a pinned
// staging buffer as large as the host-staged path needs, and frees them
// before it returns. Results come size by size, in the sweep's order.
func Measure(ctx context.Context, src, dst *cuda.Worker, sw Sweep) (res []Result, err error) {
	if sw.Reps == 0 {
		sw.Reps = 3
	}
	if sw.MinBytes == 0 {
		sw.MinBytes = 64 << 20
	}
	if len(sw.Sizes) == 0 || sw.Reps < 1 || sw.MinBytes < 1 {
		return nil, fmt.Errorf("multipath: sweep needs sizes, reps ≥ 1 and a positive MinBytes")
	}
	type config struct {
		share  float64
		chunks int
	}
	configs := []config{{0, 1}}
	for _, c := range sw.StagedChunks {
		configs = append(configs, config{1, c})
	}
	for _, s := range sw.Shares {
		if !(s > 0 && s < 1) {
			return nil, fmt.Errorf("multipath: sweep: host share %v is not between 0 and 1", s)
		}
		for _, c := range sw.Chunks {
			configs = append(configs, config{s, c})
		}
	}
	maxN, hostBytes, maxChunks := 0, 0, 1
	for _, n := range sw.Sizes {
		if n < 1 {
			return nil, fmt.Errorf("multipath: sweep: size %d", n)
		}
		maxN = max(maxN, n)
		for _, c := range configs {
			if c.chunks < 1 || c.chunks > MaxChunks {
				return nil, fmt.Errorf("multipath: sweep: %d chunks (1 to %d)", c.chunks, MaxChunks)
			}
			sp, err := SplitBytes(n, c.share, c.chunks)
			if err != nil {
				return nil, err
			}
			hostBytes = max(hostBytes, sp.Staged)
			maxChunks = max(maxChunks, c.chunks)
		}
	}
	var srcBuf, dstBuf cuda.DevicePtr
	defer func() {
		// Freeing synchronizes with the device, so it waits for copies a
		// failed Copy left running.
		if srcBuf != 0 {
			err = errors.Join(err, src.Do(context.Background(), func(c *cuda.Ctx) error { return c.Free(srcBuf) }))
		}
		if dstBuf != 0 {
			err = errors.Join(err, dst.Do(context.Background(), func(c *cuda.Ctx) error { return c.Free(dstBuf) }))
		}
	}()
	if err := src.Do(ctx, func(c *cuda.Ctx) (err error) { srcBuf, err = c.Alloc(maxN); return err }); err != nil {
		return nil, err
	}
	if err := dst.Do(ctx, func(c *cuda.Ctx) (err error) { dstBuf, err = c.Alloc(maxN); return err }); err != nil {
		return nil, err
	}
	m, err := NewCopier(ctx, src, dst, hostBytes, maxChunks)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, m.Close(context.Background())) }()
	for _, n := range sw.Sizes {
		copies := max(1, sw.MinBytes/n)
		best := make([]time.Duration, len(configs))
		// One untimed copy of each configuration first: the first use of
		// a stream or of a part of the staging buffer costs more.
		for rep := -1; rep < sw.Reps; rep++ {
			for i, c := range configs {
				k := copies
				if rep < 0 {
					k = 1
				}
				start := time.Now()
				for range k {
					if _, err := m.Copy(ctx, dstBuf, srcBuf, n, c.share, c.chunks); err != nil {
						return res, err
					}
				}
				el := max(time.Since(start)/time.Duration(k), time.Nanosecond)
				if rep >= 0 && (best[i] == 0 || el < best[i]) {
					best[i] = el
				}
			}
		}
		first := len(res)
		for i, c := range configs {
			res = append(res, Result{Size: n, HostShare: c.share, Chunks: c.chunks, Copies: copies,
				Time: best[i], GBps: float64(n) / best[i].Seconds() / 1e9})
		}
		if sw.Progress != nil {
			sw.Progress(n, res[first:])
		}
	}
	return res, nil
}
