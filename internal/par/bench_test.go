package par

import (
	"fmt"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
)

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dM", n>>20)
	}
	return fmt.Sprintf("%dK", n>>10)
}

// BenchmarkCopy: par.Copy by threads, in bytes copied per second. A
// threshold of 1 byte makes every size split, to find the break-even.
func BenchmarkCopy(b *testing.B) {
	for _, n := range []int{64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20} {
		src, dst := make([]byte, n), make([]byte, n)
		for i := range src {
			src[i] = byte(i)
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", sizeName(n), threads), func(b *testing.B) {
				defer SetThreads(threads, 1)()
				b.SetBytes(int64(n))
				for b.Loop() {
					Copy(dst, src)
				}
			})
		}
	}
}

// kernelTask is dst = dst + src over float32, the shape of shmcoll's
// combine and the executor's reduce step.
type kernelTask struct {
	k        reduce.Kernel
	dst, src []byte
}

func (t *kernelTask) Piece(lo, hi int) { t.k(t.dst[lo:hi], t.src[lo:hi]) }

// BenchmarkSum: a float32 sum by threads, in bytes of dst per second.
func BenchmarkSum(b *testing.B) {
	k, err := reduce.For(dtype.Float32, dtype.Sum)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20} {
		t := &kernelTask{k: k, dst: make([]byte, n), src: make([]byte, n)}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", sizeName(n), threads), func(b *testing.B) {
				defer SetThreads(threads, 1)()
				b.SetBytes(int64(n))
				for b.Loop() {
					Run(n, 4, t)
				}
			})
		}
	}
}

// BenchmarkHandoff is the cost of a split call that does almost nothing:
// posting to a helper, its pieces, and the wait for it.
func BenchmarkHandoff(b *testing.B) {
	t := &kernelTask{k: func(dst, src []byte) {}, dst: make([]byte, 1<<10), src: make([]byte, 1<<10)}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			defer SetThreads(threads, 64)()
			for b.Loop() {
				Run(1<<10, 1, t)
			}
		})
	}
}
