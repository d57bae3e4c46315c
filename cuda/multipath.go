package cuda

import (
	"context"
	"errors"
	"fmt"
)

// multiPathAlign is the granularity, in bytes, of the host-staged chunks:
// every chunk but the last is a multiple of it, so that the copies start
// on aligned addresses.
const multiPathAlign = 256

// MultiPathSplit says how MultiPathCopier.Copy divides n bytes: the first
// Direct bytes go over the peer path, the remaining Staged bytes through
// host memory in Chunks chunks of ChunkSize bytes (the last one may be
// shorter).
type MultiPathSplit struct {
	Direct    int
	Staged    int
	ChunkSize int
	Chunks    int
}

// SplitMultiPath divides n bytes between the direct path and chunks host
// chunks, with a fraction hostShare (0 to 1) of the bytes, rounded down,
// staged through the host. The chunk size is rounded up to 256 bytes, so
// fewer chunks than asked may result for small staged sizes.
func SplitMultiPath(n int, hostShare float64, chunks int) (MultiPathSplit, error) {
	switch {
	case n < 0:
		return MultiPathSplit{}, fmt.Errorf("cuda: multi-path copy of %d bytes", n)
	case !(hostShare >= 0 && hostShare <= 1):
		return MultiPathSplit{}, fmt.Errorf("cuda: multi-path host share %v outside [0, 1]", hostShare)
	case chunks < 1:
		return MultiPathSplit{}, fmt.Errorf("cuda: multi-path copy with %d chunks", chunks)
	}
	staged := int(float64(n) * hostShare)
	if staged == 0 {
		return MultiPathSplit{Direct: n}, nil
	}
	size := (staged + chunks - 1) / chunks
	size = (size + multiPathAlign - 1) / multiPathAlign * multiPathAlign
	return MultiPathSplit{
		Direct:    n - staged,
		Staged:    staged,
		ChunkSize: size,
		Chunks:    (staged + size - 1) / size,
	}, nil
}

// MultiPathCopier copies buffers from one GPU to another over two paths at
// once (Algorithm 4.1 of seed 000): the direct peer copy (NVLink where
// there is one) and a host-staged path, device to pinned host memory to
// device, split in chunks that each have a stream on either side so that
// the device-to-host copy of one chunk overlaps the host-to-device copy of
// another. On links where the host path adds bandwidth to the peer path,
// the aggregate exceeds the peer path alone.
//
// The pinned staging buffer and the streams and events are allocated once,
// by NewMultiPathCopier, and reused by every Copy. A copier serves one
// Copy at a time.
type MultiPathCopier struct {
	src, dst  *Worker
	host      *HostBuffer
	maxChunks int
	direct    Stream   // on src: the peer copy
	d2h       []Stream // on src: chunk i to host
	h2d       []Stream // on dst: chunk i to the destination
	join      Stream   // on dst: waits for every path
	staged    []Event  // on src: chunk i is in host memory
	landed    []Event  // on dst: chunk i is in the destination
	directEv  Event    // on src: the peer copy is done
	doneEv    Event    // on dst: the whole copy is done
}

// NewMultiPathCopier prepares copies from src's device to dst's device that
// stage at most hostBytes bytes through the host in at most maxChunks
// chunks. It enables peer access between the two devices where the
// hardware allows it; without it the direct path is staged by the driver.
func NewMultiPathCopier(ctx context.Context, src, dst *Worker, hostBytes, maxChunks int) (m *MultiPathCopier, err error) {
	if src.Device() == dst.Device() {
		return nil, fmt.Errorf("cuda: multi-path copy within device %d", int(src.Device()))
	}
	if hostBytes < 0 || maxChunks < 1 {
		return nil, fmt.Errorf("cuda: multi-path copier with %d host bytes and %d chunks", hostBytes, maxChunks)
	}
	if err := EnablePeers(ctx, src, dst); err != nil {
		return nil, err
	}
	m = &MultiPathCopier{src: src, dst: dst, maxChunks: maxChunks}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.Close(context.Background()))
			m = nil
		}
	}()
	const timingOff = EventDisableTiming
	err = src.Do(ctx, func(c *Ctx) error {
		var err error
		if hostBytes > 0 {
			// Room for the rounding of the chunk size in SplitMultiPath.
			if m.host, err = c.HostAlloc(hostBytes+maxChunks*multiPathAlign, HostAllocPortable); err != nil {
				return err
			}
		}
		if m.direct, err = c.NewStream(0); err != nil {
			return err
		}
		if m.directEv, err = c.NewEvent(timingOff); err != nil {
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
	err = dst.Do(ctx, func(c *Ctx) error {
		var err error
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
func (m *MultiPathCopier) HostBytes() int {
	if m.host == nil {
		return 0
	}
	return m.host.Len()
}

// Copy copies n bytes from srcPtr on the source device to dstPtr on the
// destination device, staging a fraction hostShare of them through the
// host in the given number of chunks (see SplitMultiPath), and returns once
// all bytes have arrived. The caller must make sure that the source holds
// its data (its writes have completed) before calling Copy. It returns the
// split that was used.
func (m *MultiPathCopier) Copy(ctx context.Context, dstPtr, srcPtr DevicePtr, n int, hostShare float64, chunks int) (MultiPathSplit, error) {
	sp, err := SplitMultiPath(n, hostShare, chunks)
	if err != nil {
		return sp, err
	}
	if sp.Chunks > m.maxChunks {
		return sp, fmt.Errorf("cuda: multi-path copy in %d chunks, copier has %d", sp.Chunks, m.maxChunks)
	}
	if need := sp.Chunks * sp.ChunkSize; need > m.HostBytes() {
		return sp, fmt.Errorf("cuda: multi-path copy stages %d bytes, copier has %d", need, m.HostBytes())
	}
	if n == 0 {
		return sp, nil
	}
	srcCtx, dstCtx := m.src.Context(), m.dst.Context()
	var host []byte
	if m.host != nil {
		host = m.host.Bytes()
	}
	// chunk returns the offset in the buffers and the size of chunk i.
	chunk := func(i int) (off, size int) {
		off = sp.Direct + i*sp.ChunkSize
		return off, min(sp.ChunkSize, n-off)
	}
	// Source side: the direct copy first, so that it starts at once, then
	// every chunk to the host on its own stream.
	err = m.src.Do(ctx, func(c *Ctx) error {
		if err := c.CopyPeer(dstPtr, dstCtx, srcPtr, srcCtx, sp.Direct, m.direct); err != nil {
			return err
		}
		if err := c.Record(m.directEv, m.direct); err != nil {
			return err
		}
		for i := range sp.Chunks {
			off, size := chunk(i)
			h := host[i*sp.ChunkSize : i*sp.ChunkSize+size]
			if err := c.CopyDtoH(h, srcPtr.Add(off), m.d2h[i]); err != nil {
				return err
			}
			if err := c.Record(m.staged[i], m.d2h[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return sp, err
	}
	// Destination side: chunk i goes up once it is in host memory; the join
	// stream waits for every chunk and for the direct copy. The events were
	// recorded above, before these waits are queued.
	err = m.dst.Do(ctx, func(c *Ctx) error {
		for i := range sp.Chunks {
			off, size := chunk(i)
			h := host[i*sp.ChunkSize : i*sp.ChunkSize+size]
			if err := c.StreamWaitEvent(m.h2d[i], m.staged[i]); err != nil {
				return err
			}
			if err := c.CopyHtoD(dstPtr.Add(off), h, m.h2d[i]); err != nil {
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
	if err != nil {
		return sp, err
	}
	return sp, m.dst.WaitEvent(ctx, m.doneEv)
}

// Close waits for queued copies and frees the staging buffer, streams and
// events. The workers stay open.
func (m *MultiPathCopier) Close(ctx context.Context) error {
	// The destination first: its streams read the staging buffer.
	errDst := m.dst.Do(ctx, func(c *Ctx) error {
		var errs []error
		for _, s := range append([]Stream{m.join}, m.h2d...) {
			if s != 0 {
				errs = append(errs, c.StreamSynchronize(s), c.DestroyStream(s))
			}
		}
		for _, ev := range append([]Event{m.doneEv}, m.landed...) {
			if ev != 0 {
				errs = append(errs, c.DestroyEvent(ev))
			}
		}
		return errors.Join(errs...)
	})
	errSrc := m.src.Do(ctx, func(c *Ctx) error {
		var errs []error
		for _, s := range append([]Stream{m.direct}, m.d2h...) {
			if s != 0 {
				errs = append(errs, c.StreamSynchronize(s), c.DestroyStream(s))
			}
		}
		for _, ev := range append([]Event{m.directEv}, m.staged...) {
			if ev != 0 {
				errs = append(errs, c.DestroyEvent(ev))
			}
		}
		if m.host != nil {
			errs = append(errs, c.FreeHost(m.host))
		}
		return errors.Join(errs...)
	})
	*m = MultiPathCopier{src: m.src, dst: m.dst}
	return errors.Join(errSrc, errDst)
}
