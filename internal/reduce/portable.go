package reduce

import (
	"encoding/binary"
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
)

// The portable kernels: pure Go, unrolled by eight, with bounds checks hoisted
// out of the loop by reslicing to equal lengths and converting to array
// pointers.

// number is every element type that Go's arithmetic handles directly.
type number interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// portable returns the pure-Go kernel for a supported pair, not Avg, and the
// alignment in bytes it needs (1: none).
func portable(d dtype.DType, op dtype.Op) (kernel3, int) {
	switch op {
	case dtype.BAnd:
		return andWords, 1
	case dtype.BOr:
		return orWords, 1
	case dtype.BXor:
		return xorWords, 1
	}
	switch d {
	case dtype.Float32:
		return typed[float32](op), alignOf[float32]()
	case dtype.Float64:
		return typed[float64](op), alignOf[float64]()
	case dtype.Int32:
		return typed[int32](op), alignOf[int32]()
	case dtype.Uint32:
		return typed[uint32](op), alignOf[uint32]()
	case dtype.Int64:
		return typed[int64](op), alignOf[int64]()
	case dtype.Uint64:
		return typed[uint64](op), alignOf[uint64]()
	case dtype.Int8:
		if op == dtype.Sum {
			return addBytes, 1
		}
		return typed[int8](op), 1
	case dtype.Uint8:
		if op == dtype.Sum {
			return addBytes, 1
		}
		return typed[uint8](op), 1
	case dtype.Float16:
		return halfKernel(op, true), 2
	case dtype.BFloat16:
		return halfKernel(op, false), 2
	}
	panic("reduce: no portable kernel for " + d.String() + " " + op.String())
}

// alignOf returns the alignment Go gives T: 8 for float64 on amd64, but 4 on
// 386 and 32-bit ARM.
func alignOf[T any]() int {
	var zero T
	return int(unsafe.Alignof(zero))
}

// typed returns the loop for op on element type T.
func typed[T number](op dtype.Op) kernel3 {
	var loop func(d, a, b []T)
	switch op {
	case dtype.Sum:
		loop = sumLoop[T]
	case dtype.Prod:
		loop = prodLoop[T]
	case dtype.Min:
		loop = minLoop[T]
	case dtype.Max:
		loop = maxLoop[T]
	default:
		panic("reduce: no typed loop for op " + op.String())
	}
	return func(dst, a, b []byte) { loop(as[T](dst), as[T](a), as[T](b)) }
}

func sumLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		dd, aa, bb := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		dd[0] = aa[0] + bb[0]
		dd[1] = aa[1] + bb[1]
		dd[2] = aa[2] + bb[2]
		dd[3] = aa[3] + bb[3]
		dd[4] = aa[4] + bb[4]
		dd[5] = aa[5] + bb[5]
		dd[6] = aa[6] + bb[6]
		dd[7] = aa[7] + bb[7]
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + b[i]
	}
}

func prodLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		dd, aa, bb := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		dd[0] = aa[0] * bb[0]
		dd[1] = aa[1] * bb[1]
		dd[2] = aa[2] * bb[2]
		dd[3] = aa[3] * bb[3]
		dd[4] = aa[4] * bb[4]
		dd[5] = aa[5] * bb[5]
		dd[6] = aa[6] * bb[6]
		dd[7] = aa[7] * bb[7]
	}
	for ; i < len(d); i++ {
		d[i] = a[i] * b[i]
	}
}

func minLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		dd, aa, bb := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		dd[0] = min(aa[0], bb[0])
		dd[1] = min(aa[1], bb[1])
		dd[2] = min(aa[2], bb[2])
		dd[3] = min(aa[3], bb[3])
		dd[4] = min(aa[4], bb[4])
		dd[5] = min(aa[5], bb[5])
		dd[6] = min(aa[6], bb[6])
		dd[7] = min(aa[7], bb[7])
	}
	for ; i < len(d); i++ {
		d[i] = min(a[i], b[i])
	}
}

func maxLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		dd, aa, bb := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		dd[0] = max(aa[0], bb[0])
		dd[1] = max(aa[1], bb[1])
		dd[2] = max(aa[2], bb[2])
		dd[3] = max(aa[3], bb[3])
		dd[4] = max(aa[4], bb[4])
		dd[5] = max(aa[5], bb[5])
		dd[6] = max(aa[6], bb[6])
		dd[7] = max(aa[7], bb[7])
	}
	for ; i < len(d); i++ {
		d[i] = max(a[i], b[i])
	}
}

// Word kernels: bitwise operators act on every byte alike whatever the
// integer width, and 8-bit sums add bytes lane by lane inside a 64-bit word,
// so these run on unaligned 64-bit loads (single instructions on the usual
// targets) and need no alignment.

var ne = binary.NativeEndian

// The word loops are written out one per operator, so that the operator
// inlines.

func andWords(d, a, b []byte) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+32 <= len(d); i += 32 {
		dd, aa, bb := (*[32]byte)(d[i:]), (*[32]byte)(a[i:]), (*[32]byte)(b[i:])
		ne.PutUint64(dd[0:], ne.Uint64(aa[0:])&ne.Uint64(bb[0:]))
		ne.PutUint64(dd[8:], ne.Uint64(aa[8:])&ne.Uint64(bb[8:]))
		ne.PutUint64(dd[16:], ne.Uint64(aa[16:])&ne.Uint64(bb[16:]))
		ne.PutUint64(dd[24:], ne.Uint64(aa[24:])&ne.Uint64(bb[24:]))
	}
	for ; i < len(d); i++ {
		d[i] = a[i] & b[i]
	}
}

func orWords(d, a, b []byte) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+32 <= len(d); i += 32 {
		dd, aa, bb := (*[32]byte)(d[i:]), (*[32]byte)(a[i:]), (*[32]byte)(b[i:])
		ne.PutUint64(dd[0:], ne.Uint64(aa[0:])|ne.Uint64(bb[0:]))
		ne.PutUint64(dd[8:], ne.Uint64(aa[8:])|ne.Uint64(bb[8:]))
		ne.PutUint64(dd[16:], ne.Uint64(aa[16:])|ne.Uint64(bb[16:]))
		ne.PutUint64(dd[24:], ne.Uint64(aa[24:])|ne.Uint64(bb[24:]))
	}
	for ; i < len(d); i++ {
		d[i] = a[i] | b[i]
	}
}

func xorWords(d, a, b []byte) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+32 <= len(d); i += 32 {
		dd, aa, bb := (*[32]byte)(d[i:]), (*[32]byte)(a[i:]), (*[32]byte)(b[i:])
		ne.PutUint64(dd[0:], ne.Uint64(aa[0:])^ne.Uint64(bb[0:]))
		ne.PutUint64(dd[8:], ne.Uint64(aa[8:])^ne.Uint64(bb[8:]))
		ne.PutUint64(dd[16:], ne.Uint64(aa[16:])^ne.Uint64(bb[16:]))
		ne.PutUint64(dd[24:], ne.Uint64(aa[24:])^ne.Uint64(bb[24:]))
	}
	for ; i < len(d); i++ {
		d[i] = a[i] ^ b[i]
	}
}

// addBytes adds int8 or uint8 elements with wraparound, eight lanes to a
// word: the low seven bits of each lane add without crossing into the next
// lane, and the top bit of each lane is the xor of the operands' top bits and
// the carry into it.
func addBytes(d, a, b []byte) {
	const hi = 0x8080808080808080
	add := func(x, y uint64) uint64 { return ((x &^ hi) + (y &^ hi)) ^ ((x ^ y) & hi) }
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+32 <= len(d); i += 32 {
		dd, aa, bb := (*[32]byte)(d[i:]), (*[32]byte)(a[i:]), (*[32]byte)(b[i:])
		ne.PutUint64(dd[0:], add(ne.Uint64(aa[0:]), ne.Uint64(bb[0:])))
		ne.PutUint64(dd[8:], add(ne.Uint64(aa[8:]), ne.Uint64(bb[8:])))
		ne.PutUint64(dd[16:], add(ne.Uint64(aa[16:]), ne.Uint64(bb[16:])))
		ne.PutUint64(dd[24:], add(ne.Uint64(aa[24:]), ne.Uint64(bb[24:])))
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + b[i]
	}
}

// divideFloat divides every element of d by n.
func divideFloat[T float32 | float64](d []T, n T) {
	i := 0
	for ; i+8 <= len(d); i += 8 {
		dd := (*[8]T)(d[i:])
		dd[0] /= n
		dd[1] /= n
		dd[2] /= n
		dd[3] /= n
		dd[4] /= n
		dd[5] /= n
		dd[6] /= n
		dd[7] /= n
	}
	for ; i < len(d); i++ {
		d[i] /= n
	}
}
