package reduce

import (
	"math"
	"sync"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/x448/float16"
)

// The 16-bit floating-point types are reduced in float32: a block of each
// operand is widened into a float32 array on the stack, the float32 loop runs
// on it, and the result is rounded back to nearest even. Both conversions are
// exact where they must be: widening always is, and narrowing is the one
// rounding step.

// halfBlock is how many elements are widened at a time (1 KiB of float32 per
// operand on the stack).
const halfBlock = 256

// halfKernel returns the portable kernel for op (not Avg) on float16 (f16
// true) or bfloat16. It needs 2-byte alignment.
func halfKernel(op dtype.Op, f16 bool) kernel3 {
	return func(dst, a, b []byte) {
		d, x, y := as[uint16](dst), as[uint16](a), as[uint16](b)
		var fa, fb [halfBlock]float32
		for len(d) > 0 {
			n := min(len(d), halfBlock)
			wa, wb := fa[:n], fb[:n]
			if f16 {
				widenF16(wa, x)
				widenF16(wb, y)
			} else {
				widenBF16(wa, x)
				widenBF16(wb, y)
			}
			float32Op(op, wa, wa, wb)
			if f16 {
				narrowF16(d, wa)
			} else {
				narrowBF16(d, wa)
			}
			d, x, y = d[n:], x[n:], y[n:]
		}
	}
}

// float32Op runs the float32 loop for op. The switch calls each loop
// directly, so that the stack arrays of halfKernel do not escape.
func float32Op(op dtype.Op, d, a, b []float32) {
	switch op {
	case dtype.Sum:
		sumLoop(d, a, b)
	case dtype.Prod:
		prodLoop(d, a, b)
	case dtype.Min:
		minLoop(d, a, b)
	case dtype.Max:
		maxLoop(d, a, b)
	default:
		panic("reduce: no float32 loop for op " + op.String())
	}
}

// divideHalf implements Divide for float16 (f16 true) and bfloat16 on a
// 2-byte-aligned buffer.
func divideHalf(buf []uint16, n float32, f16 bool) {
	var x [halfBlock]float32
	for len(buf) > 0 {
		m := min(len(buf), halfBlock)
		w := x[:m]
		if f16 {
			widenF16(w, buf)
			divideFloat(w, n)
			narrowF16(buf, w)
		} else {
			widenBF16(w, buf)
			divideFloat(w, n)
			narrowBF16(buf, w)
		}
		buf = buf[m:]
	}
}

// f16Table maps every float16 bit pattern to its float32 value (256 KiB),
// built on first use from the reference conversion.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	t := new([1 << 16]float32)
	for i := range t {
		t[i] = float16.Frombits(uint16(i)).Float32()
	}
	return t
})

// widenF16 converts the first len(d) float16 values of s to float32.
func widenF16(d []float32, s []uint16) {
	t := f16Table()
	s = s[:len(d)]
	for i, h := range s {
		d[i] = t[h]
	}
}

// widenBF16 converts the first len(d) bfloat16 values of s to float32: a
// bfloat16 is the top half of a float32.
func widenBF16(d []float32, s []uint16) {
	s = s[:len(d)]
	for i, h := range s {
		d[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// narrowF16 rounds the float32 values of s to float16 into d. Results in
// float16's normal range are rounded inline; zeros, subnormals, overflow,
// infinities and NaNs go to the reference conversion.
func narrowF16(d []uint16, s []float32) {
	d = d[:len(s)]
	for i, f := range s {
		u := math.Float32bits(f)
		x := u & 0x7fffffff
		// Rebias the exponent from 127 to 15 and round the 13 dropped bits to
		// nearest even: add 0xfff, plus one if the kept part is odd. A carry
		// out of the significand bumps the exponent, up to infinity.
		h := uint16(u>>16)&0x8000 | uint16((x+0xfff+(x>>13)&1-(127-15)<<23)>>13)
		if x-(127-14)<<23 >= 30<<23 { // not in [2^-14, 2^16): not a normal float16 before rounding
			h = float16.Fromfloat32(f).Bits()
		}
		d[i] = h
	}
}

// narrowBF16 rounds the float32 values of s to bfloat16 into d.
func narrowBF16(d []uint16, s []float32) {
	d = d[:len(s)]
	for i, f := range s {
		d[i] = bf16FromFloat32(f)
	}
}

// bf16FromFloat32 rounds f to the nearest bfloat16, ties to even. A NaN stays
// a NaN, quiet, with its sign and the top of its payload.
func bf16FromFloat32(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}
