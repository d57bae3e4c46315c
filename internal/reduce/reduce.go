package reduce

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
)

// Kernel combines src into dst elementwise: dst[i] = dst[i] op src[i].
//
// Both buffers hold elements of the kernel's DType in host byte order. They
// must have the same length, a multiple of the element size; the kernel panics
// otherwise. Any alignment is accepted (see the package comment). dst and src
// must be the same buffer or not overlap at all. A Kernel keeps no state: it
// may be called from many goroutines at once on disjoint buffers.
type Kernel func(dst, src []byte)

// Kernel3 writes dst[i] = a[i] op b[i], a reduction fused with the copy to
// its destination. dst may be exactly a or exactly b, or overlap neither;
// other overlaps give undefined results. Lengths and alignment are as for
// Kernel.
type Kernel3 func(dst, a, b []byte)

// kernel3 is an unchecked Kernel3: lengths are equal and element multiples,
// and, unless the kernel says otherwise, the buffers are aligned.
type kernel3 func(dst, a, b []byte)

// For returns the kernel for d and op, or an error naming both if op is not
// defined on d (see dtype.Supports). For dtype.Avg it returns the Sum kernel:
// the caller divides once at the end with Divide.
func For(d dtype.DType, op dtype.Op) (Kernel, error) {
	k, err := For3(d, op)
	if err != nil {
		return nil, err
	}
	return func(dst, src []byte) { k(dst, dst, src) }, nil
}

// For3 returns the fused kernel dst = a op b for d and op, with the same
// errors as For. For dtype.Avg it returns the Sum kernel.
func For3(d dtype.DType, op dtype.Op) (Kernel3, error) {
	if err := check(d, op); err != nil {
		return nil, err
	}
	if op == dtype.Avg {
		op = dtype.Sum
	}
	return kernels()[d][op], nil
}

// Divide divides every element of buf, of floating-point type d, by n: the
// last step of dtype.Avg. Each quotient is rounded once to nearest even
// (float16 and bfloat16 are divided in float32); n = 1 leaves buf as it is.
// Any alignment is accepted. It returns an error if d is
// not a floating-point type, if n < 1, or if len(buf) is not a multiple of the
// element size.
func Divide(d dtype.DType, buf []byte, n int) error {
	if !d.IsFloat() {
		return fmt.Errorf("reduce: divide (op avg) is not supported on %v: only on floating-point types", d)
	}
	if n < 1 {
		return fmt.Errorf("reduce: divide %v buffer by %d: divisor must be at least 1", d, n)
	}
	if len(buf)%d.Size() != 0 {
		return fmt.Errorf("reduce: divide %v buffer: length %d is not a multiple of %d", d, len(buf), d.Size())
	}
	if n == 1 {
		return nil
	}
	divide(d, buf, n, useAsm)
	return nil
}

// divide divides buf by n, with the vector kernels if vector is true.
func divide(d dtype.DType, buf []byte, n int, vector bool) {
	if vector {
		buf = vectorDivide(d, buf, n)
	}
	if len(buf) == 0 {
		return
	}
	switch d {
	case dtype.Float32:
		if aligned(buf, alignOf[float32]()) {
			divideFloat(as[float32](buf), float32(n))
		} else {
			refDivide(d, buf, n)
		}
	case dtype.Float64:
		if aligned(buf, alignOf[float64]()) {
			divideFloat(as[float64](buf), float64(n))
		} else {
			refDivide(d, buf, n)
		}
	case dtype.Float16, dtype.BFloat16:
		if aligned(buf, 2) {
			divideHalf(as[uint16](buf), float32(n), d == dtype.Float16)
		} else {
			refDivide(d, buf, n)
		}
	}
}

// check returns the error For reports for an unsupported pair.
func check(d dtype.DType, op dtype.Op) error {
	switch {
	case !d.Valid() && !op.Valid():
		return fmt.Errorf("reduce: invalid dtype %v and invalid op %v", d, op)
	case !d.Valid():
		return fmt.Errorf("reduce: invalid dtype %v (op %v)", d, op)
	case !op.Valid():
		return fmt.Errorf("reduce: invalid op %v (dtype %v)", op, d)
	case !dtype.Supports(d, op):
		why := "bitwise ops are defined on integer types only"
		if op == dtype.Avg {
			why = "avg is defined on floating-point types only"
		}
		return fmt.Errorf("reduce: op %v is not supported on dtype %v: %s", op, d, why)
	}
	return nil
}

// maxDType and maxOp bound the kernel table; dtype keeps its counts private.
const (
	maxDType = 16
	maxOp    = 16
)

type table [maxDType][maxOp]Kernel3

// kernels returns the table of checked kernels, built on first use.
var kernels = sync.OnceValue(func() *table { return buildTable(useAsm) })

// buildTable wraps every supported (dtype, op) kernel with the length check
// and the alignment dispatch. With vector false it uses the portable kernels
// only; tests build both tables.
func buildTable(vector bool) *table {
	t := new(table)
	for _, d := range dtype.All() {
		for _, op := range dtype.AllOps() {
			if !dtype.Supports(d, op) || op == dtype.Avg {
				continue
			}
			t[d][op] = wrap(d, op, vector)
		}
		if dtype.Supports(d, dtype.Avg) {
			t[d][dtype.Avg] = t[d][dtype.Sum]
		}
	}
	return t
}

// wrap returns the checked kernel for a supported pair: the vector kernel
// where there is one, else the portable kernel behind an alignment test.
func wrap(d dtype.DType, op dtype.Op, vector bool) Kernel3 {
	size := d.Size()
	fast, align := portable(d, op)
	if align > 1 {
		fast = alignedOr(fast, align)
	}
	if vector {
		if v, block := vectorKernel(d, op); v != nil {
			fast = withTail(v, block, fast)
		}
	}
	return func(dst, a, b []byte) {
		if len(a) != len(dst) || len(b) != len(dst) || len(dst)%size != 0 {
			panic(fmt.Sprintf("reduce: %v %v kernel: buffer lengths dst %d, a %d, b %d must be equal multiples of %d",
				d, op, len(dst), len(a), len(b), size))
		}
		if len(dst) == 0 {
			return
		}
		fast(dst, a, b)
	}
}

// withTail runs the vector kernel v over the largest multiple of block bytes
// and the portable kernel over the rest.
func withTail(v func(dst, a, b *byte, n int), block int, tail kernel3) kernel3 {
	return func(dst, a, b []byte) {
		n := len(dst) &^ (block - 1)
		if n > 0 {
			v(&dst[0], &a[0], &b[0], n)
		}
		if n < len(dst) {
			tail(dst[n:], a[n:], b[n:])
		}
	}
}

// alignedOr runs k when all three buffers are aligned to align bytes, and
// otherwise runs it block by block on an aligned scratch copy.
func alignedOr(k kernel3, align int) kernel3 {
	return func(dst, a, b []byte) {
		if (addr(dst)|addr(a)|addr(b))&uintptr(align-1) == 0 {
			k(dst, a, b)
			return
		}
		misaligned(dst, a, b, k)
	}
}

// scratchBytes is the size of each of the two scratch blocks; a multiple of
// every element size.
const scratchBytes = 4096

var scratchPool = sync.Pool{New: func() any { return new([2 * scratchBytes / 8]uint64) }}

// misaligned runs k through an aligned scratch copy of a and b, one block at
// a time. Copying a block of a and b out before dst's block is written keeps
// the exact aliasing that Kernel3 allows working.
func misaligned(dst, a, b []byte, k kernel3) {
	p := scratchPool.Get().(*[2 * scratchBytes / 8]uint64)
	s := unsafe.Slice((*byte)(unsafe.Pointer(p)), 2*scratchBytes)
	sa, sb := s[:scratchBytes], s[scratchBytes:]
	for len(dst) > 0 {
		n := min(len(dst), scratchBytes)
		copy(sa, a[:n])
		copy(sb, b[:n])
		k(sa[:n], sa[:n], sb[:n])
		copy(dst, sa[:n])
		dst, a, b = dst[n:], a[n:], b[n:]
	}
	scratchPool.Put(p)
}

// addr returns the address of b's first byte.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// aligned reports whether b's first byte is aligned to align bytes.
func aligned(b []byte, align int) bool { return addr(b)&uintptr(align-1) == 0 }

// as reinterprets b, which must be aligned for T, as a []T.
func as[T any](b []byte) []T {
	var zero T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(zero)))
}
