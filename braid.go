package braid

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
)

// DType is the element type of a buffer.
type DType = dtype.DType

// Op is a reduction operator.
type Op = dtype.Op

// The element types.
const (
	Float32  = dtype.Float32
	Float64  = dtype.Float64
	Float16  = dtype.Float16
	BFloat16 = dtype.BFloat16
	Int8     = dtype.Int8
	Uint8    = dtype.Uint8
	Int32    = dtype.Int32
	Uint32   = dtype.Uint32
	Int64    = dtype.Int64
	Uint64   = dtype.Uint64
)

// The reduction operators. Avg is defined for floating-point types and the
// bitwise operators for integer types.
const (
	Sum  = dtype.Sum
	Prod = dtype.Prod
	Min  = dtype.Min
	Max  = dtype.Max
	Avg  = dtype.Avg
	BAnd = dtype.BAnd
	BOr  = dtype.BOr
	BXor = dtype.BXor
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
