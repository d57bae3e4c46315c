package fused

import (
	"fmt"
	"math"
	"strings"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// Settings are a communicator's settings of the fused kernels as its
// caller gives them (package gpu's Options): a zero chooses by kind and
// size. NewConfig resolves them.
type Settings struct {
	OneShotBytes int // the largest one-shot allreduce; slots are at least this large
	SlotBytes    int // 0: DefaultSlotBytes(n)
	Blocks       int // the most blocks of a pipelined kernel, up to MaxBlocks
	Threads      int // a pipelined kernel's block size, a multiple of 32 up to 512
	MinRounds    int // 0: DefaultMinRounds
	LLBytes      int // 0: DefaultLLBytes(n); negative: none
	LL2Bytes     int // 0: DefaultLL2Bytes(n); negative: none
	LLBlocks     int // the grid of a call in low-latency lines; 0: a thread per word
	BcastRamp    int // 0: DefaultBcastRamp; negative: none; else at most MaxRamp
	TwoShot      bool
	Other        bool
	// MultiPath, where not nil, gives the host share by size in place of
	// DefaultHostShare (Config.MultiPath).
	MultiPath HostShares
}

// HostShares gives the share of a copy of size bytes to send through
// host memory beside the peer path, and in how many chunks, as a
// multi-path table measured by braid tune --device cuda --multipath says
// (multipath.Table): (0, 1) where the peer path alone is best.
type HostShares interface {
	Lookup(size int) (hostShare float64, chunks int)
}

// Config is what the choice of a fused kernel depends on besides the
// call: a communicator's settings, resolved, and facts that every rank
// shares (the rank count, whether every rank mapped the host region). The
// same Config and call give the same Kernel on every rank (Shape), but
// for the buffers, the sequence number, the rank and the bounds of the
// wait, which Launch's caller sets.
type Config struct {
	// Regions are every rank's region as mapped here; the choice uses
	// their count, and the kernels they are handed to the bases.
	Regions   []cuda.DevicePtr
	SlotBytes int // a slot's bytes, a multiple of 256
	Blocks    int // the most blocks of a pipelined kernel; 0: by kind and size
	MinRounds int // the fewest rounds of a pipelined kernel, where areas of 1 KiB or more allow
	LLMax     int // the largest one-shot allreduce that runs in low-latency lines
	LL2Max    int // the largest that runs in them as a two-shot (above LLMax)
	LLBlocks  int // the grid of a call in low-latency lines; 0: a thread per word
	Threads   int // the block size of a pipelined kernel; 0: Threads (512)
	Ramp      int // a broadcast's Kernel.Ramp; -1: by size (DefaultBcastRamp)
	// Host is the host region (mapped pinned memory every rank sees) as
	// mapped here; 0: none, and no kernel moves data through host memory.
	Host cuda.DevicePtr
	// HostShare is the percentage of a round that goes through host; 0:
	// by MultiPath where set, else by kind and size (DefaultHostShare);
	// negative: none.
	HostShare int
	// MultiPath, where not nil and HostShare is 0, gives the host share of
	// a call by its size: the table's host share at the call's bytes, as
	// a percentage (at most 50), none where the table says the peer path
	// alone. The table was measured for a copy between two GPUs; the
	// kernels send their share of every round the same way, so that the
	// machine's balance between the paths, not one measured on H200s,
	// sets it.
	MultiPath HostShares
	TwoShot   bool // direct allreduces run fused too
	Other     bool // broadcasts, allgathers and reduce-scatters do
}

// NewConfig resolves s for n ranks. Regions and Host are left for the
// caller to fill once the regions are mapped; until then Regions holds n
// zero bases.
func NewConfig(n int, s Settings) Config {
	slot := s.SlotBytes
	if slot <= 0 {
		slot = DefaultSlotBytes(n)
	}
	slot = (max(slot, s.OneShotBytes) + 255) / 256 * 256
	c := Config{Regions: make([]cuda.DevicePtr, n), SlotBytes: slot, Blocks: min(max(s.Blocks, 0), MaxBlocks),
		MinRounds: DefaultMinRounds, LLMax: llMax(s.LLBytes, n), LL2Max: ll2Max(s.LL2Bytes, n),
		LLBlocks: min(max(s.LLBlocks, 0), MaxBlocks), TwoShot: s.TwoShot, Other: s.Other, MultiPath: s.MultiPath}
	if s.MinRounds > 0 {
		c.MinRounds = s.MinRounds
	}
	if s.Threads >= 32 && s.Threads <= Threads && s.Threads%32 == 0 {
		c.Threads = s.Threads
	}
	switch r := s.BcastRamp; {
	case r == 0:
		c.Ramp = -1 // by size
	case r < 0:
		c.Ramp = 0
	default:
		c.Ramp = min(r, MaxRamp)
	}
	return c
}

// DefaultSlotBytes is the slot size on n GPUs when Settings.SlotBytes is
// 0: 32 MiB / n, so that the region (2·n slots) takes 64 MiB.
func DefaultSlotBytes(n int) int { return (32 << 20) / max(n, 1) }

// DefaultMinRounds is the fewest rounds a pipelined kernel cuts a vector
// into, where areas of at least 1 KiB a block allow, when
// Settings.MinRounds is 0.
const DefaultMinRounds = 1

// llMax is the largest one-shot allreduce in low-latency lines on n
// ranks: opt where not zero (negative: none), else DefaultLLBytes(n); at
// most LLMax.
func llMax(opt, n int) int {
	v := opt
	if v == 0 {
		v = DefaultLLBytes(n)
	}
	return min(max(v, 0), LLMax)
}

// ll2Max is the largest one-shot allreduce (above llMax) that runs as a
// two-shot in low-latency lines on n ranks: opt where not zero (negative:
// none), else DefaultLL2Bytes(n); at most TwoShotLLMax(n).
func ll2Max(opt, n int) int {
	v := opt
	if v == 0 {
		v = DefaultLL2Bytes(n)
	}
	return min(max(v, 0), TwoShotLLMax(n))
}

// DefaultLL2Bytes is the largest allreduce that runs as a two-shot in
// low-latency lines by default on n ranks: none on 2 (where it sends as
// much as the one-shot, with a hop more), else TwoShotLLMax(n).
func DefaultLL2Bytes(n int) int {
	if n <= 2 {
		return 0
	}
	return TwoShotLLMax(n)
}

// DefaultLLBytes is the largest one-shot allreduce in low-latency lines
// on n ranks by default: the largest power of two whose lines, sent to
// every peer, stay within 1 MiB (2·(n−1)·bytes ≤ 1 MiB), at most LLMax:
// 256 KiB on 2 and 3 GPUs, 128 KiB on 4, 64 KiB on 8. On four H200s the
// lines won up to 128 KiB (6.9 against 7.7 µs) and lost at 256 KiB (9.5
// against 9.0); on two they won at every size to 256 KiB (5.3 against
// 6.8 µs).
func DefaultLLBytes(n int) int {
	b := LLMax
	for b > 8 && 2*(n-1)*b > 1<<20 {
		b /= 2
	}
	return b
}

// Shape returns the kernel of kind that runs a call of p, of dt and op:
// its grid, rounds, area, ramp and host share, from what every rank
// shares (the size, the settings, whether every rank mapped the host
// region), but none of the call's buffers, sequence number or rank. Kind
// OneShot becomes one of the kernels in low-latency lines where the size
// and the settings choose them. It reports false where kind is off, or
// the call does not fit: a one-shot larger than a slot, or areas too
// small for the kind.
func (c *Config) Shape(kind Kind, p sched.Params, dt dtype.DType, op dtype.Op) (Kernel, bool) {
	if c == nil || p.NRanks != len(c.Regions) {
		return Kernel{}, false
	}
	switch {
	case kind == OneShot:
		if kind.Slot(p.Count, dt.Size(), p.NRanks) > c.SlotBytes {
			return Kernel{}, false
		}
	case kind == TwoShot && !c.TwoShot, kind != TwoShot && !c.Other:
		return Kernel{}, false
	}
	a := c.kernel(kind, p, dt, op)
	return a, a.Rounds() > 0
}

// BigBlocks and BigThreads are the grid of pipelined kernels from
// bigFused: two blocks of BigThreads threads per SM on an H200 (132 SMs),
// less a few, but for the allgather (bigGrid).
const (
	BigBlocks  = 256
	BigThreads = 256
)

// bigFused is the size (the vector of an allreduce, a rank's block of an
// allgather or reduce-scatter, a broadcast) from which pipelined kernels
// run with BigBlocks blocks instead of DefaultBlocks. On H200s 128 blocks
// moved more than 64 at 1 GiB: allreduce 333 against 317 GB/s busbw on
// four GPUs, reduce-scatter 318 against 298 (352 against 330 on two),
// allgather 342 against 329 (355 against 337), broadcast 328 against
// 312; and as much from 64 MiB (the broadcast too, since bigGrid).
func bigFused(kind Kind, n int) int {
	switch kind {
	case Bcast:
		return 64 << 20
	case Allgather, ReduceScatter:
		return (64 << 20) / max(n, 1)
	}
	return 64 << 20
}

// gridFor is the most blocks a pipelined kernel of kind runs with for
// bytes on n ranks, and their threads (0: Threads, 512): Config.Blocks
// and Config.Threads where set, else DefaultBlocks, or from bigFused
// bigGrid.
func (c *Config) gridFor(kind Kind, bytes, n int) (blocks, threads int) {
	blocks, threads = DefaultBlocks, 0
	if bytes >= bigFused(kind, n) {
		blocks, threads = bigGrid(kind, n)
	}
	if c.Blocks > 0 {
		blocks = c.Blocks
	}
	if c.Threads > 0 {
		threads = c.Threads
	}
	return blocks, threads
}

// bigGrid is the grid of large pipelined kernels: BigBlocks blocks of
// BigThreads, so that one block's flag exchanges overlap the other's
// stores on each SM. Four H200s, busbw against 128 blocks of 512 threads:
// broadcast 294, 332, 342 GB/s at 64 MiB, 256 MiB, 1 GiB against 276,
// 319, 329; reduce-scatter 219, 297, 330 against 208, 287, 318; the
// two-shot allreduce 298, 332, 343 against 290, 328, 342. The allgather
// gained nothing from 64 MiB and lost 10 % at 16 MiB, and two GPUs were
// measured with the older grid only: they keep 128 blocks of 512 threads.
func bigGrid(kind Kind, n int) (blocks, threads int) {
	if kind == Allgather || n <= 2 {
		return 128, 0
	}
	return BigBlocks, BigThreads
}

// kernel is the kernel call of kind that runs a call of p, of dt and op,
// but for its buffers, sequence number, rank, timeout and status word.
func (c *Config) kernel(kind Kind, p sched.Params, dt dtype.DType, op dtype.Op) Kernel {
	if !p.Coll.Reduces() {
		op = dtype.Sum // unused, but checked: any op the type has
	}
	a := Kernel{
		Kind:  kind,
		Root:  p.Root,
		DType: dt, Op: op, Count: p.Count,
		Regions: c.Regions, SlotBytes: c.SlotBytes,
	}
	if es := dt.Size(); kind == ReduceScatter && p.Count*es >= StrideMin && p.Count*es%16 != 0 {
		// Blocks at an aligned stride, staged by the caller: from the
		// size, so that every rank runs the same kernel.
		a.Stride = AlignedStride(p.Count, es)
	}
	if kind == OneShot {
		// The kernel is chosen from what every rank shares (the size), not
		// from this rank's buffers: see package gpu for unaligned ones.
		switch b, es, n := p.Count*dt.Size(), dt.Size(), p.NRanks; {
		case b <= c.LLMax && LLSizeFits(p.Count, es):
			a.Kind = OneShotLL
		case b > c.LLMax && b <= c.LL2Max && TwoShotLLSizeFits(p.Count, es, n):
			a.Kind = TwoShotLL
		}
		if a.Kind != OneShot && c.LLBlocks > 0 {
			a.Blocks = c.LLBlocks
		}
	}
	if (kind == ReduceScatter || kind == Allgather) && p.Count*dt.Size() <= c.LLMax && LLSizeFits(p.Count, dt.Size()) {
		// A small block runs in low-latency lines, as the one-shot's
		// lines do, where its lines out of a GPU (2·(n−1)·block) stay
		// within what LLMax allows the one-shot's: one trip over NVLink,
		// no flag exchange a round.
		a.Kind, a.Stride = ReduceScatterLL, 0
		if kind == Allgather {
			a.Kind = AllgatherLL
		}
		if c.LLBlocks > 0 {
			a.Blocks = c.LLBlocks
		}
		return a
	}
	if kind != OneShot {
		most, threads := c.gridFor(kind, p.Count*dt.Size(), p.NRanks)
		a.Blocks, a.Threads = BlocksFor(p.Count*dt.Size(), most), threads
		if kind == Bcast {
			a.Ramp = c.Ramp
			if a.Ramp < 0 {
				a.Ramp = DefaultBcastRamp(p.Count*dt.Size(), p.NRanks)
			}
		}
		// Vectors that a few rounds would carry run in at least MinRounds
		// (smaller areas, down to 1 KiB a block), so that pushes overlap.
		if c.MinRounds > 1 {
			a.Area = c.SlotBytes / a.Blocks
			for a.Area > 1024 && a.Rounds() < c.MinRounds {
				a.Area /= 2
			}
		}
		if kind == ReduceScatter && p.NRanks > 2 && a.Area == 0 {
			a.Area = rsArea(c.SlotBytes, a.Blocks)
		}
		c.multiPath(&a, p.Count*dt.Size())
	}
	return a
}

// rsArea is the area of a pipelined reduce-scatter on more than 2 GPUs:
// half a block's share of the slot, so that a vector runs in twice the
// rounds, as the two-shot allreduce's reduce-scatter phase does. A block
// pushes round g + 1 while it combines round g, and the combining, which
// reads every peer's part, overlaps more pushes in smaller rounds. Four
// H200s, busbw with the slot's share against half of it (8 against 4 MiB
// slots, braid bench --slot): 16 MiB 178 against 183 GB/s, 64 MiB 216
// against 252, 256 MiB 292 against 310; at least 4 or 8 rounds instead
// (BRAID_GPU_ROUNDS) gave 252 and 222 at 64 MiB and nothing at 256 MiB.
// The allgather, whose take is a copy, gained 3 % at 64 MiB and lost as
// much at 256 MiB, and keeps the whole share.
func rsArea(slotBytes, blocks int) int {
	return slotBytes / max(blocks, 1) / 2 &^ 15
}

// DefaultBcastRamp is the Kernel.Ramp of a broadcast of bytes on n GPUs
// (Settings.BcastRamp sets another): 1, the last full round in two
// halves, from 16 MiB to below 64 MiB on more than 2 GPUs, where a vector
// of one round and a third (64 blocks of 12 MiB rounds on four GPUs) left
// most of it to a last round that nothing overlaps; else 0. Four H200s,
// 16 MiB: 216 against 192 GB/s (three: 263 against 216); every ramp lost
// at 4 and 64 MiB (64 MiB: 309 against 318 with 1), and 2 lost to 1.
func DefaultBcastRamp(bytes, n int) int {
	if n <= 2 || bytes < 16<<20 || bytes >= 64<<20 {
		return 0
	}
	return 1
}

// DefaultHostShare is the percentage of a round of a kernel of kind that
// goes through host memory, beside NVLink, when a call moves bytes (the
// vector of an allreduce or a broadcast) on n > 2 GPUs (a broadcast on 2
// as well) and nothing says otherwise. Four H200s, busbw at 64 MiB, 256
// MiB and 1 GiB:
//
//   - the two-shot allreduce: none 298, 332, 343 GB/s; 8 % 311, 352, 367;
//     in a later run 11 % 312, 357, 371 against 8 %'s 311, 352, 367 (the
//     region holds 9 % there, HostFits: 1,632 bytes a block and round
//     beside NVLink's 16 KiB, so 14 % ran as 11 % did);
//   - the broadcast: none 294, 332, 342; 8 % 313, 353, 366; 11 % 306, 359,
//     377. On two H200s (one phase: the root pushes whole areas, and the
//     host part after them; session 24, two runs each): none 357, 365,
//     369; 5 % 368, 379, 387; 8 % 374, 393, 400; 11 % 353, 387, 407; 14 %
//     269, 326, 332; 20 % 205, 251, 251. The same shares, so the same rule
//     for both.
//
// At 16 MiB the host path bought nothing on four GPUs (allreduce; 6 % on
// three) or cost 3–20 % (broadcast), and smaller calls have too few rounds
// for it.
//
// The reduce-scatter and the allgather have the host path too, but it
// pays only at the largest sizes, where the flag exchanges of their
// rounds weigh least: four H200s, busbw without it and with 5, 8, 11, 14
// and 20 % (BRAID_GPU_HOST_SHARE, two runs each, alike within 2 %):
//
//   - reduce-scatter at 64 MiB, 256 MiB, 1 GiB: 243, 304, 326 GB/s; 239,
//     303, 332; 231, 307, 342; 204, 230, 240; 210, 243, 259; 210, 243,
//     260;
//   - allgather: 285, 330, 343; 274, 328, 348; 267, 302, 320; 250, 257,
//     268; 238, 239, 241; 205, 193, 195.
//
// So the reduce-scatter sends 8 % through host from blocks of 256 MiB
// (bytes is a rank's block: 1 GiB vectors on four GPUs), and the
// allgather none by default.
func DefaultHostShare(kind Kind, bytes int) int {
	switch {
	case kind == ReduceScatter && bytes >= 256<<20:
		return 8
	case kind == TwoShot && bytes >= 64<<20:
		return 11
	case kind == TwoShot && bytes >= 16<<20:
		return 8
	case kind == Bcast && bytes >= 256<<20:
		return 11
	case kind == Bcast && bytes >= 64<<20:
		return 8
	}
	return 0
}

// shareFor is the percentage of a round of a kernel of kind moving bytes
// that goes through host memory where the kernel has the host path:
// HostShare, else MultiPath's share at bytes, else DefaultHostShare.
func (c *Config) shareFor(kind Kind, bytes int) int {
	switch {
	case c.HostShare != 0:
		return c.HostShare
	case c.MultiPath != nil:
		share, _ := c.MultiPath.Lookup(bytes)
		if !(share > 0) {
			return 0
		}
		return min(int(math.Round(share*100)), 50)
	}
	return DefaultHostShare(kind, bytes)
}

// multiPath sends a share of a's data through the host region, beside
// NVLink (the multi-path copy of Temuçin's MASc thesis, Queen's University
// 2021, inside the kernel), where a is a broadcast above BcastDirectMax,
// a two-shot allreduce, a pipelined reduce-scatter or allgather, on more
// than 2 GPUs (a broadcast on 2 as well), and the Config
// has the region: HostBytes is shareFor's percentage of what a block sends
// a peer a round, NVLink and host together (a broadcast's block sends
// n - 1 halves of an area over NVLink, a whole area on 2 GPUs; a
// two-shot's half an area of every chunk in each phase, a reduce-scatter's
// an area of every block, an allgather's an area of its own).
func (c *Config) multiPath(a *Kernel, bytes int) {
	n := len(c.Regions)
	if !c.HostPathOn() || a.Blocks < 1 {
		return
	}
	if n <= 2 && a.Kind != Bcast {
		// On 2 GPUs only the broadcast, whose root alone sends: the
		// others have not been measured with a host share there.
		return
	}
	share := c.shareFor(a.Kind, bytes)
	if share <= 0 {
		return
	}
	area := c.SlotBytes / a.Blocks
	if a.Area > 0 {
		area = min(area, a.Area)
	}
	nv := (area &^ 15) / 2 &^ 15
	switch {
	case a.Kind == Bcast && n == 2 && bytes > BcastDirectMax:
		nv = area &^ 15 // one phase: the root pushes whole areas
	case a.Kind == Bcast && bytes > BcastDirectMax:
		nv *= n - 1
	case a.Kind == TwoShot:
	case a.Kind == ReduceScatter || a.Kind == Allgather:
		nv = area &^ 15
	default:
		return
	}
	a.Host, a.HostBytes = c.Host, min(nv*share/(100-share), HostFits(a.Kind, a.Blocks, n))&^15
}

// HostPathOn says whether the kernels may send part of their rounds
// through the host region: the Config has it and HostShare does not turn
// it off.
func (c *Config) HostPathOn() bool { return c != nil && c.Host != 0 && c.HostShare >= 0 }

// HostShareOf is the percentage of a's rounds that goes through host
// memory, for a kernel from Shape that has HostBytes.
func (c *Config) HostShareOf(a *Kernel) int {
	if c == nil || a.HostBytes == 0 {
		return 0
	}
	return c.shareFor(a.Kind, a.Count*a.DType.Size())
}

// HostPath says how much of the kernels' data goes through host memory,
// for logs; source names the multi-path table where MultiPath is set.
func (c *Config) HostPath(source string) string {
	switch {
	case c == nil || c.Host == 0:
		return "off"
	case c.HostShare > 0 && len(c.Regions) <= 2:
		return fmt.Sprintf("%d %% of every round of broadcasts above %d bytes (on 2 GPUs nothing else)", c.HostShare, BcastDirectMax)
	case c.HostShare > 0:
		return fmt.Sprintf("%d %% of every round of two-shot allreduces, pipelined reduce-scatters and allgathers, and broadcasts above %d bytes", c.HostShare, BcastDirectMax)
	case c.MultiPath != nil:
		return "by size, as the multi-path table " + source + " says"
	case len(c.Regions) <= 2:
		return fmt.Sprintf("by size (broadcasts %s; on 2 GPUs nothing else)", sharesBySize(Bcast))
	}
	return fmt.Sprintf("by size (two-shot allreduces %s; broadcasts %s; reduce-scatters, by a rank's block, %s)",
		sharesBySize(TwoShot), sharesBySize(Bcast), sharesBySize(ReduceScatter))
}

// sharesBySize describes DefaultHostShare for kind, as "from 16 MiB: 8 %,
// from 64 MiB: 11 %", from 1 MiB to 1 GiB.
func sharesBySize(kind Kind) string {
	var parts []string
	prev := 0
	for b := 1 << 20; b <= 1<<30; b <<= 1 {
		if s := DefaultHostShare(kind, b); s != prev {
			parts = append(parts, fmt.Sprintf("from %d MiB: %d %%", b>>20, s))
			prev = s
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
