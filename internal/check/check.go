package check

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
	"github.com/x448/float16"
)

// Value is element i of rank's input for a run with salt. Products of
// values stay powers of two (exact in every type, and wrapping the same way
// in integers); other ops use 1..5.
func Value(op dtype.Op, rank, i, salt int) float64 {
	h := uint64(rank)*0x9e3779b97f4a7c15 + uint64(i)*0xbf58476d1ce4e5b9 + uint64(salt)*0x94d049bb133111eb
	h ^= h >> 29
	if op == dtype.Prod {
		return float64(1 + h%2)
	}
	return float64(1 + h%5)
}

// Fill writes rank's input for salt into buf, starting at element index
// first (the block's position in the logical vector).
func Fill(d dtype.DType, op dtype.Op, buf []byte, rank, first, salt int) {
	es := d.Size()
	for i := 0; i < len(buf)/es; i++ {
		put(d, buf[i*es:], Value(op, rank, first+i, salt))
	}
}

func put(d dtype.DType, b []byte, v float64) {
	switch d {
	case dtype.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case dtype.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	case dtype.Float16:
		binary.LittleEndian.PutUint16(b, float16.Fromfloat32(float32(v)).Bits())
	case dtype.BFloat16:
		binary.LittleEndian.PutUint16(b, uint16(math.Float32bits(float32(v))>>16))
	case dtype.Int8, dtype.Uint8:
		b[0] = byte(int64(v))
	case dtype.Int32, dtype.Uint32:
		binary.LittleEndian.PutUint32(b, uint32(int64(v)))
	case dtype.Int64, dtype.Uint64:
		binary.LittleEndian.PutUint64(b, uint64(int64(v)))
	}
}

func get(d dtype.DType, b []byte) float64 {
	switch d {
	case dtype.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case dtype.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case dtype.Float16:
		return float64(float16.Frombits(binary.LittleEndian.Uint16(b)).Float32())
	case dtype.BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case dtype.Int8:
		return float64(int8(b[0]))
	case dtype.Uint8:
		return float64(b[0])
	case dtype.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case dtype.Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case dtype.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case dtype.Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	}
	return math.NaN()
}

// wrap gives v as the dtype stores it (integers wrap around).
func wrap(d dtype.DType, v float64) float64 {
	var b [8]byte
	if !d.IsFloat() {
		// Exact integer products of powers of two wrap like the kernels.
		iv := uint64(int64(v))
		if v >= 1<<63 {
			iv = uint64(v)
		}
		binary.LittleEndian.PutUint64(b[:], iv)
		return get(d, b[:])
	}
	put(d, b[:], v)
	return get(d, b[:])
}

// combine reduces element i over all ranks as the collective defines.
func combine(op dtype.Op, n, i, salt int) float64 {
	acc := Value(op, 0, i, salt)
	for r := 1; r < n; r++ {
		v := Value(op, r, i, salt)
		switch op {
		case dtype.Sum, dtype.Avg:
			acc += v
		case dtype.Prod:
			acc *= v
		case dtype.Min:
			acc = math.Min(acc, v)
		case dtype.Max:
			acc = math.Max(acc, v)
		case dtype.BAnd:
			acc = float64(int64(acc) & int64(v))
		case dtype.BOr:
			acc = float64(int64(acc) | int64(v))
		case dtype.BXor:
			acc = float64(int64(acc) ^ int64(v))
		}
	}
	if op == dtype.Avg {
		acc /= float64(n)
	}
	return acc
}

// Expected returns element j of rank's output for p, or ok=false if that
// rank has no output there.
func Expected(p sched.Params, op dtype.Op, rank, j, salt int) float64 {
	n := p.NRanks
	switch p.Coll {
	case sched.Allreduce, sched.Reduce:
		return combine(op, n, j, salt)
	case sched.ReduceScatter:
		return combine(op, n, rank*p.Count+j, salt)
	}
	return expectedFrom(func(r, i int) float64 { return Value(op, r, i, salt) }, p, rank, j)
}

// expectedFrom returns element j of rank's output for p, a collective
// that moves data without reducing it, where element i of rank r's input
// is in(r, i).
func expectedFrom(in func(r, i int) float64, p sched.Params, rank, j int) float64 {
	switch p.Coll {
	case sched.Bcast:
		return in(p.Root, j)
	case sched.Allgather, sched.Gather:
		// Block b of the output is rank b's input, whose element k is
		// in(b, k): inputs are filled from index 0.
		return in(j/p.Count, j%p.Count)
	case sched.Scatter:
		return in(p.Root, rank*p.Count+j)
	case sched.Alltoall:
		// Block b of the output came from rank b's block `rank`.
		return in(j/p.Count, rank*p.Count+j%p.Count)
	}
	return 0
}

// FillInput writes rank's input for p: what Expected assumes.
func FillInput(p sched.Params, d dtype.DType, op dtype.Op, in []byte, rank, salt int) {
	Fill(d, op, in, rank, 0, salt)
}

// Verify compares rank's output with the definition and reports the first
// differing elements.
func Verify(p sched.Params, d dtype.DType, op dtype.Op, rank int, out []byte, salt int) error {
	es := d.Size()
	n := p.OutLen(rank)
	if len(out) != n*es {
		return fmt.Errorf("output has %d bytes, want %d", len(out), n*es)
	}
	bad := 0
	var first error
	for j := 0; j < n; j++ {
		want := wrap(d, Expected(p, op, rank, j, salt))
		got := get(d, out[j*es:])
		if got == want || (op == dtype.Avg && math.Abs(got-want) <= 1e-2*math.Abs(want)) {
			continue
		}
		if bad == 0 {
			first = fmt.Errorf("rank %d: %v %v %v: element %d of %d is %v, want %v", rank, p.Coll, d, op, j, n, got, want)
		}
		bad++
	}
	if bad > 0 {
		return fmt.Errorf("%w (%d wrong elements)", first, bad)
	}
	return nil
}

// Buffers allocates rank's buffers for p with elements of es bytes,
// aliased as the collective's in-place call defines when inPlace (see
// package sched). A buffer the rank does not have is nil; a bcast's
// buffer is out.
func Buffers(p sched.Params, rank, es int, inPlace bool) (in, out []byte) {
	inLen, outLen := p.InLen(rank)*es, p.OutLen(rank)*es
	blk := p.Count * es
	if !inPlace {
		if p.Coll == sched.Bcast {
			return nil, make([]byte, p.Count*es)
		}
		return make([]byte, inLen), make([]byte, outLen)
	}
	switch p.Coll {
	case sched.Allreduce, sched.Alltoall:
		out = make([]byte, outLen)
		return out, out
	case sched.Reduce:
		if rank == p.Root {
			out = make([]byte, outLen)
			return out, out
		}
		return make([]byte, inLen), nil
	case sched.Allgather, sched.Gather:
		if outLen == 0 {
			return make([]byte, inLen), nil
		}
		out = make([]byte, outLen)
		return out[rank*blk : (rank+1)*blk], out
	case sched.ReduceScatter, sched.Scatter:
		if inLen == 0 {
			return nil, make([]byte, outLen)
		}
		in = make([]byte, inLen)
		return in, in[rank*blk : (rank+1)*blk]
	case sched.Bcast:
		return nil, make([]byte, p.Count*es)
	}
	return make([]byte, inLen), make([]byte, outLen)
}
