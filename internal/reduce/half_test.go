package reduce

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/x448/float16"
)

// TestWidenF16 checks the float16 table against the reference conversion on
// all 65536 inputs, and that narrowing gives every one back.
func TestWidenF16(t *testing.T) {
	in := make([]uint16, 1<<16)
	for i := range in {
		in[i] = uint16(i)
	}
	wide := make([]float32, 1<<16)
	widenF16(wide, in)
	for i, f := range wide {
		want := float16.Frombits(uint16(i)).Float32()
		if math.Float32bits(f) != math.Float32bits(want) {
			t.Fatalf("widen %#04x = %#08x, want %#08x", i, math.Float32bits(f), math.Float32bits(want))
		}
	}
	out := make([]uint16, len(in))
	narrowF16(out, wide)
	for i, got := range out {
		want := uint16(i)
		if want&0x7c00 == 0x7c00 && want&0x3ff != 0 {
			want |= 0x200 // a NaN comes back quiet
		}
		if got != want {
			t.Fatalf("round trip %#04x = %#04x, want %#04x", i, got, want)
		}
	}
}

// narrowSample returns float32 bit patterns spread over all 2^32, plus every
// pattern near the edges of float16's and bfloat16's ranges and rounding ties.
func narrowSample() []uint32 {
	var s []uint32
	for u := uint64(0); u < 1<<32; u += 4093 {
		s = append(s, uint32(u))
	}
	for _, edge := range []uint32{0x477fe000, 0x47800000, 0x38800000, 0x33000000, 0x7f7f8000, 0x7f800000, 0x00800000} {
		for d := uint32(0); d < 1<<14; d++ {
			s = append(s, edge-d, edge+d, (edge-d)|1<<31)
		}
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 1 << 16 {
		h := r.Uint32() &^ 0x1fff                     // a float16-representable pattern...
		s = append(s, h|0x1000, h|0x1000|1, h|0x0fff) // ...plus a tie, just above, just below
	}
	return s
}

// TestNarrow checks the inline float16 and bfloat16 rounding against the
// references on a sample of float32 inputs. BRAID_EXHAUSTIVE=1 checks all 2^32
// (about a minute).
func TestNarrow(t *testing.T) {
	var sample []uint32
	exhaustive := os.Getenv("BRAID_EXHAUSTIVE") == "1"
	if !exhaustive {
		sample = narrowSample()
	}
	f := make([]float32, 1<<16)
	got16, got16b := make([]uint16, 1<<16), make([]uint16, 1<<16)
	want := make([]byte, 2)
	check := func(us []uint32) {
		for i, u := range us {
			f[i] = math.Float32frombits(u)
		}
		n := len(us)
		narrowF16(got16, f[:n])
		narrowBF16(got16b, f[:n])
		for i := range n {
			putF16(want, f[i])
			if got16[i] != ne.Uint16(want) {
				t.Fatalf("float16 of %#08x = %#04x, want %#04x", us[i], got16[i], ne.Uint16(want))
			}
			putBF16(want, f[i])
			if got16b[i] != ne.Uint16(want) {
				t.Fatalf("bfloat16 of %#08x = %#04x, want %#04x", us[i], got16b[i], ne.Uint16(want))
			}
		}
	}
	if exhaustive {
		us := make([]uint32, 1<<16)
		for hi := uint32(0); hi < 1<<16; hi++ {
			for lo := range us {
				us[lo] = hi<<16 | uint32(lo)
			}
			check(us)
		}
		return
	}
	for len(sample) > 0 {
		n := min(len(sample), 1<<16)
		check(sample[:n])
		sample = sample[n:]
	}
}

// TestBF16Reference pins the reference bfloat16 rounding on known values.
func TestBF16Reference(t *testing.T) {
	cases := []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // 1 + 2^-8: tie, kept part even, down
		{0x3f818000, 0x3f82}, // 1 + 3*2^-8: tie, kept part odd, up
		{0x3f808001, 0x3f81}, // just above the tie: up
		{0x3f807fff, 0x3f80}, // just below: down
		{0x7f7fffff, 0x7f80}, // float32 max rounds to infinity
		{0x7f7f7fff, 0x7f7f}, // bfloat16 max
		{0xff800000, 0xff80}, // -inf
		{0x00000001, 0x0000}, // tiny subnormal to zero
		{0x80010000, 0x8001}, // subnormal kept
		{0x7f800001, 0x7fc0}, // NaN with a payload only in the low half stays NaN
		{0xffc00000, 0xffc0}, // negative quiet NaN
	}
	b := make([]byte, 2)
	for _, c := range cases {
		putBF16(b, math.Float32frombits(c.in))
		if got := ne.Uint16(b); got != c.want {
			t.Errorf("bfloat16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

// TestHalfArithmetic pins float16 and bfloat16 results on known values,
// through every table.
func TestHalfArithmetic(t *testing.T) {
	cases := []struct {
		d       dtype.DType
		op      dtype.Op
		a, b, w uint16
	}{
		{dtype.Float16, dtype.Sum, 0x3c00, 0x3c00, 0x4000},  // 1 + 1 = 2
		{dtype.Float16, dtype.Sum, 0x7bff, 0x0000, 0x7bff},  // 65504 + 0
		{dtype.Float16, dtype.Sum, 0x7bff, 0x4800, 0x7bff},  // 65504 + 8 rounds down
		{dtype.Float16, dtype.Sum, 0x7bff, 0x4c00, 0x7c00},  // 65504 + 16: tie, to even: infinity
		{dtype.Float16, dtype.Sum, 0x0001, 0x0001, 0x0002},  // smallest subnormals
		{dtype.Float16, dtype.Sum, 0x03ff, 0x0001, 0x0400},  // largest subnormal up to smallest normal
		{dtype.Float16, dtype.Prod, 0x0001, 0x3800, 0x0000}, // 2^-25: tie, to even: zero
		{dtype.Float16, dtype.Prod, 0x0003, 0x3800, 0x0002}, // 1.5 * 2^-24: tie, to even: 2
		{dtype.Float16, dtype.Prod, 0x7bff, 0x4000, 0x7c00}, // overflow to infinity
		{dtype.Float16, dtype.Sum, 0x7c00, 0xfc00, 0xfe00},  // inf - inf is NaN (any NaN)
		{dtype.Float16, dtype.Sum, 0x7e00, 0x3c00, 0x7e00},  // NaN + 1
		{dtype.Float16, dtype.Sum, 0x7c01, 0x3c00, 0x7e01},  // signalling NaN comes out quiet, payload kept
		{dtype.Float16, dtype.Max, 0x7bff, 0xfbff, 0x7bff},
		{dtype.Float16, dtype.Min, 0x8000, 0x0000, 0x8000},   // min(-0, +0) = -0
		{dtype.BFloat16, dtype.Sum, 0x3f80, 0x3f80, 0x4000},  // 1 + 1 = 2
		{dtype.BFloat16, dtype.Sum, 0x3f80, 0x3b80, 0x3f80},  // 1 + 2^-8: tie, to even: 1
		{dtype.BFloat16, dtype.Sum, 0x3f81, 0x3b80, 0x3f82},  // (1 + 2^-7) + 2^-8: tie, to even: up
		{dtype.BFloat16, dtype.Sum, 0x7f7f, 0x7f7f, 0x7f80},  // max + max = inf
		{dtype.BFloat16, dtype.Sum, 0x7f81, 0x3f80, 0x7fc1},  // signalling NaN comes out quiet
		{dtype.BFloat16, dtype.Prod, 0x0001, 0x3f00, 0x0000}, // smallest subnormal halved: tie to zero
		{dtype.BFloat16, dtype.Max, 0x0000, 0x8000, 0x0000},  // max(+0, -0) = +0
	}
	for _, c := range cases {
		for name, tab := range tables() {
			x, y := make([]byte, 2*9), make([]byte, 2*9)
			for i := 0; i < 9; i++ {
				ne.PutUint16(x[2*i:], c.a)
				ne.PutUint16(y[2*i:], c.b)
			}
			tab[c.d][c.op](x, x, y)
			for i := 0; i < 9; i++ {
				got := ne.Uint16(x[2*i:])
				if got != c.w && !(isNaN(c.d, x[2*i:]) && c.w&0x7fff == 0x7e00) {
					t.Errorf("%s %v %v: %#04x op %#04x = %#04x, want %#04x", name, c.d, c.op, c.a, c.b, got, c.w)
				}
			}
		}
	}
}

func TestDivide(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, d := range []dtype.DType{dtype.Float32, dtype.Float64, dtype.Float16, dtype.BFloat16} {
		for _, n := range []int{2, 3, 7, 1000} {
			for _, count := range []int{0, 1, 9, 100, 1000} {
				for _, off := range []int{0, 1} {
					for _, vector := range []bool{false, useAsm} {
						buf, intact := guarded(count*d.Size(), off)
						fill(r, d, buf)
						want := bytes.Clone(buf)
						refDivide(d, want, n)
						divide(d, buf, n, vector)
						if !intact() {
							t.Fatalf("%v / %d, %d elements: wrote outside the buffer", d, n, count)
						}
						if i := sameBits(d, buf, want); i >= 0 {
							t.Fatalf("%v / %d, %d elements, offset %d, vector %v: element %d differs", d, n, count, off, vector, i)
						}
					}
				}
			}
		}
	}
	known := []struct {
		d       dtype.DType
		in      []byte
		n       int
		want    []byte
		wantErr bool
	}{
		{d: dtype.Float16, in: []byte{0x00, 0x42}, n: 2, want: []byte{0x00, 0x3e}},  // 3 / 2 = 1.5
		{d: dtype.Float16, in: []byte{0x01, 0x7c}, n: 1, want: []byte{0x01, 0x7c}},  // n = 1 leaves even a signalling NaN alone
		{d: dtype.Float16, in: []byte{0x00, 0x3c}, n: 3, want: []byte{0x55, 0x35}},  // 1/3 rounded
		{d: dtype.BFloat16, in: []byte{0x40, 0x40}, n: 2, want: []byte{0xc0, 0x3f}}, // 3 / 2 = 1.5
		{d: dtype.Int32, in: make([]byte, 4), n: 2, wantErr: true},
		{d: dtype.Invalid, in: nil, n: 2, wantErr: true},
		{d: dtype.Float32, in: make([]byte, 4), n: 0, wantErr: true},
		{d: dtype.Float64, in: make([]byte, 4), n: 2, wantErr: true},
	}
	for _, k := range known {
		err := Divide(k.d, k.in, k.n)
		if (err != nil) != k.wantErr {
			t.Errorf("Divide(%v, %x, %d) error %v, want error %v", k.d, k.in, k.n, err, k.wantErr)
		}
		if err == nil && !bytes.Equal(k.in, k.want) {
			t.Errorf("Divide(%v, .., %d) = %x, want %x", k.d, k.n, k.in, k.want)
		}
	}
}

// TestHalfAllInputs runs every float16 and bfloat16 bit pattern through each
// operator against a few partners chosen to force rounding (ties included),
// overflow and underflow, through every table.
func TestHalfAllInputs(t *testing.T) {
	partners := map[dtype.DType][]uint16{
		dtype.Float16:  {0x0000, 0x3c01, 0xc200, 0x0001, 0x7bff}, // 0, 1+2^-10, -3, smallest subnormal, max
		dtype.BFloat16: {0x8000, 0x3f81, 0xc040, 0x0001, 0x7f7f}, // -0, 1+2^-7, -3, smallest subnormal, max
	}
	for d, ps := range partners {
		a := make([]byte, 2<<16)
		for i := range 1 << 16 {
			ne.PutUint16(a[2*i:], uint16(i))
		}
		b, want, got := make([]byte, len(a)), make([]byte, len(a)), make([]byte, len(a))
		for _, op := range []dtype.Op{dtype.Sum, dtype.Prod, dtype.Min, dtype.Max} {
			ref, _ := Reference(d, op)
			for _, p := range ps {
				for i := range 1 << 16 {
					ne.PutUint16(b[2*i:], p)
				}
				copy(want, a)
				ref(want, b)
				for name, tab := range tables() {
					tab[d][op](got, a, b)
					if i := sameBits(d, got, want); i >= 0 {
						t.Fatalf("%s %v %v: %#04x op %#04x = %x, want %x", name, d, op, i, p, got[2*i:2*i+2], want[2*i:2*i+2])
					}
				}
			}
		}
	}
}
