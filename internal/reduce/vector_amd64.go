//go:build amd64 && !race && !purego

package reduce

import (
	"github.com/braid-ccl/braid/internal/dtype"
	"golang.org/x/sys/cpu"
)

// useAsm reports whether the AVX2 kernels of vector_amd64.s may run here.
// They are left out of race-detector builds, which would not see their
// memory accesses, and of builds with the purego tag.
var useAsm = cpu.X86.HasAVX2

// vectorKernel returns the assembly kernel for a supported pair (not Avg)
// and its block size in bytes, or nil where there is none or the CPU lacks
// the instructions.
func vectorKernel(d dtype.DType, op dtype.Op) (func(dst, a, b *byte, n int), int) {
	if !cpu.X86.HasAVX2 {
		return nil, 0
	}
	switch op {
	case dtype.BAnd:
		return and256, 128
	case dtype.BOr:
		return or256, 128
	case dtype.BXor:
		return xor256, 128
	}
	type key struct {
		d  dtype.DType
		op dtype.Op
	}
	k := map[key]func(dst, a, b *byte, n int){
		{dtype.Float32, dtype.Sum}:  addF32,
		{dtype.Float32, dtype.Prod}: mulF32,
		{dtype.Float32, dtype.Min}:  minF32,
		{dtype.Float32, dtype.Max}:  maxF32,
		{dtype.Float64, dtype.Sum}:  addF64,
		{dtype.Float64, dtype.Prod}: mulF64,
		{dtype.Float64, dtype.Min}:  minF64,
		{dtype.Float64, dtype.Max}:  maxF64,
		{dtype.Int8, dtype.Sum}:     add8,
		{dtype.Uint8, dtype.Sum}:    add8,
		{dtype.Int32, dtype.Sum}:    add32,
		{dtype.Uint32, dtype.Sum}:   add32,
		{dtype.Int64, dtype.Sum}:    add64,
		{dtype.Uint64, dtype.Sum}:   add64,
	}[key{d, op}]
	if k != nil {
		return k, 128
	}
	switch d {
	case dtype.Float16:
		if !cpu.X86.HasF16C {
			return nil, 0
		}
		k = map[dtype.Op]func(dst, a, b *byte, n int){
			dtype.Sum: addF16, dtype.Prod: mulF16, dtype.Min: minF16, dtype.Max: maxF16,
		}[op]
	case dtype.BFloat16:
		k = map[dtype.Op]func(dst, a, b *byte, n int){
			dtype.Sum: addBF16, dtype.Prod: mulBF16, dtype.Min: minBF16, dtype.Max: maxBF16,
		}[op]
	}
	if k != nil {
		return k, 64
	}
	return nil, 0
}

// The kernels of vector_amd64.s: dst = a op b over n bytes, n > 0 a multiple
// of the block size.

//go:noescape
func addF32(dst, a, b *byte, n int)

//go:noescape
func addF64(dst, a, b *byte, n int)

//go:noescape
func mulF32(dst, a, b *byte, n int)

//go:noescape
func mulF64(dst, a, b *byte, n int)

//go:noescape
func minF32(dst, a, b *byte, n int)

//go:noescape
func maxF32(dst, a, b *byte, n int)

//go:noescape
func minF64(dst, a, b *byte, n int)

//go:noescape
func maxF64(dst, a, b *byte, n int)

//go:noescape
func add8(dst, a, b *byte, n int)

//go:noescape
func add32(dst, a, b *byte, n int)

//go:noescape
func add64(dst, a, b *byte, n int)

//go:noescape
func and256(dst, a, b *byte, n int)

//go:noescape
func or256(dst, a, b *byte, n int)

//go:noescape
func xor256(dst, a, b *byte, n int)

//go:noescape
func addF16(dst, a, b *byte, n int)

//go:noescape
func mulF16(dst, a, b *byte, n int)

//go:noescape
func minF16(dst, a, b *byte, n int)

//go:noescape
func maxF16(dst, a, b *byte, n int)

//go:noescape
func addBF16(dst, a, b *byte, n int)

//go:noescape
func mulBF16(dst, a, b *byte, n int)

//go:noescape
func minBF16(dst, a, b *byte, n int)

//go:noescape
func maxBF16(dst, a, b *byte, n int)

// vectorDivide divides the longest prefix of buf that it can by n, and
// returns the rest for the portable code.
func vectorDivide(d dtype.DType, buf []byte, n int) []byte {
	if !cpu.X86.HasAVX2 {
		return buf
	}
	block := 128
	if d.Size() == 2 {
		block = 64
	}
	m := len(buf) &^ (block - 1)
	if m == 0 {
		return buf
	}
	switch d {
	case dtype.Float32:
		divF32(&buf[0], m, float32(n))
	case dtype.Float64:
		divF64(&buf[0], m, float64(n))
	case dtype.Float16:
		if !cpu.X86.HasF16C {
			return buf
		}
		divF16(&buf[0], m, float32(n))
	case dtype.BFloat16:
		divBF16(&buf[0], m, float32(n))
	default:
		return buf
	}
	return buf[m:]
}

//go:noescape
func divF32(buf *byte, n int, q float32)

//go:noescape
func divF64(buf *byte, n int, q float64)

//go:noescape
func divF16(buf *byte, n int, q float32)

//go:noescape
func divBF16(buf *byte, n int, q float32)
