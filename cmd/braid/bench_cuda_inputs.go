package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// rotation is braid bench --device cuda --inputs K: K input buffers whose
// contents differ, used in turn call after call, and the calls run out of
// place into one output buffer, so that every call's input differs from
// the one before and its result overwrites the last one. Before every
// timed loop the inputs get values of that loop (the loop's generation)
// and the output is poisoned (all bits set: a NaN); after it, the last
// call's result is compared with the values it must hold. A kernel that
// read a stale input, or a call that did not run, leaves other values.
//
// The values are small integers in float32, so that every sum is exact:
// rank r's block b of slot s in generation g holds
// 1 + r + n·b + n²·((g·K + s) mod m), the same in every element of the
// block (allreduce, allgather and bcast have one block per rank,
// reducescatter n, one per destination). The broadcast sends from the
// root's slot, in place, into the other ranks' one output buffer.
type rotation struct {
	col                  sched.Collective
	k, n, rank, root     int
	count                int // elements per rank as sched.Params counts them
	slots                []cuda.DevicePtr
	out                  cuda.DevicePtr
	next                 int // the slot of the next call
	gen                  int // the generation of the values in the slots
	mod                  int
	inWords, outWords    int
	inBlocks, blockWords int
}

// rotateMod is the period m of the values: the largest, at most 251, that
// keeps a sum of n values of n ranks under 2^24, exact in float32.
func rotateMod(n int) int {
	m := 251
	for m > 2 && n*n*n*(m+1) >= 1<<24 {
		m--
	}
	return m
}

// newRotation describes a call of col with count elements per rank on
// the slots and out (allocated by the caller: each slot of
// inWords·4 bytes at least, out of outWords·4).
func newRotation(col sched.Collective, k, n, rank, root, count int, slots []cuda.DevicePtr, out cuda.DevicePtr) *rotation {
	p := sched.Params{Coll: col, NRanks: n, Count: count, Root: root}
	r := &rotation{col: col, k: k, n: n, rank: rank, root: root, count: count, slots: slots, out: out, mod: rotateMod(n),
		inWords: p.InLen(rank), outWords: p.OutLen(rank), inBlocks: 1}
	if col == sched.Bcast {
		// Every rank's slots hold the root's values (only the root's are
		// sent); the output is the whole vector.
		r.inWords, r.outWords = count, count
	}
	r.blockWords = r.inWords
	if col == sched.ReduceScatter {
		r.inBlocks, r.blockWords = n, count
	}
	return r
}

// value is rank r's block b in slot s of generation g.
func (r *rotation) value(rank, b, s, g int) float32 {
	return float32(1 + rank + r.n*b + r.n*r.n*((g*r.k+s)%r.mod))
}

// fill gives the slots the values of generation g and poisons the
// output (and, for a broadcast, nothing else: the root's slot is its
// output), then waits for the device.
func (r *rotation) fill(ctx context.Context, w *cuda.Worker, g int) error {
	r.gen = g
	return w.Do(ctx, func(cc *cuda.Ctx) error {
		for s, p := range r.slots {
			for b := range r.inBlocks {
				src := r.rank
				if r.col == sched.Bcast {
					src = r.root
				}
				v := math.Float32bits(r.value(src, b, s, g))
				if err := cc.Memset32(p.Add(b*r.blockWords*4), v, r.blockWords, 0); err != nil {
					return err
				}
			}
		}
		if err := cc.Memset32(r.out, 0xffffffff, r.outWords, 0); err != nil {
			return err
		}
		return cc.Synchronize()
	})
}

// call returns one call of the rotation on dc: each takes the next slot.
func (r *rotation) call(ctx context.Context, dc *braid.DeviceComm, op dtype.Op) func() error {
	dev := func(p cuda.DevicePtr, n int) braid.Device { return braid.Device{Ptr: p, Count: n, Type: braid.Float32} }
	return func() error {
		s := r.slots[r.next]
		r.next = (r.next + 1) % r.k
		switch r.col {
		case sched.Allreduce:
			return dc.Allreduce(ctx, dev(s, r.count), dev(r.out, r.count), op)
		case sched.Bcast:
			if r.rank == r.root {
				return dc.Bcast(ctx, dev(s, r.count), r.root)
			}
			return dc.Bcast(ctx, dev(r.out, r.count), r.root)
		case sched.Allgather:
			return dc.Allgather(ctx, dev(s, r.count), dev(r.out, r.n*r.count))
		default:
			return dc.ReduceScatter(ctx, dev(s, r.n*r.count), dev(r.out, r.count), op)
		}
	}
}

// want is the value of word j of the last call's result on this rank,
// the last call having read slot s of generation g.
func (r *rotation) want(j, s, g int) float32 {
	switch r.col {
	case sched.Allreduce:
		var sum float32
		for q := range r.n {
			sum += r.value(q, 0, s, g)
		}
		return sum
	case sched.Bcast:
		return r.value(r.root, 0, s, g)
	case sched.Allgather:
		return r.value(j/r.count, 0, s, g)
	default:
		var sum float32
		for q := range r.n {
			sum += r.value(q, r.rank, s, g)
		}
		return sum
	}
}

// rotateFullCheck is the largest result compared word by word; above it
// pieces of rotatePiece bytes are: rotatePieces spread over the result,
// and the first and last piece of every block.
const (
	rotateFullCheck = 64 << 20
	rotatePiece     = 256 << 10
	rotatePieces    = 64
)

// pieces returns the word ranges [lo, hi) of the result that check reads.
func (r *rotation) pieces() [][2]int {
	if r.outWords*4 <= rotateFullCheck {
		return [][2]int{{0, r.outWords}}
	}
	pw := rotatePiece / 4
	var starts []int
	for i := range rotatePieces {
		starts = append(starts, (r.outWords-pw)*i/(rotatePieces-1))
	}
	blocks, bw := 1, r.outWords
	if r.col == sched.Allgather {
		blocks, bw = r.n, r.count
	}
	for b := range blocks {
		starts = append(starts, b*bw, max((b+1)*bw-pw, b*bw))
	}
	out := make([][2]int, 0, len(starts))
	for _, s := range starts {
		out = append(out, [2]int{s, min(s+pw, r.outWords)})
	}
	return out
}

// check compares the result of the last call with what it must be, on
// this rank; the caller synchronised the calls.
func (r *rotation) check(ctx context.Context, w *cuda.Worker) error {
	if r.outWords == 0 {
		return nil
	}
	last := (r.next + r.k - 1) % r.k
	res := r.out
	if r.col == sched.Bcast && r.rank == r.root {
		res = r.slots[last]
	}
	for _, pc := range r.pieces() {
		buf := make([]byte, (pc[1]-pc[0])*4)
		if err := w.Do(ctx, func(cc *cuda.Ctx) error {
			if err := cc.CopyDtoH(buf, res.Add(pc[0]*4), 0); err != nil {
				return err
			}
			return cc.Synchronize()
		}); err != nil {
			return err
		}
		if err := r.compare(buf, pc[0], last); err != nil {
			return err
		}
	}
	return nil
}

// compare checks the words of buf, from word lo of the result, against
// the result of a call that read slot s.
func (r *rotation) compare(buf []byte, lo, s int) error {
	var wantBits uint32
	wantFor := -1 // the block wantBits is for
	for i := range len(buf) / 4 {
		j := lo + i
		if b := r.blockOf(j); b != wantFor {
			wantFor, wantBits = b, math.Float32bits(r.want(j, s, r.gen))
		}
		if got := binary.LittleEndian.Uint32(buf[4*i:]); got != wantBits {
			return fmt.Errorf("wrong result of the last call of the timed loop (input slot %d of %d, generation %d): element %d is %v (bits %#08x), want %v",
				s, r.k, r.gen, j, math.Float32frombits(got), got, math.Float32frombits(wantBits))
		}
	}
	return nil
}

// blockOf is the block of the result that word j is in: its expected
// value is the same throughout.
func (r *rotation) blockOf(j int) int {
	if r.col == sched.Allgather {
		return j / r.count
	}
	return 0
}

// rotationBytes are the bytes of each slot and of the output for sizes up
// to hi bytes on n ranks (size as braid bench counts it: the largest
// buffer).
func rotationBytes(hi int64, n int) (slot, out int) {
	return int(hi) + 4*n, int(hi) + 4*n
}
