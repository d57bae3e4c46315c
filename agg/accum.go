package agg

import (
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
)

// An accumulator holds the running sum of one part: the members' operands
// are added in member order (0, 1, 2, ...), whatever order they arrive in,
// so the sum has the same bits on every run and every member receives the
// same bits. float16 and bfloat16 operands are added in float32 and rounded
// once at the end; other types are added in their own type (integers wrap
// around, as Braid's other sums do).

// accBytes is the accumulator's size for a part of n bytes of d.
func accBytes(d dtype.DType, n int) int {
	if d == dtype.Float16 || d == dtype.BFloat16 {
		return 2 * n
	}
	return n
}

func isHalf(d dtype.DType) bool { return d == dtype.Float16 || d == dtype.BFloat16 }

func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// sumKernels caches the sum kernel per element type.
var sumKernels = func() (k [32]reduce.Kernel) {
	for _, d := range dtype.All() {
		if f, err := reduce.For(d, dtype.Sum); err == nil && int(d) < len(k) {
			k[d] = f
		}
	}
	return k
}()

// accFirst starts acc with the first member's operand src (n bytes of d).
func accFirst(d dtype.DType, acc, src []byte) {
	if isHalf(d) {
		reduce.Widen(f32s(acc[:2*len(src)]), src, d == dtype.Float16)
		return
	}
	copy(acc, src)
}

// accAdd adds src to acc.
func accAdd(d dtype.DType, acc, src []byte) {
	if !isHalf(d) {
		sumKernels[d](acc[:len(src)], src)
		return
	}
	a := f32s(acc[:2*len(src)])
	var w [512]float32
	for len(src) > 0 {
		n := min(len(w), len(src)/2)
		reduce.Widen(w[:n], src[:2*n], d == dtype.Float16)
		for i, x := range w[:n] {
			a[i] += x
		}
		a, src = a[n:], src[2*n:]
	}
}

// accResult returns the sum of a part of n bytes: acc itself, or, for the
// 16-bit types, acc rounded into out.
func accResult(d dtype.DType, acc, out []byte, n int) []byte {
	if !isHalf(d) {
		return acc[:n]
	}
	reduce.Narrow(out[:n], f32s(acc[:2*n]), d == dtype.Float16)
	return out[:n]
}
