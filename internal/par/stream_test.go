package par

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// TestCopyStream: every length and alignment of source and destination
// around the 64-byte body, and a split copy, give what copy gives, and
// touch nothing past the destination's end.
func TestCopyStream(t *testing.T) {
	src := make([]byte, 4096)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 255, 256, 1000, 2048} {
		for so := range 9 {
			for do := range 70 {
				dst := make([]byte, 3000)
				want := make([]byte, 3000)
				copy(want[do:do+n], src[so:so+n])
				if got := CopyStream(dst[do:do+n], src[so:so+n]); got != n {
					t.Fatalf("n %d: copied %d", n, got)
				}
				if !bytes.Equal(dst, want) {
					t.Fatalf("n %d, source offset %d, destination offset %d: wrong bytes", n, so, do)
				}
			}
		}
	}
	defer SetThreads(4, 64<<10)()
	big := make([]byte, 3<<20+77)
	for i := range big {
		big[i] = byte(i * 13)
	}
	out := make([]byte, len(big)+1)
	if CopyStream(out[1:], big) != len(big) || !bytes.Equal(out[1:], big) || out[0] != 0 {
		t.Fatal("split copy: wrong bytes")
	}
}

// BenchmarkGather copies as every rank of an allgather through the
// shared area does: each of R goroutines (BRAID_GATHER_RANKS, default
// GOMAXPROCS) copies R blocks (BRAID_GATHER_BLOCK bytes, default 1 MiB)
// from a source every goroutine shares into an output of its own, in
// chunks of BRAID_GATHER_CHUNK bytes (default 256 KiB), with copy and
// with CopyStream. The bytes per second are the outputs' whole.
func BenchmarkGather(b *testing.B) {
	env := func(k string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
			return v
		}
		return def
	}
	r := env("BRAID_GATHER_RANKS", runtime.GOMAXPROCS(0))
	blk := env("BRAID_GATHER_BLOCK", 1<<20)
	chunk := env("BRAID_GATHER_CHUNK", 256<<10)
	src := make([]byte, r*blk)
	for i := range src {
		src[i] = byte(i)
	}
	outs := make([][]byte, r)
	for i := range outs {
		outs[i] = make([]byte, r*blk)
	}
	defer SetThreads(1, 0)()
	for _, stream := range []bool{false, true} {
		name := "copy"
		if stream {
			name = "stream"
		}
		b.Run(fmt.Sprintf("%s/ranks=%d/block=%d/chunk=%d", name, r, blk, chunk), func(b *testing.B) {
			b.SetBytes(int64(r * r * blk))
			for b.Loop() {
				var wg sync.WaitGroup
				for g := range r {
					wg.Add(1)
					go func() {
						defer wg.Done()
						out := outs[g]
						for off := 0; off < blk; off += chunk {
							e := min(off+chunk, blk)
							for q := range r {
								if stream {
									copyStream(out[q*blk+off:q*blk+e], src[q*blk+off:q*blk+e])
								} else {
									copy(out[q*blk+off:q*blk+e], src[q*blk+off:q*blk+e])
								}
							}
						}
					}()
				}
				wg.Wait()
			}
		})
	}
}

// TestStreamMin: the default from a cache directory laid out as sysfs's,
// and the variable's values.
func TestStreamMin(t *testing.T) {
	dir := t.TempDir()
	for i, c := range [][4]string{
		{"1", "Data", "48K", "0"}, {"1", "Instruction", "32K", "0"},
		{"2", "Unified", "2048K", "0"}, {"3", "Unified", "307200K", "0-15"},
	} {
		d := filepath.Join(dir, fmt.Sprintf("index%d", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for j, name := range []string{"level", "type", "size", "shared_cpu_list"} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(c[j]+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	share := lastCacheShare(dir)
	if share != 300<<20/16 {
		t.Fatalf("lastCacheShare: %d, want %d (300 MiB over 16 CPUs)", share, 300<<20/16)
	}
	if got := defaultStreamMin(share); got != share/4*3 {
		t.Errorf("defaultStreamMin(%d) = %d, want three quarters", share, got)
	}
	if got := defaultStreamMin(256 << 10); got != 1<<20 {
		t.Errorf("a small cache: %d, want 1 MiB", got)
	}
	if got := defaultStreamMin(0); got != 8<<20 {
		t.Errorf("no cache read: %d, want 8 MiB", got)
	}
	if lastCacheShare(filepath.Join(dir, "none")) != 0 {
		t.Error("a missing directory gave a share")
	}
	for v, want := range map[string]int{"off": -1, "8M": 8 << 20, "64K": 64 << 10} {
		if got, err := ParseStreamMin(v); err != nil || got != want {
			t.Errorf("ParseStreamMin(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"", "1K", "lots", "-1"} {
		if _, err := ParseStreamMin(v); err == nil {
			t.Errorf("ParseStreamMin(%q): no error", v)
		}
	}
	if countCPUs("0-15,32-47") != 32 || countCPUs("3") != 1 || countCPUs("x") != 0 {
		t.Error("countCPUs")
	}
}
