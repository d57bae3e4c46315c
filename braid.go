package braid

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
)

// DType is the element type of a buffer. Its zero value is invalid. It
// has the methods String (the lower-case name, "float32"), Size (bytes
// per element), IsFloat and Valid.
type DType = dtype.DType

// Op is a reduction operator. Its zero value is invalid. It has the
// methods String (the lower-case name, "sum") and Valid.
type Op = dtype.Op

// The element types; a buffer's Go type gives its DType (see Raw for
// untyped memory).
const (
	Float32  DType = 1  // IEEE 754 binary32, []float32
	Float64  DType = 2  // IEEE 754 binary64, []float64
	Float16  DType = 3  // IEEE 754 binary16, []Half
	BFloat16 DType = 4  // bfloat16 (float32's upper 16 bits), []BF16
	Int8     DType = 5  // []int8
	Uint8    DType = 6  // []uint8 (and []byte)
	Int32    DType = 7  // []int32
	Uint32   DType = 8  // []uint32
	Int64    DType = 9  // []int64
	Uint64   DType = 10 // []uint64
)

// The reduction operators. Every rank gets the same bits. Avg is defined
// for floating-point types only and the bitwise operators for integer
// types only; a call that combines others fails with InvalidArgument.
const (
	Sum  Op = 1 // the sum
	Prod Op = 2 // the product
	Min  Op = 3 // the least value
	Max  Op = 4 // the greatest value
	Avg  Op = 5 // the sum divided by the number of ranks (floating point)
	BAnd Op = 6 // bitwise and (integers)
	BOr  Op = 7 // bitwise or (integers)
	BXor Op = 8 // bitwise exclusive or (integers)
)

// Half is an IEEE 754 binary16 value stored as its bits; a []Half buffer has
// DType Float16.
type Half uint16

// BF16 is a bfloat16 value stored as its bits; a []BF16 buffer has DType
// BFloat16.
type BF16 uint16

// Raw is untyped memory with an explicit element type. Use it for memory
// that is not a Go slice of a numeric type.
type Raw struct {
	Bytes []byte
	Type  DType
}

// view returns the bytes and element type of a buffer argument. nil (the
// untyped nil interface) gives ok=false.
func view(buf any) (b []byte, d DType, err error) {
	switch v := buf.(type) {
	case []float32:
		return bytesOf(v), Float32, nil
	case []float64:
		return bytesOf(v), Float64, nil
	case []Half:
		return bytesOf(v), Float16, nil
	case []BF16:
		return bytesOf(v), BFloat16, nil
	case []int8:
		return bytesOf(v), Int8, nil
	case []uint8:
		return v, Uint8, nil
	case []int32:
		return bytesOf(v), Int32, nil
	case []uint32:
		return bytesOf(v), Uint32, nil
	case []int64:
		return bytesOf(v), Int64, nil
	case []uint64:
		return bytesOf(v), Uint64, nil
	case Raw:
		if !v.Type.Valid() {
			return nil, 0, fmt.Errorf("unknown dtype %v", v.Type)
		}
		if len(v.Bytes)%v.Type.Size() != 0 {
			return nil, 0, fmt.Errorf("raw buffer of %d bytes is not a whole number of %v elements", len(v.Bytes), v.Type)
		}
		return v.Bytes, v.Type, nil
	case Device:
		// Device buffers never reach host paths: the collectives route them
		// to the device communicator (deviceCall) before they look at
		// bytes. Point-to-point and the rest get here.
		return nil, 0, fmt.Errorf("device buffer (%d %v elements at %#x): this call takes host memory; collectives on device buffers run through a DeviceComm (Comm.NewDeviceComm)", v.Count, v.Type, uint64(v.Ptr))
	case nil:
		return nil, 0, fmt.Errorf("nil buffer")
	}
	// reflect.TypeOf, unlike fmt's %T, does not make buf escape: a
	// slice converted to any at the call site can stay on the stack.
	return nil, 0, fmt.Errorf("unsupported buffer type %s (want a slice of float32, float64, Half, BF16, int8, uint8, int32, uint32, int64, uint64, or braid.Raw)", reflect.TypeOf(buf))
}

func bytesOf[T any](s []T) []byte {
	if cap(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}
