package reduce

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
)

// lengths are the element counts every kernel is checked at: empty, shorter
// than one unrolled block, around a block, and long with a ragged tail.
// The race detector slows these single-goroutine loops tenfold and has
// nothing to find in them, so race builds stop at 4099.
var lengths = []int{0, 1, 7, 8, 9, 31, 33, 1000, 4099, 65537}[:10-raceLengthsDropped]

// tables returns the kernel tables to test: the portable one always, and the
// one with vector kernels where this build has them.
func tables() map[string]*table {
	m := map[string]*table{"portable": buildTable(false)}
	if useAsm {
		m["vector"] = buildTable(true)
	}
	return m
}

// pairs lists every supported (dtype, op), Avg included.
func pairs() [][2]int {
	var out [][2]int
	for _, d := range dtype.All() {
		for _, op := range dtype.AllOps() {
			if dtype.Supports(d, op) {
				out = append(out, [2]int{int(d), int(op)})
			}
		}
	}
	return out
}

// fill writes n random elements of d into b. Floating-point values mix
// ordinary numbers with random bit patterns (NaNs, infinities, subnormals)
// and the special values themselves.
func fill(r *rand.Rand, d dtype.DType, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if !d.IsFloat() {
		return
	}
	size := d.Size()
	for i := 0; i < len(b); i += size {
		var f float64
		switch k := r.IntN(16); {
		case k < 8:
			f = r.NormFloat64() * math.Exp2(float64(r.IntN(16)-8))
		case k < 12:
			continue // keep the random bits
		default:
			f = []float64{0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(), 65504, 5.960464477539063e-08, 1e-40}[r.IntN(10)]
		}
		switch d {
		case dtype.Float32:
			putF32(b[i:], float32(f))
		case dtype.Float64:
			putF64(b[i:], f)
		case dtype.Float16:
			putF16(b[i:], float32(f))
		case dtype.BFloat16:
			putBF16(b[i:], float32(f))
		}
	}
}

// isNaN reports whether the element of d at the start of b is a NaN.
func isNaN(d dtype.DType, b []byte) bool {
	switch d {
	case dtype.Float32:
		f := getF32(b)
		return f != f
	case dtype.Float64:
		f := getF64(b)
		return f != f
	case dtype.Float16:
		return ne.Uint16(b)&0x7fff > 0x7c00
	case dtype.BFloat16:
		return ne.Uint16(b)&0x7fff > 0x7f80
	}
	return false
}

// sameBits reports the first element where got and want differ, or -1. Two
// NaNs count as equal: which payload survives NaN op NaN is not specified.
func sameBits(d dtype.DType, got, want []byte) int {
	size := d.Size()
	for i := 0; i < len(got); i += size {
		g, w := got[i:i+size], want[i:i+size]
		if !bytes.Equal(g, w) && !(isNaN(d, g) && isNaN(d, w)) {
			return i / size
		}
	}
	return -1
}

const guard = 64

// guarded returns a buffer of n bytes at offset off into a larger slice
// whose other bytes hold a known pattern, and a function that reports whether
// that pattern is intact.
func guarded(n, off int) ([]byte, func() bool) {
	all := make([]byte, guard+off+n+guard)
	for i := range all {
		all[i] = 0xa5
	}
	buf := all[guard+off : guard+off+n : guard+off+n]
	pattern := bytes.Repeat([]byte{0xa5}, guard+off)
	return buf, func() bool {
		return bytes.Equal(all[:guard+off], pattern) && bytes.Equal(all[guard+off+n:], pattern[:guard])
	}
}

// TestMatchesReference checks every supported pair, through both tables, at
// every length, aligned and one byte off, with dst apart from, equal to a,
// and equal to b, against Reference.
func TestMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, tab := range tables() {
		for _, p := range pairs() {
			d, op := dtype.DType(p[0]), dtype.Op(p[1])
			ref, err := Reference(d, op)
			if err != nil {
				t.Fatal(err)
			}
			k3 := tab[d][op]
			for _, n := range lengths {
				size := n * d.Size()
				a, b := make([]byte, size), make([]byte, size)
				fill(r, d, a)
				fill(r, d, b)
				want := bytes.Clone(a)
				ref(want, b)
				for _, off := range []int{0, 1} {
					// Three guarded buffers per offset, reused by the three modes.
					var bufs [3][]byte
					var intact [3]func() bool
					for j := range bufs {
						bufs[j], intact[j] = guarded(size, off)
					}
					for mode, name3 := range []string{"dst", "dst=a", "dst=b"} {
						// Long buffers, to keep the run short: two of the six
						// combinations at 4099, only the executor's (aligned,
						// dst = a) at 65537.
						switch {
						case n > 4099 && (off != 0 || mode != 1):
							continue
						case n > 1000 && n <= 4099 && mode != off:
							continue
						}
						dst, x, y := bufs[0], bufs[1], bufs[2]
						switch mode {
						case 1:
							x = dst
						case 2:
							y = dst
						}
						for i := range dst {
							dst[i] = 0x5a
						}
						copy(x, a)
						copy(y, b)
						k3(dst, x, y)
						if !intact[0]() || !intact[1]() || !intact[2]() {
							t.Fatalf("%s %v %v n=%d off=%d %s: wrote outside dst", name, d, op, n, off, name3)
						}
						if i := sameBits(d, dst, want); i >= 0 {
							s := d.Size()
							t.Fatalf("%s %v %v n=%d off=%d %s: element %d: %x op %x = %x, want %x", name, d, op, n, off, name3,
								i, a[i*s:(i+1)*s], b[i*s:(i+1)*s], dst[i*s:(i+1)*s], want[i*s:(i+1)*s])
						}
					}
				}
			}
		}
	}
}

// TestFor checks the two-operand kernel For returns, which the executor uses.
func TestFor(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, p := range pairs() {
		d, op := dtype.DType(p[0]), dtype.Op(p[1])
		k, err := For(d, op)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := Reference(d, op)
		a, b := make([]byte, 1001*d.Size()), make([]byte, 1001*d.Size())
		fill(r, d, a)
		fill(r, d, b)
		want := bytes.Clone(a)
		ref(want, b)
		k(a, b)
		if i := sameBits(d, a, want); i >= 0 {
			t.Errorf("%v %v: element %d differs from Reference", d, op, i)
		}
	}
}

// TestCommutative checks that a op b and b op a give the same bits.
func TestCommutative(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for name, tab := range tables() {
		for _, p := range pairs() {
			d, op := dtype.DType(p[0]), dtype.Op(p[1])
			n := 4099 * d.Size()
			a, b, ab, ba := make([]byte, n), make([]byte, n), make([]byte, n), make([]byte, n)
			fill(r, d, a)
			fill(r, d, b)
			tab[d][op](ab, a, b)
			tab[d][op](ba, b, a)
			if i := sameBits(d, ab, ba); i >= 0 {
				t.Errorf("%s %v %v: element %d: a op b != b op a", name, d, op, i)
			}
		}
	}
}

func TestUnsupported(t *testing.T) {
	cases := []struct {
		d    dtype.DType
		op   dtype.Op
		want []string
	}{
		{dtype.Float32, dtype.BXor, []string{"bxor", "float32"}},
		{dtype.BFloat16, dtype.BAnd, []string{"band", "bfloat16"}},
		{dtype.Int32, dtype.Avg, []string{"avg", "int32"}},
		{dtype.Invalid, dtype.Sum, []string{"dtype(0)", "sum"}},
		{dtype.DType(200), dtype.Sum, []string{"dtype(200)", "sum"}},
		{dtype.Float32, dtype.InvalidOp, []string{"op(0)", "float32"}},
		{dtype.Float32, dtype.Op(99), []string{"op(99)", "float32"}},
	}
	for _, c := range cases {
		_, err1 := For(c.d, c.op)
		_, err2 := For3(c.d, c.op)
		_, err3 := Reference(c.d, c.op)
		for _, err := range []error{err1, err2, err3} {
			if err == nil {
				t.Errorf("%v %v: no error", c.d, c.op)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v %v: error %q does not name %q", c.d, c.op, err, w)
				}
			}
		}
	}
}

func TestLengthMismatchPanics(t *testing.T) {
	k, _ := For3(dtype.Float32, dtype.Sum)
	for _, c := range [][3]int{{8, 8, 4}, {8, 4, 8}, {4, 8, 8}, {6, 6, 6}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("lengths %v: no panic", c)
				}
			}()
			k(make([]byte, c[0]), make([]byte, c[1]), make([]byte, c[2]))
		}()
	}
}

// TestAvgIsSum checks that For hands out the sum kernel for avg.
func TestAvgIsSum(t *testing.T) {
	for _, d := range []dtype.DType{dtype.Float32, dtype.Float64, dtype.Float16, dtype.BFloat16} {
		avg, _ := For3(d, dtype.Avg)
		a, b, got, want := make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 64)
		fill(rand.New(rand.NewPCG(7, 8)), d, a)
		fill(rand.New(rand.NewPCG(9, 10)), d, b)
		sum, _ := For3(d, dtype.Sum)
		avg(got, a, b)
		sum(want, a, b)
		if sameBits(d, got, want) >= 0 {
			t.Errorf("%v: avg kernel differs from sum kernel", d)
		}
	}
}

// TestIntegerSemantics pins wraparound and signedness on known values, so
// that the reference itself is checked and not just trusted.
func TestIntegerSemantics(t *testing.T) {
	cases := []struct {
		d       dtype.DType
		op      dtype.Op
		a, b, w uint64
	}{
		{dtype.Int8, dtype.Sum, 127, 1, 0x80},
		{dtype.Uint8, dtype.Sum, 255, 1, 0},
		{dtype.Int8, dtype.Min, 0x80, 1, 0x80},
		{dtype.Uint8, dtype.Min, 0x80, 1, 1},
		{dtype.Int8, dtype.Prod, 16, 16, 0},
		{dtype.Int32, dtype.Sum, math.MaxInt32, 1, 0x80000000},
		{dtype.Int32, dtype.Max, 0xffffffff, 0, 0},
		{dtype.Uint32, dtype.Max, 0xffffffff, 0, 0xffffffff},
		{dtype.Int32, dtype.Prod, 0x10000, 0x10000, 0},
		{dtype.Int64, dtype.Sum, math.MaxInt64, 1, 1 << 63},
		{dtype.Int64, dtype.Min, 1 << 63, 5, 1 << 63},
		{dtype.Uint64, dtype.Prod, 1 << 32, 1 << 32, 0},
		{dtype.Uint64, dtype.BXor, 0xff00, 0x0ff0, 0xf0f0},
		{dtype.Int8, dtype.BAnd, 0xf0, 0x3c, 0x30},
		{dtype.Uint32, dtype.BOr, 0xf0, 0x0f, 0xff},
	}
	for _, c := range cases {
		for name, tab := range tables() {
			s := c.d.Size()
			a, b := make([]byte, 8), make([]byte, 8)
			ne.PutUint64(a, c.a)
			ne.PutUint64(b, c.b)
			want := make([]byte, 8)
			ne.PutUint64(want, c.w)
			// Nine copies, so that both the unrolled body and the tail run.
			x, y := bytes.Repeat(a[:s], 9), bytes.Repeat(b[:s], 9)
			tab[c.d][c.op](x, x, y)
			if !bytes.Equal(x, bytes.Repeat(want[:s], 9)) {
				t.Errorf("%s %v %v: %#x op %#x = %x, want %#x", name, c.d, c.op, c.a, c.b, x[:s], c.w)
			}
		}
	}
}

// TestFloatMinMax pins the NaN and signed-zero behaviour of min and max.
func TestFloatMinMax(t *testing.T) {
	nan, negz := float32(math.NaN()), float32(math.Copysign(0, -1))
	cases := []struct {
		op         dtype.Op
		a, b, want float32
	}{
		{dtype.Min, 1, 2, 1},
		{dtype.Max, 1, 2, 2},
		{dtype.Min, nan, 1, nan},
		{dtype.Min, 1, nan, nan},
		{dtype.Max, nan, 1, nan},
		{dtype.Max, 1, nan, nan},
		{dtype.Min, 0, negz, negz},
		{dtype.Min, negz, 0, negz},
		{dtype.Max, 0, negz, 0},
		{dtype.Max, negz, 0, 0},
		{dtype.Min, float32(math.Inf(-1)), 1, float32(math.Inf(-1))},
	}
	for _, c := range cases {
		for name, tab := range tables() {
			x, y := make([]byte, 4*9), make([]byte, 4*9)
			for i := 0; i < 9; i++ {
				putF32(x[4*i:], c.a)
				putF32(y[4*i:], c.b)
			}
			tab[dtype.Float32][c.op](x, x, y)
			for i := 0; i < 9; i++ {
				got := getF32(x[4*i:])
				if math.Float32bits(got) != math.Float32bits(c.want) && !(got != got && c.want != c.want) {
					t.Errorf("%s %v(%v, %v) = %v, want %v", name, c.op, c.a, c.b, got, c.want)
				}
			}
		}
	}
}

// TestNoAllocs checks that the hot path allocates nothing.
func TestNoAllocs(t *testing.T) {
	for name, tab := range tables() {
		for _, p := range pairs() {
			d, op := dtype.DType(p[0]), dtype.Op(p[1])
			a, b := make([]byte, 1001*d.Size()), make([]byte, 1001*d.Size())
			k := tab[d][op]
			if n := testing.AllocsPerRun(10, func() { k(a, a, b) }); n != 0 {
				t.Errorf("%s %v %v: %v allocations per call", name, d, op, n)
			}
		}
	}
	k, _ := For(dtype.Float32, dtype.Sum)
	a := make([]byte, 4096)
	if n := testing.AllocsPerRun(10, func() { k(a, a) }); n != 0 {
		t.Errorf("For: %v allocations per call", n)
	}
}
