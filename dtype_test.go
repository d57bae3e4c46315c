package braid

import (
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
)

// TestConstantsMatchDType: the root package spells its DType and Op
// constants out (so that go doc shows them), with the values of
// internal/dtype, which every layer below uses.
func TestConstantsMatchDType(t *testing.T) {
	for _, c := range []struct{ root, internal DType }{
		{Float32, dtype.Float32}, {Float64, dtype.Float64}, {Float16, dtype.Float16}, {BFloat16, dtype.BFloat16},
		{Int8, dtype.Int8}, {Uint8, dtype.Uint8}, {Int32, dtype.Int32}, {Uint32, dtype.Uint32},
		{Int64, dtype.Int64}, {Uint64, dtype.Uint64},
	} {
		if c.root != c.internal {
			t.Errorf("braid.%v = %d, internal/dtype's = %d", c.internal, c.root, c.internal)
		}
	}
	for _, c := range []struct{ root, internal Op }{
		{Sum, dtype.Sum}, {Prod, dtype.Prod}, {Min, dtype.Min}, {Max, dtype.Max},
		{Avg, dtype.Avg}, {BAnd, dtype.BAnd}, {BOr, dtype.BOr}, {BXor, dtype.BXor},
	} {
		if c.root != c.internal {
			t.Errorf("braid.%v = %d, internal/dtype's = %d", c.internal, c.root, c.internal)
		}
	}
	// Every valid value has its constant.
	if !Uint64.Valid() || (Uint64 + 1).Valid() || !BXor.Valid() || (BXor + 1).Valid() {
		t.Error("internal/dtype has values the root package does not name")
	}
}
