package reduce

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
)

var benchSizes = []int{4 << 10, 1 << 20, 64 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

// benchBuffers returns dst and two sources holding the same ordinary values
// with opposite signs, so that adding them in turn keeps dst bounded.
func benchBuffers(d dtype.DType, n int) (dst []byte, src [2][]byte) {
	r := rand.New(rand.NewPCG(1, 1))
	dst = make([]byte, n)
	src = [2][]byte{make([]byte, n), make([]byte, n)}
	for i := 0; i < n; i += d.Size() {
		f := float32(r.NormFloat64())
		switch d {
		case dtype.Float32:
			putF32(dst[i:], f)
			putF32(src[0][i:], f)
		case dtype.Float64:
			putF64(dst[i:], float64(f))
			putF64(src[0][i:], float64(f))
		case dtype.Float16:
			putF16(dst[i:], f)
			putF16(src[0][i:], f)
		case dtype.BFloat16:
			putBF16(dst[i:], f)
			putBF16(src[0][i:], f)
		default:
			for j := range d.Size() {
				dst[i+j] = byte(r.Uint32())
				src[0][i+j] = byte(r.Uint32())
			}
		}
		copy(src[1][i:i+d.Size()], src[0][i:i+d.Size()])
		src[1][i+d.Size()-1] ^= 0x80 // flip the sign
	}
	return dst, src
}

// BenchmarkSum measures dst += src, the executor's reduce step, in bytes of
// dst per second, for the vector and the portable kernels.
func BenchmarkSum(b *testing.B) {
	for _, d := range []dtype.DType{dtype.Float32, dtype.Float64, dtype.Float16, dtype.BFloat16, dtype.Int32} {
		for _, n := range benchSizes {
			for name, tab := range tables() {
				b.Run(fmt.Sprintf("%v/%s/%s", d, sizeName(n), name), func(b *testing.B) {
					dst, src := benchBuffers(d, n)
					k := tab[d][dtype.Sum]
					b.SetBytes(int64(n))
					i := 0
					for b.Loop() {
						k(dst, dst, src[i&1])
						i++
					}
				})
			}
		}
	}
}

// BenchmarkCopy is the yardstick: copy moves two streams where a reduction
// moves three.
func BenchmarkCopy(b *testing.B) {
	for _, n := range benchSizes {
		dst, src := make([]byte, n), make([]byte, n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

func BenchmarkDivide(b *testing.B) {
	for _, d := range []dtype.DType{dtype.Float32, dtype.Float16, dtype.BFloat16} {
		b.Run(d.String(), func(b *testing.B) {
			buf, _ := benchBuffers(d, 1<<20)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := Divide(d, buf, 3); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
