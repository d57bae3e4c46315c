package par

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/braid-ccl/braid/internal/size"
)

// EnvStreamMin is the environment variable that sets the least bytes of a
// collective's output that CopyOut writes with non-temporal stores (a size
// such as 8M, or "off"); StreamMin gives the default. ParseStreamMin
// checks it.
const EnvStreamMin = "BRAID_STREAM_MIN"

// ParseStreamMin parses a value of EnvStreamMin: a size from 64 KiB, or
// "off" (never: returned as -1).
func ParseStreamMin(v string) (int, error) {
	if v == "off" {
		return -1, nil
	}
	n, err := size.Parse(v)
	if err != nil || n < 64<<10 || n > 1<<40 {
		return 0, fmt.Errorf("%s=%q: want a size from 64K, the least bytes of a collective's output written past the caches, or off", EnvStreamMin, v)
	}
	return int(n), nil
}

var streamMin = sync.OnceValue(func() int {
	if v := os.Getenv(EnvStreamMin); v != "" {
		if n, err := ParseStreamMin(v); err == nil {
			return n
		}
	}
	return defaultStreamMin(lastCacheShare("/sys/devices/system/cpu/cpu0/cache"))
})

// StreamMin returns the least bytes of a collective's output that CopyOut
// writes with non-temporal stores, or -1 for never: EnvStreamMin's value,
// else three quarters of one CPU's share of the last-level cache (as
// glibc's memcpy chooses for its own non-temporal stores), at least
// 1 MiB (where Go's copy starts to use them within one copy), or 8 MiB
// where the cache cannot be read.
//
// An output that large is not in the caches of the rank that reads it
// next anyway, and writing it past them spares the read of every line
// that an ordinary store makes first. On the 16-core node (300 MiB of L3,
// so 14 MiB here), 16 goroutines copying an allgather's blocks in 512 KiB
// chunks wrote 122–130 GB/s with non-temporal stores against 54–61 with
// copy at 4 MiB blocks, 111–134 against 58–102 at 1 MiB, and 8 goroutines
// 108–116 against 36–49 at 8 MiB (BenchmarkGather, session 25).
func StreamMin() int {
	if m := forcedStream.Load(); m != 0 {
		return int(m)
	}
	return streamMin()
}

var forcedStream atomic.Int64 // SetStreamMin's value; 0: none

// SetStreamMin makes StreamMin return n (-1: never; 0: back to the
// default) and returns a function that restores the previous setting. For
// tests and benchmarks.
func SetStreamMin(n int) (restore func()) {
	if n < -1 {
		panic(fmt.Sprintf("par.SetStreamMin(%d): want -1, 0 or a size", n))
	}
	p := forcedStream.Swap(int64(n))
	return func() { forcedStream.Store(p) }
}

func defaultStreamMin(share int) int {
	if share <= 0 {
		return 8 << 20
	}
	return max(1<<20, share/4*3)
}

// lastCacheShare returns the bytes of the highest-level data cache under
// dir (sysfs's cpuN/cache) divided by the CPUs that share it, or 0.
func lastCacheShare(dir string) int {
	ents, _ := filepath.Glob(filepath.Join(dir, "index*"))
	best, bytes, cpus := 0, 0, 0
	read := func(d, name string) string {
		b, _ := os.ReadFile(filepath.Join(d, name))
		return strings.TrimSpace(string(b))
	}
	for _, d := range ents {
		if read(d, "type") == "Instruction" {
			continue
		}
		level, err := strconv.Atoi(read(d, "level"))
		if err != nil || level <= best {
			continue
		}
		n, err := size.Parse(read(d, "size"))
		k := countCPUs(read(d, "shared_cpu_list"))
		if err != nil || n <= 0 || k <= 0 {
			continue
		}
		best, bytes, cpus = level, int(n), k
	}
	if cpus == 0 {
		return 0
	}
	return bytes / cpus
}

// countCPUs counts a Linux CPU list ("0-15,32-47"), or returns 0. (Package
// topo parses these lists; par stays below it.)
func countCPUs(list string) int {
	n := 0
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || b < a {
			return 0
		}
		n += b - a + 1
	}
	return n
}

// CopyOut copies src to dst, a piece of a collective's output of total
// bytes: as CopyStream does when total is at least StreamMin, else as
// Copy does. Every piece of one output is written the same way.
func CopyOut(dst, src []byte, total int) int {
	if m := StreamMin(); m > 0 && total >= m {
		return CopyStream(dst, src)
	}
	return Copy(dst, src)
}
