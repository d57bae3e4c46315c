package par

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// cover records which pieces a Run made.
type cover struct {
	hits   []atomic.Int32
	mu     sync.Mutex
	pieces [][2]int
}

func (c *cover) Piece(lo, hi int) {
	for i := lo; i < hi; i++ {
		c.hits[i].Add(1)
	}
	c.mu.Lock()
	c.pieces = append(c.pieces, [2]int{lo, hi})
	c.mu.Unlock()
}

func TestRunCoversOnce(t *testing.T) {
	sizes := []int{1, 63, 64, 1000, 4096 + 7, 1 << 16, 1<<16 + 3, 200_003}
	for threads := 1; threads <= 8; threads++ {
		defer SetThreads(threads, 4096)()
		for align := 1; align <= 8; align++ {
			step := lcm64(align)
			for _, n := range sizes {
				n := n / align * align
				if n == 0 {
					continue
				}
				c := &cover{hits: make([]atomic.Int32, n)}
				Run(n, align, c)
				for i := range c.hits {
					if h := c.hits[i].Load(); h != 1 {
						t.Fatalf("threads %d align %d n %d: byte %d done %d times", threads, align, n, i, h)
					}
				}
				for _, pc := range c.pieces {
					if pc[0]%step != 0 || pc[1] != n && pc[1]%step != 0 || pc[0] >= pc[1] {
						t.Fatalf("threads %d align %d n %d: piece %v not on %d-byte bounds", threads, align, n, pc, step)
					}
				}
				switch {
				case n < 4096 && len(c.pieces) != 1:
					t.Fatalf("threads %d n %d below the least size: %d pieces, want 1", threads, n, len(c.pieces))
				case threads == 1 && len(c.pieces) != 1:
					t.Fatalf("one thread, n %d: %d pieces, want 1", n, len(c.pieces))
				case threads > 1 && n >= 2*max(4096, step) && len(c.pieces) < 2:
					t.Fatalf("threads %d align %d n %d: %d pieces, want a split", threads, align, n, len(c.pieces))
				}
			}
		}
	}
}

func TestDefaultMinSize(t *testing.T) {
	defer SetThreads(4, 0)()
	for _, n := range []int{DefaultMinSize - 1, DefaultMinSize} {
		c := &cover{hits: make([]atomic.Int32, n)}
		Run(n, 4, c)
		if split := len(c.pieces) > 1; split != (n >= DefaultMinSize) {
			t.Errorf("n %d: %d pieces with the default least size %d", n, len(c.pieces), DefaultMinSize)
		}
	}
}

func TestCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for threads := 1; threads <= 8; threads++ {
		defer SetThreads(threads, 1024)()
		for _, n := range []int{0, 1, 1023, 1024, 1025, 77_777, 1<<20 + 13} {
			src := make([]byte, n+3)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			for _, off := range []int{0, 1, 3} { // misaligned too
				dst := make([]byte, n+8)
				want := bytes.Clone(dst)
				copy(want[off:off+n], src[:n])
				if got := Copy(dst[off:off+n], src[:n]); got != n {
					t.Fatalf("Copy returned %d, want %d", got, n)
				}
				if !bytes.Equal(dst, want) {
					t.Fatalf("threads %d n %d off %d: wrong copy", threads, n, off)
				}
			}
			// unequal lengths copy the shorter
			if n > 0 {
				dst := make([]byte, n/2)
				if got := Copy(dst, src[:n]); got != n/2 || !bytes.Equal(dst, src[:n/2]) {
					t.Fatalf("threads %d n %d: shorter dst got %d", threads, n, got)
				}
			}
		}
	}
}

func TestCopyOverlapping(t *testing.T) {
	defer SetThreads(4, 1024)()
	for _, shift := range []int{-4097, -1, 1, 4097} {
		buf := make([]byte, 1<<18+16384)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		want := bytes.Clone(buf)
		lo, n := 4100, 1<<18
		copy(want[lo+shift:lo+shift+n], want[lo:lo+n])
		Copy(buf[lo+shift:lo+shift+n], buf[lo:lo+n])
		if !bytes.Equal(buf, want) {
			t.Fatalf("shift %d: overlapping copy differs from copy's", shift)
		}
	}
}

// TestConcurrentCallers: calls made at once from several goroutines, and
// from inside a piece, run on their callers and stay correct.
func TestConcurrentCallers(t *testing.T) {
	defer SetThreads(4, 4096)()
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := make([]byte, 300_000+g)
			for i := range src {
				src[i] = byte(i + g)
			}
			dst := make([]byte, len(src))
			for range 50 {
				clear(dst)
				Copy(dst, src)
				if !bytes.Equal(dst, src) {
					t.Errorf("goroutine %d: wrong copy", g)
					return
				}
			}
		}()
	}
	wg.Wait()
	n := 1 << 18
	outer := &nested{inner: make([]byte, n), src: make([]byte, n)}
	for i := range outer.src {
		outer.src[i] = byte(i)
	}
	Run(n, 1, outer)
	if !bytes.Equal(outer.inner, outer.src) {
		t.Fatal("nested Copy inside pieces: wrong copy")
	}
}

type nested struct{ inner, src []byte }

func (x *nested) Piece(lo, hi int) { Copy(x.inner[lo:hi], x.src[lo:hi]) }

func TestNoAllocations(t *testing.T) {
	defer SetThreads(4, 4096)()
	src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
	c := &sum{dst: dst, src: src}
	Copy(dst, src) // start the helpers
	if a := testing.AllocsPerRun(50, func() { Copy(dst, src) }); a != 0 {
		t.Errorf("Copy: %v allocations per call", a)
	}
	if a := testing.AllocsPerRun(50, func() { Run(len(dst), 4, c) }); a != 0 {
		t.Errorf("Run: %v allocations per call", a)
	}
}

// sum adds src into dst bytewise.
type sum struct{ dst, src []byte }

func (s *sum) Piece(lo, hi int) {
	d, x := s.dst[lo:hi], s.src[lo:hi]
	for i := range d {
		d[i] += x[i]
	}
}

func TestParseThreads(t *testing.T) {
	for _, v := range []string{"1", "8", fmt.Sprint(MaxThreads)} {
		if _, err := ParseThreads(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	for _, v := range []string{"0", "-1", "x", "2.5", fmt.Sprint(MaxThreads + 1), ""} {
		_, err := ParseThreads(v)
		if err == nil || !strings.Contains(err.Error(), EnvThreads) {
			t.Errorf("%q: error %v, want one naming %s", v, err, EnvThreads)
		}
	}
}

func TestThreadsFollowsGOMAXPROCS(t *testing.T) {
	defer SetThreads(3, 0)()
	if n := Threads(); n != 3 {
		t.Fatalf("forced 3: Threads %d", n)
	}
	SetThreads(0, 0)
	if n := Threads(); n < 1 || n > MaxThreads {
		t.Fatalf("Threads %d", n)
	}
}

func TestParseMinSize(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
	}{{"64K", 64 << 10}, {"256K", 256 << 10}, {"1M", 1 << 20}, {"1G", 1 << 30}, {"1048576", 1 << 20}} {
		if n, err := ParseMinSize(tc.v); err != nil || n != tc.want {
			t.Errorf("ParseMinSize(%q) = %d, %v; want %d", tc.v, n, err, tc.want)
		}
	}
	for _, v := range []string{"", "0", "32K", "2G", "-1M", "lots"} {
		if _, err := ParseMinSize(v); err == nil || !strings.Contains(err.Error(), EnvMinSize) {
			t.Errorf("ParseMinSize(%q): %v; want an error naming %s", v, err, EnvMinSize)
		}
	}
}

// TestMinSizeEnv: BRAID_COPY_MIN sets MinSize (read once, so in a child
// process), SetThreads overrides it, and a bad value leaves the default.
func TestMinSizeEnv(t *testing.T) {
	if v := os.Getenv("PAR_TEST_MIN_CHILD"); v != "" {
		fmt.Println("min", MinSize())
		restore := SetThreads(2, 4096)
		fmt.Println("forced", MinSize())
		restore()
		return
	}
	for _, tc := range []struct {
		env  string
		want int
	}{{"512K", 512 << 10}, {"2M", 2 << 20}, {"4K", DefaultMinSize}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMinSizeEnv$")
		cmd.Env = append(os.Environ(), "PAR_TEST_MIN_CHILD=1", EnvMinSize+"="+tc.env)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s=%s: %v\n%s", EnvMinSize, tc.env, err, out)
		}
		want := fmt.Sprintf("min %d\nforced 4096\n", tc.want)
		if !strings.HasPrefix(string(out), want) {
			t.Errorf("%s=%s: the child printed %q, want %q first", EnvMinSize, tc.env, out, want)
		}
	}
}
