package dtype

import (
	"fmt"
	"strings"
)

// DType is the element type of a buffer.
type DType uint8

// The element types. The zero value is invalid, so that a forgotten field is an
// error rather than a silent float32.
const (
	Invalid DType = iota
	Float32
	Float64
	Float16
	BFloat16
	Int8
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	numDTypes
)

var dtypeNames = [...]string{
	Invalid:  "invalid",
	Float32:  "float32",
	Float64:  "float64",
	Float16:  "float16",
	BFloat16: "bfloat16",
	Int8:     "int8",
	Uint8:    "uint8",
	Int32:    "int32",
	Uint32:   "uint32",
	Int64:    "int64",
	Uint64:   "uint64",
}

var dtypeSizes = [...]int{
	Float32: 4, Float64: 8, Float16: 2, BFloat16: 2,
	Int8: 1, Uint8: 1, Int32: 4, Uint32: 4, Int64: 8, Uint64: 8,
}

// All lists every valid DType, in declaration order.
func All() []DType {
	out := make([]DType, 0, numDTypes-1)
	for d := Float32; d < numDTypes; d++ {
		out = append(out, d)
	}
	return out
}

// Valid reports whether d is one of the defined element types.
func (d DType) Valid() bool { return d > Invalid && d < numDTypes }

// Size returns the size of one element in bytes, or 0 for an invalid DType.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float64 || d == Float16 || d == BFloat16
}

// String returns the lower-case name of d ("float32"), or "dtype(N)" when d is
// not valid.
func (d DType) String() string {
	if d.Valid() {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType returns the DType named s. It accepts the names String returns and
// the usual short forms (f32, fp16, bf16, i32, u8, ...).
func ParseDType(s string) (DType, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "f32", "fp32", "float":
		return Float32, nil
	case "f64", "fp64", "double":
		return Float64, nil
	case "f16", "fp16", "half":
		return Float16, nil
	case "bf16":
		return BFloat16, nil
	case "i8":
		return Int8, nil
	case "u8", "byte":
		return Uint8, nil
	case "i32", "int":
		return Int32, nil
	case "u32":
		return Uint32, nil
	case "i64":
		return Int64, nil
	case "u64":
		return Uint64, nil
	}
	for d := Float32; d < numDTypes; d++ {
		if dtypeNames[d] == s {
			return d, nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want one of %s)", s, strings.Join(dtypeNames[1:], ", "))
}

// Op is a reduction operator.
type Op uint8

// The reduction operators. The zero value is invalid.
const (
	InvalidOp Op = iota
	Sum
	Prod
	Min
	Max
	Avg
	BAnd
	BOr
	BXor
	numOps
)

var opNames = [...]string{
	InvalidOp: "invalid",
	Sum:       "sum",
	Prod:      "prod",
	Min:       "min",
	Max:       "max",
	Avg:       "avg",
	BAnd:      "band",
	BOr:       "bor",
	BXor:      "bxor",
}

// AllOps lists every valid Op, in declaration order.
func AllOps() []Op {
	out := make([]Op, 0, numOps-1)
	for o := Sum; o < numOps; o++ {
		out = append(out, o)
	}
	return out
}

// Valid reports whether o is one of the defined operators.
func (o Op) Valid() bool { return o > InvalidOp && o < numOps }

// String returns the lower-case name of o ("sum").
func (o Op) String() string {
	if o.Valid() {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// ParseOp returns the Op named s.
func ParseOp(s string) (Op, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for o := Sum; o < numOps; o++ {
		if opNames[o] == s {
			return o, nil
		}
	}
	return InvalidOp, fmt.Errorf("unknown op %q (want one of %s)", s, strings.Join(opNames[1:], ", "))
}

// Supports reports whether op is defined on d: avg only on floating point, the
// bitwise operators only on integers; sum, prod, min and max on everything.
func Supports(d DType, o Op) bool {
	if !d.Valid() || !o.Valid() {
		return false
	}
	switch o {
	case Avg:
		return d.IsFloat()
	case BAnd, BOr, BXor:
		return !d.IsFloat()
	}
	return true
}
