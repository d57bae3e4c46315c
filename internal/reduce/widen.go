package reduce

// Widen and Narrow convert between a 16-bit floating-point type and float32,
// for callers that keep float32 accumulators (the aggregation daemon adds
// many float16 or bfloat16 operands in float32 and rounds once at the end).

// Widen writes the float32 values of src, float16 (f16 true) or bfloat16
// elements in host byte order, to dst; len(dst) must be len(src)/2. Widening
// is exact.
func Widen(dst []float32, src []byte, f16 bool) {
	if len(src) != 2*len(dst) {
		panic("reduce: Widen: length mismatch")
	}
	for len(dst) > 0 {
		n := min(len(dst), halfBlock)
		var tmp [halfBlock]uint16
		s := tmp[:n]
		for i := range s {
			s[i] = uint16(src[2*i]) | uint16(src[2*i+1])<<8
		}
		if f16 {
			widenF16(dst[:n], s)
		} else {
			widenBF16(dst[:n], s)
		}
		dst, src = dst[n:], src[2*n:]
	}
}

// Narrow rounds src to float16 (f16 true) or bfloat16, to nearest even, and
// writes the elements to dst in host byte order; len(dst) must be
// 2*len(src).
func Narrow(dst []byte, src []float32, f16 bool) {
	if len(dst) != 2*len(src) {
		panic("reduce: Narrow: length mismatch")
	}
	for len(src) > 0 {
		n := min(len(src), halfBlock)
		var tmp [halfBlock]uint16
		d := tmp[:n]
		if f16 {
			narrowF16(d, src[:n])
		} else {
			narrowBF16(d, src[:n])
		}
		for i, h := range d {
			dst[2*i], dst[2*i+1] = byte(h), byte(h>>8)
		}
		dst, src = dst[2*n:], src[n:]
	}
}
