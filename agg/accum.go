package agg

import (
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
)

// An accumulator holds the running reduction of one part: the members'
// operands are combined in member order (0, 1, 2, ...), whatever order they
// arrive in, so the result has the same bits on every run and every member
// receives the same bits. float16 and bfloat16 operands are combined in
// float32 and rounded once at the end; other types in their own type with
// Braid's kernels (integer sums wrap around).

func isHalf(d dtype.DType) bool { return d == dtype.Float16 || d == dtype.BFloat16 }

func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// kernels caches the kernel per element type and operator.
var kernels = func() (k [16][16]reduce.Kernel) {
	for _, d := range dtype.All() {
		for _, op := range dtype.AllOps() {
			if f, err := reduce.For(d, op); err == nil && int(d) < 16 && int(op) < 16 {
				k[d][op] = f
			}
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

// accAdd combines src into acc.
func accAdd(d dtype.DType, op dtype.Op, acc, src []byte) {
	if !isHalf(d) {
		kernels[d][op](acc[:len(src)], src)
		return
	}
	a := f32s(acc[:2*len(src)])
	var w [512]float32
	for len(src) > 0 {
		n := min(len(w), len(src)/2)
		reduce.Widen(w[:n], src[:2*n], d == dtype.Float16)
		switch op {
		case dtype.Sum:
			for i, x := range w[:n] {
				a[i] += x
			}
		case dtype.Prod:
			for i, x := range w[:n] {
				a[i] *= x
			}
		case dtype.Min:
			for i, x := range w[:n] {
				a[i] = min(a[i], x)
			}
		case dtype.Max:
			for i, x := range w[:n] {
				a[i] = max(a[i], x)
			}
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
