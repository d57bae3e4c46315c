package dtype_test

import (
	"strings"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
)

func TestSize(t *testing.T) {
	want := map[dtype.DType]int{
		dtype.Float32: 4, dtype.Float64: 8, dtype.Float16: 2, dtype.BFloat16: 2,
		dtype.Int8: 1, dtype.Uint8: 1, dtype.Int32: 4, dtype.Uint32: 4, dtype.Int64: 8, dtype.Uint64: 8,
	}
	all := dtype.All()
	if len(all) != len(want) {
		t.Errorf("All() has %d types, want %d", len(all), len(want))
	}
	for _, d := range all {
		if !d.Valid() {
			t.Errorf("%v: not valid", d)
		}
		if d.Size() != want[d] {
			t.Errorf("%v.Size() = %d, want %d", d, d.Size(), want[d])
		}
	}
	for _, d := range []dtype.DType{dtype.Invalid, dtype.DType(11), dtype.DType(255)} {
		if d.Valid() || d.Size() != 0 {
			t.Errorf("%v: Valid %v Size %d, want false 0", d, d.Valid(), d.Size())
		}
	}
}

func TestIsFloat(t *testing.T) {
	floats := map[dtype.DType]bool{dtype.Float32: true, dtype.Float64: true, dtype.Float16: true, dtype.BFloat16: true}
	for _, d := range dtype.All() {
		if d.IsFloat() != floats[d] {
			t.Errorf("%v.IsFloat() = %v", d, d.IsFloat())
		}
	}
}

func TestDTypeRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range dtype.All() {
		s := d.String()
		if seen[s] || s != strings.ToLower(s) || strings.HasPrefix(s, "dtype(") {
			t.Errorf("%d: bad or duplicate name %q", uint8(d), s)
		}
		seen[s] = true
		for _, in := range []string{s, strings.ToUpper(s), " " + s + "\t"} {
			got, err := dtype.ParseDType(in)
			if err != nil || got != d {
				t.Errorf("ParseDType(%q) = %v, %v; want %v", in, got, err, d)
			}
		}
	}
	if s := dtype.Invalid.String(); s != "dtype(0)" && s != "invalid" {
		t.Errorf("Invalid.String() = %q", s)
	}
	if s := dtype.DType(42).String(); s != "dtype(42)" {
		t.Errorf("DType(42).String() = %q", s)
	}
}

func TestDTypeShortNames(t *testing.T) {
	cases := map[string]dtype.DType{
		"f32": dtype.Float32, "fp32": dtype.Float32, "float": dtype.Float32,
		"f64": dtype.Float64, "fp64": dtype.Float64, "double": dtype.Float64,
		"f16": dtype.Float16, "fp16": dtype.Float16, "half": dtype.Float16,
		"bf16": dtype.BFloat16, "BF16": dtype.BFloat16,
		"i8": dtype.Int8, "u8": dtype.Uint8, "byte": dtype.Uint8,
		"i32": dtype.Int32, "int": dtype.Int32, "u32": dtype.Uint32,
		"i64": dtype.Int64, "u64": dtype.Uint64,
	}
	for s, want := range cases {
		got, err := dtype.ParseDType(s)
		if err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
}

func TestDTypeParseErrors(t *testing.T) {
	for _, s := range []string{"", "invalid", "float128", "int16", "f8", "dtype(1)", "1", "float 32"} {
		d, err := dtype.ParseDType(s)
		if err == nil || d != dtype.Invalid {
			t.Errorf("ParseDType(%q) = %v, %v; want an error", s, d, err)
			continue
		}
		if !strings.Contains(err.Error(), "float32") {
			t.Errorf("ParseDType(%q): error %q does not list the names", s, err)
		}
	}
}

func TestOpRoundTrip(t *testing.T) {
	want := []string{"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"}
	ops := dtype.AllOps()
	if len(ops) != len(want) {
		t.Fatalf("AllOps() = %v", ops)
	}
	for i, o := range ops {
		if !o.Valid() || o.String() != want[i] {
			t.Errorf("op %d: %q valid %v, want %q", i, o.String(), o.Valid(), want[i])
		}
		for _, in := range []string{o.String(), strings.ToUpper(o.String()), " " + o.String()} {
			got, err := dtype.ParseOp(in)
			if err != nil || got != o {
				t.Errorf("ParseOp(%q) = %v, %v; want %v", in, got, err, o)
			}
		}
	}
	for _, o := range []dtype.Op{dtype.InvalidOp, dtype.Op(9), dtype.Op(200)} {
		if o.Valid() {
			t.Errorf("op %d valid", uint8(o))
		}
	}
	if s := dtype.Op(77).String(); s != "op(77)" {
		t.Errorf("Op(77).String() = %q", s)
	}
}

func TestOpParseErrors(t *testing.T) {
	for _, s := range []string{"", "invalid", "add", "mean", "xor", "op(1)"} {
		o, err := dtype.ParseOp(s)
		if err == nil || o != dtype.InvalidOp {
			t.Errorf("ParseOp(%q) = %v, %v; want an error", s, o, err)
			continue
		}
		if !strings.Contains(err.Error(), "sum") {
			t.Errorf("ParseOp(%q): error %q does not list the names", s, err)
		}
	}
}

func TestSupports(t *testing.T) {
	for _, d := range dtype.All() {
		for _, o := range dtype.AllOps() {
			var want bool
			switch o {
			case dtype.Sum, dtype.Prod, dtype.Min, dtype.Max:
				want = true
			case dtype.Avg:
				want = d.IsFloat()
			case dtype.BAnd, dtype.BOr, dtype.BXor:
				want = !d.IsFloat()
			}
			if got := dtype.Supports(d, o); got != want {
				t.Errorf("Supports(%v, %v) = %v, want %v", d, o, got, want)
			}
		}
	}
	// Spot checks, independent of IsFloat.
	spot := []struct {
		d    dtype.DType
		o    dtype.Op
		want bool
	}{
		{dtype.Float16, dtype.Avg, true},
		{dtype.BFloat16, dtype.Avg, true},
		{dtype.Int32, dtype.Avg, false},
		{dtype.Uint8, dtype.BXor, true},
		{dtype.Float64, dtype.BAnd, false},
		{dtype.Int64, dtype.Prod, true},
	}
	for _, s := range spot {
		if got := dtype.Supports(s.d, s.o); got != s.want {
			t.Errorf("Supports(%v, %v) = %v, want %v", s.d, s.o, got, s.want)
		}
	}
	// Invalid types or ops are never supported.
	for _, o := range append(dtype.AllOps(), dtype.InvalidOp, dtype.Op(100)) {
		for _, d := range []dtype.DType{dtype.Invalid, dtype.DType(100)} {
			if dtype.Supports(d, o) {
				t.Errorf("Supports(%v, %v) = true", d, o)
			}
		}
	}
	for _, d := range dtype.All() {
		for _, o := range []dtype.Op{dtype.InvalidOp, dtype.Op(100)} {
			if dtype.Supports(d, o) {
				t.Errorf("Supports(%v, %v) = true", d, o)
			}
		}
	}
}
