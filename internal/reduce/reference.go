package reduce

import (
	"fmt"
	"math"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/x448/float16"
)

// Reference returns the specification of the kernel For returns for d and
// op: one element at a time, decoded from bytes, combined with Go's own
// operators and built-in min and max, and encoded back. It is slow and meant
// for tests; its errors are those of For.
func Reference(d dtype.DType, op dtype.Op) (Kernel, error) {
	if err := check(d, op); err != nil {
		return nil, err
	}
	if op == dtype.Avg {
		op = dtype.Sum
	}
	k := reference3(d, op)
	size := d.Size()
	return func(dst, src []byte) {
		if len(src) != len(dst) || len(dst)%size != 0 {
			panic(fmt.Sprintf("reduce: reference %v %v kernel: buffer lengths dst %d, src %d must be equal multiples of %d",
				d, op, len(dst), len(src), size))
		}
		k(dst, dst, src)
	}, nil
}

// reference3 returns the reference loop dst = a op b for a supported pair.
func reference3(d dtype.DType, op dtype.Op) kernel3 {
	switch d {
	case dtype.Float32:
		return refLoop(4, getF32, putF32, floatOp[float32](op))
	case dtype.Float64:
		return refLoop(8, getF64, putF64, floatOp[float64](op))
	case dtype.Float16:
		return refLoop(2, getF16, putF16, floatOp[float32](op))
	case dtype.BFloat16:
		return refLoop(2, getBF16, putBF16, floatOp[float32](op))
	case dtype.Int8:
		return refLoop(1, func(b []byte) int8 { return int8(b[0]) }, func(b []byte, v int8) { b[0] = byte(v) }, intOp[int8](op))
	case dtype.Uint8:
		return refLoop(1, func(b []byte) uint8 { return b[0] }, func(b []byte, v uint8) { b[0] = v }, intOp[uint8](op))
	case dtype.Int32:
		return refLoop(4, func(b []byte) int32 { return int32(ne.Uint32(b)) }, func(b []byte, v int32) { ne.PutUint32(b, uint32(v)) }, intOp[int32](op))
	case dtype.Uint32:
		return refLoop(4, ne.Uint32, ne.PutUint32, intOp[uint32](op))
	case dtype.Int64:
		return refLoop(8, func(b []byte) int64 { return int64(ne.Uint64(b)) }, func(b []byte, v int64) { ne.PutUint64(b, uint64(v)) }, intOp[int64](op))
	case dtype.Uint64:
		return refLoop(8, ne.Uint64, ne.PutUint64, intOp[uint64](op))
	}
	panic("reduce: no reference kernel for " + d.String())
}

// refLoop applies f to each element of a and b in turn.
func refLoop[T any](size int, get func([]byte) T, put func([]byte, T), f func(x, y T) T) kernel3 {
	return func(dst, a, b []byte) {
		for i := 0; i < len(dst); i += size {
			put(dst[i:], f(get(a[i:]), get(b[i:])))
		}
	}
}

func floatOp[T float32 | float64](op dtype.Op) func(x, y T) T {
	switch op {
	case dtype.Sum:
		return func(x, y T) T { return x + y }
	case dtype.Prod:
		return func(x, y T) T { return x * y }
	case dtype.Min:
		return func(x, y T) T { return min(x, y) }
	case dtype.Max:
		return func(x, y T) T { return max(x, y) }
	}
	panic("reduce: no float reference for op " + op.String())
}

func intOp[T int8 | uint8 | int32 | uint32 | int64 | uint64](op dtype.Op) func(x, y T) T {
	switch op {
	case dtype.Sum:
		return func(x, y T) T { return x + y }
	case dtype.Prod:
		return func(x, y T) T { return x * y }
	case dtype.Min:
		return func(x, y T) T { return min(x, y) }
	case dtype.Max:
		return func(x, y T) T { return max(x, y) }
	case dtype.BAnd:
		return func(x, y T) T { return x & y }
	case dtype.BOr:
		return func(x, y T) T { return x | y }
	case dtype.BXor:
		return func(x, y T) T { return x ^ y }
	}
	panic("reduce: no integer reference for op " + op.String())
}

// refDivide is the reference for Divide on a floating-point d with n >= 1.
func refDivide(d dtype.DType, buf []byte, n int) {
	switch d {
	case dtype.Float32:
		for i := 0; i < len(buf); i += 4 {
			putF32(buf[i:], getF32(buf[i:])/float32(n))
		}
	case dtype.Float64:
		for i := 0; i < len(buf); i += 8 {
			putF64(buf[i:], getF64(buf[i:])/float64(n))
		}
	case dtype.Float16:
		for i := 0; i < len(buf); i += 2 {
			putF16(buf[i:], getF16(buf[i:])/float32(n))
		}
	case dtype.BFloat16:
		for i := 0; i < len(buf); i += 2 {
			putBF16(buf[i:], getBF16(buf[i:])/float32(n))
		}
	}
}

func getF32(b []byte) float32    { return math.Float32frombits(ne.Uint32(b)) }
func putF32(b []byte, v float32) { ne.PutUint32(b, math.Float32bits(v)) }
func getF64(b []byte) float64    { return math.Float64frombits(ne.Uint64(b)) }
func putF64(b []byte, v float64) { ne.PutUint64(b, math.Float64bits(v)) }

// getF16 and putF16 convert with github.com/x448/float16, which rounds to
// nearest even and was checked by its author on all 2^32 float32 inputs.
func getF16(b []byte) float32    { return float16.Frombits(ne.Uint16(b)).Float32() }
func putF16(b []byte, v float32) { ne.PutUint16(b, float16.Fromfloat32(v).Bits()) }

// getBF16 widens a bfloat16: its bits are the top half of a float32.
func getBF16(b []byte) float32 { return math.Float32frombits(uint32(ne.Uint16(b)) << 16) }

// putBF16 rounds v to bfloat16, written out step by step: keep the top 16
// bits and round up when the dropped 16 bits are more than half, or exactly
// half and the kept part is odd. A NaN keeps its sign and the top of its
// payload and is made quiet, so that it cannot turn into an infinity.
func putBF16(b []byte, v float32) {
	u := math.Float32bits(v)
	upper, lower := u>>16, u&0xffff
	switch {
	case v != v:
		upper |= 0x0040
	case lower > 0x8000, lower == 0x8000 && upper&1 == 1:
		upper++ // a carry into the exponent rounds up to the next binade or infinity
	}
	ne.PutUint16(b, uint16(upper))
}
