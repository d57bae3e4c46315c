package multipath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/braid-ccl/braid/cuda"
)

func TestSplitMultiPath(t *testing.T) {
	for _, n := range []int{0, 1, 255, 4097, 1 << 20, 1<<20 + 13, 1 << 30} {
		for _, share := range []float64{0, 0.05, 0.1, 0.37, 1} {
			for _, chunks := range []int{1, 3, 4, 16} {
				sp, err := SplitBytes(n, share, chunks)
				if err != nil {
					t.Fatalf("n=%d share=%v chunks=%d: %v", n, share, chunks, err)
				}
				if want := int(float64(n) * share); sp.Staged != want || sp.Direct != n-want {
					t.Errorf("n=%d share=%v chunks=%d: direct %d staged %d, want %d staged", n, share, chunks, sp.Direct, sp.Staged, want)
				}
				if sp.Staged == 0 {
					if sp.Chunks != 0 {
						t.Errorf("n=%d share=%v: %d chunks for nothing staged", n, share, sp.Chunks)
					}
					continue
				}
				if sp.Chunks < 1 || sp.Chunks > chunks || sp.ChunkSize%align != 0 {
					t.Errorf("n=%d share=%v chunks=%d: %+v", n, share, chunks, sp)
				}
				// The chunks cover the staged bytes exactly: all but the
				// last are full, the last is not empty.
				if last := sp.Staged - (sp.Chunks-1)*sp.ChunkSize; last <= 0 || last > sp.ChunkSize {
					t.Errorf("n=%d share=%v chunks=%d: last chunk %d of %+v", n, share, chunks, last, sp)
				}
			}
		}
	}
	for _, c := range []struct {
		n      int
		share  float64
		chunks int
	}{{-1, 0, 1}, {10, -0.1, 1}, {10, 1.5, 1}, {10, 0.5, 0}} {
		if _, err := SplitBytes(c.n, c.share, c.chunks); err == nil {
			t.Errorf("SplitBytes(%d, %v, %d) accepted", c.n, c.share, c.chunks)
		}
	}
}

// pattern returns n bytes that differ between neighbouring positions and
// between calls with different seeds.
func pattern(n int, seed uint32) []byte {
	b := make([]byte, n)
	x := seed*2654435761 + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

func TestMultiPathCopy(t *testing.T) {
	needDevices(t, 2)
	w0, w1 := newWorker(t, 0), newWorker(t, 1)
	const maxN = 8<<20 + 3
	m, err := NewCopier(testCtx(t), w0, w1, maxN, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(testCtx(t)); err != nil {
			t.Error(err)
		}
	})
	s0, s1 := stream(t, w0), stream(t, w1)
	src, dst := alloc(t, w0, maxN), alloc(t, w1, maxN)
	for si, n := range []int{1, 4097, 1<<20 + 13, maxN} {
		// Two sources in turn, so that a chunk that went up before its
		// bytes had come down (a host-to-device copy that did not wait for
		// its event) would bring the previous copy's bytes.
		srcs := [2][]byte{pattern(n, uint32(2*si)), pattern(n, uint32(2*si+1))}
		for _, share := range []float64{0, 0.1, 0.37, 1} {
			for _, chunks := range []int{1, 4, 16} {
				for _, want := range srcs {
					upload(t, w0, s0, src, want)
					do(t, w1, func(c *cuda.Ctx) error {
						if err := c.Memset8(dst, 0xa5, n, s1); err != nil {
							return err
						}
						return c.StreamSynchronize(s1)
					})
					sp, err := m.Copy(testCtx(t), dst, src, n, share, chunks)
					if err != nil {
						t.Fatalf("n=%d share=%v chunks=%d: %v", n, share, chunks, err)
					}
					got := download(t, w1, s1, dst, n)
					if !bytes.Equal(got, want) {
						i := 0
						for got[i] == want[i] {
							i++
						}
						t.Errorf("n=%d share=%v chunks=%d split %+v: first wrong byte at %d", n, share, chunks, sp, i)
					}
				}
			}
		}
	}
	// A split larger than the copier was made for is refused, and so is a
	// copy whose context has ended; neither queues anything, so the copier
	// stays usable.
	if _, err := m.Copy(testCtx(t), dst, src, maxN, 0.5, 17); err == nil {
		t.Error("copy in 17 chunks accepted by a copier of 16")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Copy(ended, dst, src, maxN, 0.1, 4); !errors.Is(err, context.Canceled) {
		t.Errorf("copy with an ended context: %v", err)
	}
	if _, err := m.Copy(testCtx(t), dst, src, maxN, 0.1, 4); err != nil {
		t.Errorf("copy after refused ones: %v", err)
	}
}

func TestMultiPathCopierClosed(t *testing.T) {
	needDevices(t, 2)
	w0, w1 := newWorker(t, 0), newWorker(t, 1)
	m, err := NewCopier(testCtx(t), w0, w1, 1<<20, 4)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := alloc(t, w0, 1<<20), alloc(t, w1, 1<<20)
	if err := m.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, share := range []float64{0, 0.5} {
		if _, err := m.Copy(testCtx(t), dst, src, 1<<20, share, 4); !errors.Is(err, errClosed) {
			t.Errorf("host share %v: copy after Close: %v", share, err)
		}
	}
}

// TestMeasureMultiPath runs a small sweep and checks that its results make
// a table that a copier of the sweep's size can follow.
func TestMeasureMultiPath(t *testing.T) {
	needDevices(t, 2)
	w0, w1 := newWorker(t, 0), newWorker(t, 1)
	sw := Sweep{
		Sizes:        []int{1 << 20, 4<<20 + 7},
		Shares:       []float64{0.1, 0.3},
		Chunks:       []int{2, 4},
		StagedChunks: []int{4},
		Reps:         2,
		MinBytes:     8 << 20,
	}
	var progress []int
	sw.Progress = func(size int, rs []Result) {
		progress = append(progress, size)
		if len(rs) != 6 {
			t.Errorf("progress at %d bytes with %d results, want 6", size, len(rs))
		}
	}
	res, err := Measure(testCtx(t), w0, w1, sw)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 12 || len(progress) != 2 || progress[1] != 4<<20+7 {
		t.Fatalf("%d results, progress %v", len(res), progress)
	}
	for _, r := range res {
		if r.Time <= 0 || r.GBps <= 0 || r.Copies != max(1, (8<<20)/r.Size) {
			t.Errorf("result %+v", r)
		}
	}
	sums, err := Summarize(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		t.Logf("%d bytes: direct %.1f GB/s, staged %.1f GB/s, best split %v in %d chunks %.1f GB/s (%+.1f%%)",
			s.Size, s.Direct.GBps, s.Staged[0].GBps, s.Best.HostShare, s.Best.Chunks, s.Best.GBps, s.Gain*100)
	}
	tab := Choose(sums, -1) // every size takes its best split
	hostBytes, chunks := tab.Limits(4<<20 + 7)
	m, err := NewCopier(testCtx(t), w0, w1, hostBytes, chunks)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(testCtx(t))
	src, dst := alloc(t, w0, 4<<20+7), alloc(t, w1, 4<<20+7)
	for _, n := range []int{1 << 20, 4<<20 + 7} {
		share, chunks := tab.Lookup(n)
		if share == 0 {
			t.Errorf("%d bytes: a table of best splits chose the peer copy alone", n)
		}
		if _, err := m.Copy(testCtx(t), dst, src, n, share, chunks); err != nil {
			t.Errorf("%d bytes as the table says: %v", n, err)
		}
	}
}

// BenchmarkMultiPath sweeps the size, host share and chunk count of a
// multi-path copy from GPU 0 to GPU 1 and prints, per size, the best split
// and its gain over the direct peer copy alone. Each iteration is one Copy
// (or several for small sizes, at least 64 MiB in all), timed on the host
// clock from the first enqueue to the completion of the last path.
func BenchmarkMultiPath(b *testing.B) {
	w0, w1 := benchWorkers(b)
	sizes := []int{1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}
	shares := []float64{0, 0.05, 0.10, 0.15, 0.20}
	chunkCounts := []int{4, 8, 16}
	maxN := sizes[len(sizes)-1]
	m, err := NewCopier(testCtx(b), w0, w1, int(float64(maxN)*shares[len(shares)-1]), 16)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(testCtx(b))
	src, dst := alloc(b, w0, maxN), alloc(b, w1, maxN)
	type config struct {
		n      int
		share  float64
		chunks int
	}
	// last holds each configuration's figure from its final run; the
	// testing package first runs every sub-benchmark once as a warm-up.
	last := map[config]float64{}
	for _, n := range sizes {
		reps := max(1, (64<<20)/n)
		for _, share := range shares {
			for _, chunks := range chunkCounts {
				if share == 0 && chunks != chunkCounts[0] {
					continue // chunks do not matter without a host share
				}
				name := fmt.Sprintf("size=%dMiB/host=%02.0f%%/chunks=%d", n>>20, share*100, chunks)
				b.Run(name, func(b *testing.B) {
					ctx := testCtx(b)
					b.SetBytes(int64(n * reps))
					b.ResetTimer()
					start := time.Now()
					for range b.N {
						for range reps {
							if _, err := m.Copy(ctx, dst, src, n, share, chunks); err != nil {
								b.Fatal(err)
							}
						}
					}
					el := time.Since(start)
					gbps := float64(n) * float64(reps) * float64(b.N) / el.Seconds() / 1e9
					b.ReportMetric(gbps, "GB/s")
					last[config{n, share, chunks}] = gbps
				})
			}
		}
	}
	type result struct {
		share  float64
		chunks int
		gbps   float64
	}
	best := map[int]result{}
	direct := map[int]float64{}
	for c, gbps := range last {
		if c.share == 0 {
			direct[c.n] = gbps
		}
		if r, ok := best[c.n]; !ok || gbps > r.gbps || gbps == r.gbps && c.share < r.share {
			best[c.n] = result{c.share, c.chunks, gbps}
		}
	}
	if len(best) == 0 {
		return
	}
	ns := make([]int, 0, len(best))
	for n := range best {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	fmt.Fprintf(os.Stdout, "\nmulti-path GPU0->GPU1, best split per size (host clock; sizes under 64 MiB timed over 64 MiB of back-to-back copies)\n")
	fmt.Fprintf(os.Stdout, "%10s %12s %10s %8s %12s %8s\n", "size", "direct GB/s", "host share", "chunks", "best GB/s", "gain")
	for _, n := range ns {
		r := best[n]
		gain := 0.0
		if d := direct[n]; d > 0 {
			gain = (r.gbps/d - 1) * 100
		}
		fmt.Fprintf(os.Stdout, "%8dMi %12.1f %9.0f%% %8d %12.1f %+7.1f%%\n", n>>20, direct[n], r.share*100, r.chunks, r.gbps, gain)
	}
}

// BenchmarkMultiPathOverhead measures the fixed cost of one Copy: a copy
// of 4 KiB, whose bytes take well under a microsecond on either path, by
// the peer copy alone and split over both paths in 1 and 16 chunks.
func BenchmarkMultiPathOverhead(b *testing.B) {
	w0, w1 := benchWorkers(b)
	const n = 4 << 10
	m, err := NewCopier(testCtx(b), w0, w1, n, 16)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(testCtx(b))
	src, dst := alloc(b, w0, n), alloc(b, w1, n)
	for _, c := range []struct {
		share  float64
		chunks int
	}{{0, 1}, {0.5, 1}, {0.5, 16}} {
		b.Run(fmt.Sprintf("host=%g/chunks=%d", c.share, c.chunks), func(b *testing.B) {
			ctx := testCtx(b)
			for range b.N {
				if _, err := m.Copy(ctx, dst, src, n, c.share, c.chunks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
