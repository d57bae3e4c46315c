package fused

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
)

// TestRounds checks Kernel.Rounds against a model of how the
// pipelined kernels of kernels/reduce.cu cut a vector: round by round,
// block by block, as the kernels' loops do. Every item of the vector must
// be moved exactly once, by one block in one round, and no block may move
// more in a round than its area of a slot holds; the number of rounds the
// model takes must be Rounds(), which the host adds to the sequence
// numbers (a mismatch would make ranks wait for flags no peer raises).
func TestRounds(t *testing.T) {
	i := 0
	for _, kind := range []Kind{TwoShot, ReduceScatter, Allgather, Bcast} {
		for _, d := range []dtype.DType{dtype.Int8, dtype.Float16, dtype.Float32, dtype.Float64} {
			for _, n := range []int{2, 3, 4, 8} {
				for _, slot := range []int{256, 4096, 1 << 20} {
					for _, blocks := range []int{1, 3, 64, 128} {
						for _, count := range []int{1, 7, 1000, 65537, 1<<20 + 3} {
							if i++; raceEnabled && i%7 != 0 {
								continue // a sample under the race detector
							}
							areaCap := []int{0, 1000, 4096}[(count+blocks)%3]
							a := Kernel{Kind: kind, DType: d, Count: count, Regions: make([]cuda.DevicePtr, n), SlotBytes: slot, Blocks: blocks, Area: areaCap}
							if kind == Bcast {
								a.Ramp = (count + slot/256 + blocks) % (MaxRamp + 1)
							}
							if kind == ReduceScatter && (count+blocks)%2 == 0 {
								a.Stride = AlignedStride(count, d.Size())
							}
							// Multi-path: some bytes a block and round through host.
							if hb := []int{0, 48, 1008}[(count+n+slot)%3]; hb > 0 {
								a.Host, a.HostBytes = 1<<40, hb
							}
							want, err := modelRounds(a)
							got := a.Rounds()
							if err != nil {
								t.Fatalf("kind %v, %d %v on %d ranks, slot %d, %d blocks: %v", kind, count, d, n, slot, blocks, err)
							}
							if got != want {
								t.Fatalf("kind %v, %d %v on %d ranks, slot %d, %d blocks, area %d: Rounds %d, the kernel takes %d",
									kind, count, d, n, slot, blocks, areaCap, got, want)
							}
						}
					}
				}
			}
		}
	}
	// Too small an area: no kernel can run, and Rounds says so.
	a := Kernel{Kind: TwoShot, DType: dtype.Float64, Count: 10, Regions: make([]cuda.DevicePtr, 2), SlotBytes: 256, Blocks: 16}
	if r := a.Rounds(); r != 0 {
		t.Errorf("two-shot with 16-byte areas: Rounds %d, want 0", r)
	}
	a.Kind = OneShot
	if r := a.Rounds(); r != 1 {
		t.Errorf("one-shot: Rounds %d, want 1", r)
	}
	if Blocks(1) != 1 || Blocks(4097) != 2 || Blocks(1<<30) != DefaultBlocks ||
		BlocksFor(1<<30, 1000) != MaxBlocks || BlocksFor(1<<30, 0) != 1 {
		t.Errorf("Blocks: %d %d %d; BlocksFor %d %d", Blocks(1), Blocks(4097), Blocks(1<<30),
			BlocksFor(1<<30, 1000), BlocksFor(1<<30, 0))
	}
	if got := OneShot.Slot(1000, 4, 4); got != 4000 {
		t.Errorf("one-shot slot for 1000 float32: %d, want 4000", got)
	}
}

// modelRounds runs the loops of a's kernel over a's vector without moving
// data. It returns the rounds they take, or an error if an item is moved
// twice or never, or a block's part of a round overflows its area.
func modelRounds(a Kernel) (int, error) {
	n, blocks, es := len(a.Regions), a.Blocks, a.DType.Size()
	area := a.SlotBytes / blocks
	if a.Area > 0 && a.Area < area {
		area = a.Area
	}
	area = area / 16 * 16
	// The kernels' split: block b's part of len items from off, in whole
	// multiples of w.
	split := func(off, length, w, b int) (int, int) {
		per := ((length+blocks-1)/blocks + w - 1) / w * w
		return off + min(b*per, length), off + min(b*per+per, length)
	}
	var items, w, capacity int // the items one rank's sweep covers, the vector width, the items an area holds per phase
	hcap := 0                  // the items a block moves through host a round
	switch a.Kind {
	case TwoShot:
		w = 16 / es
		items = ((a.Count+n-1)/n + w - 1) / w * w // a chunk
		capacity = area / 2 / es / w * w
		if a.Host != 0 {
			hcap = a.HostBytes / es / w * w
		}
	case ReduceScatter:
		w = 16 / es
		// What the kernel is given: the stride where one is set.
		_, args := a.args(new(argSet))
		items, capacity = int(args.(*hostVecArgs).N), area/es/w*w
		if a.Host != 0 {
			hcap = a.HostBytes / es / w * w
		}
	case Allgather:
		w = 16
		items, capacity = a.Count*es, area
		if a.Host != 0 {
			hcap = a.HostBytes / 16 * 16
		}
	case Bcast:
		w = 16
		items, capacity = a.Count*es, area/2/16*16
		if n == 2 || items <= BcastDirectMax {
			capacity = area // one phase: the root pushes everything to everyone
			if a.Host != 0 {
				hcap = a.HostBytes / 16 * 16 // and the host area, after it
			}
		}
	}
	if capacity == 0 {
		return 0, nil
	}
	// The parts moved, as intervals: they must tile [0, items) exactly.
	var parts [][2]int
	rounds := 0
	switch {
	case a.Kind == Bcast && n > 2 && items > BcastDirectMax:
		m := n - 1
		span := capacity * blocks
		if a.Host != 0 {
			hcap = a.HostBytes / 16 * 16
		}
		whole := m*span + hcap*blocks
		// Full rounds from the front, then the last whole one (or the
		// vector) in Ramp + 1 of halving size, cut at 16 bytes.
		tail := min(items, whole)
		head := items - tail
		var cuts []int
		for off := 0; off < head; off += whole {
			cuts = append(cuts, off)
		}
		for j := 0; j <= a.Ramp; j++ {
			cuts = append(cuts, head+(tail-tail>>j)&^15)
		}
		cuts = append(cuts, items)
		for r := 0; r+1 < len(cuts); r++ {
			rounds++
			off, length := cuts[r], cuts[r+1]-cuts[r]
			nl := min(length, m*span)
			ps := ((nl+m-1)/m + 15) / 16 * 16
			for b := range blocks {
				blo, bhi := split(0, ps, 16, b)
				if bhi-blo > capacity {
					return 0, fmt.Errorf("round %d block %d: part of %d bytes in a half area of %d", rounds, b, bhi-blo, capacity)
				}
				for k := range m {
					parts = append(parts, [2]int{off + min(k*ps+blo, nl), off + min(k*ps+bhi, nl)})
				}
				hlo, hhi := split(off+nl, length-nl, 16, b)
				if hhi-hlo > hcap {
					return 0, fmt.Errorf("round %d block %d: %d bytes in a host area of %d", rounds, b, hhi-hlo, hcap)
				}
				parts = append(parts, [2]int{hlo, hhi})
			}
		}
	default:
		span := (capacity + hcap) * blocks
		for off := 0; rounds == 0 || off < items; off += span {
			rounds++
			nl := min(capacity*blocks, items-min(off, items))
			for b := range blocks {
				lo, hi := split(off, nl, w, b)
				if hi-lo > capacity {
					return 0, fmt.Errorf("round %d block %d: %d items in an area of %d", rounds, b, hi-lo, capacity)
				}
				hlo, hhi := split(off+nl, min(hcap*blocks, items-min(off, items)-nl), w, b)
				if hhi-hlo > hcap {
					return 0, fmt.Errorf("round %d block %d: %d items in a host area of %d", rounds, b, hhi-hlo, hcap)
				}
				parts = append(parts, [2]int{lo, hi}, [2]int{hlo, hhi})
			}
		}
	}
	slices.SortFunc(parts, func(x, y [2]int) int { return cmp.Compare(x[0], y[0]) })
	next := 0
	for _, p := range parts {
		switch {
		case p[0] == p[1]:
			continue
		case p[0] != next:
			return 0, fmt.Errorf("items %d to %d moved %s", min(p[0], next), max(p[0], next), map[bool]string{true: "twice", false: "never"}[p[0] < next])
		}
		next = p[1]
	}
	if next != items {
		return 0, fmt.Errorf("items %d to %d never moved", next, items)
	}
	return rounds, nil
}
