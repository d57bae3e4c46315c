package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
)

// randomElems returns n random elements of d as bytes: for floating-point
// types a mix of ordinary values, random bit patterns (every class of value
// for float16 and bfloat16) and the special values (NaN, ±Inf, ±0,
// subnormals); for integers random bits.
func randomElems(rng *rand.Rand, d dtype.DType, n int) []byte {
	size := d.Size()
	b := make([]byte, n*size)
	for i := range n {
		e := b[i*size : (i+1)*size]
		if !d.IsFloat() {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			copy(e, w[:size])
			continue
		}
		r := rng.IntN(20)
		var f float64
		switch {
		case r < 9:
			f = rng.NormFloat64() * math.Pow(2, float64(rng.IntN(20)-10))
		case r < 17:
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			copy(e, w[:size])
			continue
		default:
			f = []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e-310, 5e-45, 6e-8, 1e-40, 65504, 3e38}[rng.IntN(11)]
		}
		putFloat(e, d, f)
	}
	return b
}

// putFloat stores f as d, converting through float32 for the narrow types
// (the conversion's rounding does not matter: any value is a valid input).
func putFloat(e []byte, d dtype.DType, f float64) {
	switch d {
	case dtype.Float64:
		binary.LittleEndian.PutUint64(e, math.Float64bits(f))
	case dtype.Float32:
		binary.LittleEndian.PutUint32(e, math.Float32bits(float32(f)))
	case dtype.BFloat16:
		binary.LittleEndian.PutUint16(e, uint16(math.Float32bits(float32(f))>>16))
	case dtype.Float16:
		binary.LittleEndian.PutUint16(e, f32toF16Trunc(float32(f)))
	}
}

// f32toF16Trunc converts to float16 by truncation, keeping NaN a NaN: good
// enough to make test inputs.
func f32toF16Trunc(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int(u>>23&0xff) - 127 + 15
	mant := u & 0x7fffff
	switch {
	case f != f:
		return sign | 0x7e00
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		return sign | uint16((mant|0x800000)>>uint(14-exp))
	}
	return sign | uint16(exp)<<10 | uint16(mant>>13)
}

// isNaN reports whether the element e of d is a NaN.
func isNaN(e []byte, d dtype.DType) bool {
	switch d {
	case dtype.Float64:
		f := math.Float64frombits(binary.LittleEndian.Uint64(e))
		return f != f
	case dtype.Float32:
		f := math.Float32frombits(binary.LittleEndian.Uint32(e))
		return f != f
	case dtype.Float16:
		u := binary.LittleEndian.Uint16(e)
		return u&0x7c00 == 0x7c00 && u&0x3ff != 0
	case dtype.BFloat16:
		u := binary.LittleEndian.Uint16(e)
		return u&0x7f80 == 0x7f80 && u&0x7f != 0
	}
	return false
}

// compareElems returns a description of the first element where got and
// want differ in bits (two NaNs count as equal), or "".
func compareElems(got, want []byte, d dtype.DType) string {
	size := d.Size()
	for i := 0; i < len(want); i += size {
		g, w := got[i:i+size], want[i:i+size]
		if bytes.Equal(g, w) || (d.IsFloat() && isNaN(g, d) && isNaN(w, d)) {
			continue
		}
		return fmt.Sprintf("element %d: got %x, want %x", i/size, g, w)
	}
	return ""
}

const poison = 0xcd

// TestReduceKernels checks every kernel of every element type and operator
// against the host reference (internal/reduce.Reference, the specification
// of Braid's reductions), bit for bit, over sizes around the vector width
// and the grid, with aligned and misaligned buffers, in place, with two
// destinations and with a small grid, and checks that no byte outside the
// destination is written.
func TestReduceKernels(t *testing.T) {
	needDevices(t, 1)
	w := newWorker(t, 0)
	s := stream(t, w)
	sizes := []int{1, 2, 7, 8, 33, 1000, 4099, 65541, 262151}
	const maxN = 262151 + 2
	const guard = 64
	bufBytes := maxN*8 + 2*guard
	dA, dB, dDst, dDst2 := alloc(t, w, bufBytes), alloc(t, w, bufBytes), alloc(t, w, bufBytes), alloc(t, w, bufBytes)
	do(t, w, func(c *Ctx) error {
		if err := c.LoadKernels(); err != nil {
			return err
		}
		t.Logf("kernels loaded in %v (PTX %d bytes)", c.KernelLoadTime(), len(reducePTX))
		return nil
	})
	rng := rand.New(rand.NewPCG(1, 2))
	type variant struct {
		name    string
		offset  int // elements from the 16-byte-aligned start
		inPlace bool
		dual    bool
		blocks  int
	}
	variants := []variant{
		{name: "aligned"},
		{name: "misaligned", offset: 1},
		{name: "inplace", inPlace: true},
		{name: "dual-blocks3", dual: true, blocks: 3},
	}
	cases := 0
	for _, d := range dtype.All() {
		size := d.Size()
		a := randomElems(rng, d, maxN)
		b := randomElems(rng, d, maxN)
		if d.IsFloat() {
			// Equal operands of opposite zero sign, for min and max.
			putFloat(a[0:size], d, 0)
			putFloat(b[0:size], d, math.Copysign(0, -1))
			putFloat(a[size:2*size], d, math.Copysign(0, -1))
			putFloat(b[size:2*size], d, 0)
		}
		upload(t, w, s, dA.Add(guard), a)
		upload(t, w, s, dB.Add(guard), b)
		for _, op := range dtype.AllOps() {
			if !dtype.Supports(d, op) {
				continue
			}
			ref, err := reduce.Reference(d, op)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range sizes {
				for _, v := range variants {
					off := guard + v.offset*size
					nb := n * size
					want := append([]byte(nil), a[v.offset*size:v.offset*size+nb]...)
					ref(want, b[v.offset*size:v.offset*size+nb])
					divisor := 0
					if op == dtype.Avg {
						divisor = 3
						if err := reduce.Divide(d, want, divisor); err != nil {
							t.Fatal(err)
						}
					}
					r := Reduction{DType: d, Op: op, Dst: dDst.Add(off), A: dA.Add(off), B: dB.Add(off), Count: n, Divisor: divisor, Blocks: v.blocks}
					if v.dual {
						r.Dst2 = dDst2.Add(off)
					}
					// Download the destination with the guard bytes around it.
					window := off + nb + guard
					got, got2 := make([]byte, window), make([]byte, window)
					do(t, w, func(c *Ctx) error {
						if err := c.Memset8(dDst, poison, bufBytes, s); err != nil {
							return err
						}
						if err := c.Memset8(dDst2, poison, bufBytes, s); err != nil {
							return err
						}
						if v.inPlace {
							if err := c.CopyDtoD(r.Dst, r.A, nb, s); err != nil {
								return err
							}
							r.A = r.Dst
						}
						if err := c.Reduce(s, r); err != nil {
							return err
						}
						if err := c.CopyDtoH(got, dDst, s); err != nil {
							return err
						}
						if err := c.CopyDtoH(got2, dDst2, s); err != nil {
							return err
						}
						return c.StreamSynchronize(s)
					})
					cases++
					where := fmt.Sprintf("%v %v n=%d %s", d, op, n, v.name)
					if msg := compareElems(got[off:off+nb], want, d); msg != "" {
						t.Fatalf("%s: %s", where, msg)
					}
					if msg := checkPoison(got, off, off+nb); msg != "" {
						t.Fatalf("%s: dst %s", where, msg)
					}
					if v.dual {
						if !bytes.Equal(got2[off:off+nb], got[off:off+nb]) {
							t.Fatalf("%s: second destination differs from the first", where)
						}
						if msg := checkPoison(got2, off, off+nb); msg != "" {
							t.Fatalf("%s: dst2 %s", where, msg)
						}
					} else if msg := checkPoison(got2, 0, 0); msg != "" {
						t.Fatalf("%s: dst2 written without being named: %s", where, msg)
					}
				}
			}
		}
	}
	t.Logf("%d reductions matched the host reference bit for bit", cases)
}

// checkPoison reports a byte outside [from, to) of b that is not poison.
func checkPoison(b []byte, from, to int) string {
	for i, c := range b {
		if (i < from || i >= to) && c != poison {
			return fmt.Sprintf("byte %d outside [%d, %d) overwritten with %#x", i, from, to, c)
		}
	}
	return ""
}

func TestDivideKernels(t *testing.T) {
	needDevices(t, 1)
	w := newWorker(t, 0)
	s := stream(t, w)
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 100003
	dSrc, dDst := alloc(t, w, n*8+16), alloc(t, w, n*8+16)
	for _, d := range []dtype.DType{dtype.Float32, dtype.Float64, dtype.Float16, dtype.BFloat16} {
		for _, div := range []int{1, 3, 7, 1000} {
			for _, off := range []int{0, 1} {
				src := randomElems(rng, d, n)
				want := append([]byte(nil), src...)
				if err := reduce.Divide(d, want, div); err != nil {
					t.Fatal(err)
				}
				o := off * d.Size()
				upload(t, w, s, dSrc.Add(o), src)
				do(t, w, func(c *Ctx) error { return c.Divide(s, d, dDst.Add(o), dSrc.Add(o), n, div) })
				got := download(t, w, s, dDst.Add(o), len(src))
				if msg := compareElems(got, want, d); msg != "" {
					t.Fatalf("divide %v by %d, offset %d: %s", d, div, off, msg)
				}
			}
		}
	}
	do(t, w, func(c *Ctx) error {
		if err := c.Divide(s, dtype.Int32, dDst, dSrc, 1, 2); err == nil {
			t.Error("Divide on int32 succeeded")
		}
		if err := c.Reduce(s, Reduction{DType: dtype.Int32, Op: dtype.Avg, Dst: dDst, A: dSrc, B: dSrc, Count: 1}); err == nil {
			t.Error("Reduce avg on int32 succeeded")
		}
		if err := c.Reduce(s, Reduction{DType: dtype.Float32, Op: dtype.BXor, Dst: dDst, A: dSrc, B: dSrc, Count: 1}); err == nil {
			t.Error("Reduce bxor on float32 succeeded")
		}
		return nil
	})
}

// TestKernelResources checks that no kernel spills to local memory and
// logs the registers each uses.
func TestKernelResources(t *testing.T) {
	needDevices(t, 1)
	w := newWorker(t, 0)
	do(t, w, func(c *Ctx) error {
		if err := c.LoadKernels(); err != nil {
			return err
		}
		t.Logf("kernels (%s) loaded in %v", c.KernelImage(), c.KernelLoadTime())
		for _, d := range dtype.All() {
			line := d.String() + ":"
			for _, op := range dtype.AllOps() {
				if !dtype.Supports(d, op) {
					continue
				}
				f, err := c.ReduceKernel(d, op)
				if err != nil {
					return err
				}
				regs, err := c.FuncAttribute(f, FuncNumRegs)
				if err != nil {
					return err
				}
				local, err := c.FuncAttribute(f, FuncLocalSizeBytes)
				if err != nil {
					return err
				}
				maxThreads, err := c.FuncAttribute(f, FuncMaxThreadsPerBlock)
				if err != nil {
					return err
				}
				if local != 0 || maxThreads < reduceThreads {
					t.Errorf("%v %v: %d bytes of local memory, at most %d threads a block", d, op, local, maxThreads)
				}
				line += fmt.Sprintf(" %v=%d", op, regs)
			}
			t.Log(line, "registers")
		}
		return nil
	})
}
