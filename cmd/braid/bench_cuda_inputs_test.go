package main

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/braid-ccl/braid/sched"
)

// hostInput is what rotation.fill writes into rank's slot s in
// generation g, built on the host.
func hostInput(r *rotation, rank, s, g int) []float32 {
	in := make([]float32, r.inWords)
	src := rank
	if r.col == sched.Bcast {
		src = r.root
	}
	for b := range r.inBlocks {
		for i := range r.blockWords {
			in[b*r.blockWords+i] = r.value(src, b, s, g)
		}
	}
	return in
}

// hostResult is rank's result of the collective on the inputs of slot s
// in generation g, from the collective's definition.
func hostResult(col sched.Collective, n, rank, root, count, s, g, k int) []float32 {
	ins := make([][]float32, n)
	for q := range n {
		ins[q] = hostInput(newRotation(col, k, n, q, root, count, nil, 0), q, s, g)
	}
	var out []float32
	switch col {
	case sched.Allreduce:
		out = make([]float32, count)
		for q := range n {
			for i := range out {
				out[i] += ins[q][i]
			}
		}
	case sched.Bcast:
		out = append(out, ins[root]...)
	case sched.Allgather:
		for q := range n {
			out = append(out, ins[q]...)
		}
	default:
		out = make([]float32, count)
		for q := range n {
			for i := range out {
				out[i] += ins[q][rank*count+i]
			}
		}
	}
	return out
}

func bytesOf(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// TestRotationCheck: the result of a call on the last slot passes, the
// result of the slot before (a call that did not run) or of the loop
// before (a stale input) fails, for every collective and rank.
func TestRotationCheck(t *testing.T) {
	const k, count = 3, 5
	for _, col := range []sched.Collective{sched.Allreduce, sched.Bcast, sched.Allgather, sched.ReduceScatter} {
		for _, n := range []int{1, 2, 3, 4, 8} {
			root := n - 1
			for rank := range n {
				r := newRotation(col, k, n, rank, root, count, nil, 0)
				r.gen = 7
				for s := range k {
					good := hostResult(col, n, rank, root, count, s, 7, k)
					if len(good) != r.outWords {
						t.Fatalf("%v n=%d rank %d: result of %d words, rotation says %d", col, n, rank, len(good), r.outWords)
					}
					if err := r.compare(bytesOf(good), 0, s); err != nil {
						t.Errorf("%v n=%d rank %d slot %d: right result refused: %v", col, n, rank, s, err)
					}
					if err := r.compare(bytesOf(good[1:]), 1, s); err != nil {
						t.Errorf("%v n=%d rank %d slot %d: right piece refused: %v", col, n, rank, s, err)
					}
					prev := hostResult(col, n, rank, root, count, (s+k-1)%k, 7, k)
					if err := r.compare(bytesOf(prev), 0, s); err == nil {
						t.Errorf("%v n=%d rank %d slot %d: the previous slot's result passed", col, n, rank, s)
					}
					stale := hostResult(col, n, rank, root, count, s, 6, k)
					if err := r.compare(bytesOf(stale), 0, s); err == nil {
						t.Errorf("%v n=%d rank %d slot %d: the previous loop's result passed", col, n, rank, s)
					}
					bad := append([]float32(nil), good...)
					bad[len(bad)-1]++
					if err := r.compare(bytesOf(bad), 0, s); err == nil {
						t.Errorf("%v n=%d rank %d slot %d: a wrong last element passed", col, n, rank, s)
					}
				}
			}
		}
	}
}

// TestRotateExact: the sums of the values stay exact in float32.
func TestRotateExact(t *testing.T) {
	for n := 1; n <= 16; n++ {
		m := rotateMod(n)
		if m < 2 {
			t.Fatalf("n=%d: period %d", n, m)
		}
		// The largest value of a block and the largest sum.
		top := 1 + (n - 1) + n*(n-1) + n*n*(m-1)
		if n*top >= 1<<24 {
			t.Errorf("n=%d: sums up to %d are not exact in float32", n, n*top)
		}
	}
}

// TestRotationPieces: above the full check, the pieces stay in the
// result and cover its ends and every block's ends.
func TestRotationPieces(t *testing.T) {
	n, count := 4, (rotateFullCheck/4)/2+3
	r := newRotation(sched.Allgather, 2, n, 1, 0, count, nil, 0)
	ps := r.pieces()
	if len(ps) < rotatePieces {
		t.Fatalf("%d pieces", len(ps))
	}
	covered := func(j int) bool {
		for _, p := range ps {
			if p[0] <= j && j < p[1] {
				return true
			}
		}
		return false
	}
	for _, p := range ps {
		if p[0] < 0 || p[1] > r.outWords || p[0] >= p[1] {
			t.Fatalf("piece %v outside [0, %d)", p, r.outWords)
		}
	}
	for b := range n {
		for _, j := range []int{b * count, (b+1)*count - 1} {
			if !covered(j) {
				t.Errorf("word %d (an end of block %d) not checked", j, b)
			}
		}
	}
}
