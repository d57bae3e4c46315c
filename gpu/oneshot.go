package gpu

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// fused is the state of the fused one-shot allreduce (cuda.OneShot): a
// region of device memory per rank, registered once when the Comm is made
// and mapped by every peer, into which the ranks push their inputs and
// raise flags from inside one kernel. Small allreduces then cost one
// kernel launch and no host round trip: no notices, no events.
type fused struct {
	slotBytes int
	blocks    int              // the most blocks of a pipelined kernel; 0 by kind and size
	minRounds int              // the fewest rounds of a pipelined kernel, where areas of 1 KiB or more allow
	llMax     int              // the largest one-shot allreduce that runs in low-latency lines
	ll2Max    int              // the largest that runs in them as a two-shot (from llMax)
	llBlocks  int              // the grid of a call in low-latency lines; 0: a thread per word
	threads   int              // the block size of a pipelined kernel; 0: cuda's default (512)
	ramp      int              // a broadcast's cuda.OneShot.Ramp; -1: by size (DefaultBcastRamp)
	host      cuda.DevicePtr   // the host region (mapped pinned memory every rank sees) as mapped here; 0: none
	hostShare int              // the percentage of a round that goes through host; 0: by kind and size (DefaultHostShare)
	own       cuda.DevicePtr   // this rank's region
	regions   []cuda.DevicePtr // every rank's region as mapped here
	status    *cuda.HostBuffer // a word the kernel sets when a peer does not arrive
	seq       uint32           // the next call's first sequence number; the same on every rank
	seqLimit  uint32           // the last sequence number before the flags are reset (SeqLimit)
	resets    int              // how many times the sequence was reset
	stage     cuda.DevicePtr   // aligned scratch for calls in low-latency lines from or to unaligned buffers; 0 until needed
	stageSize int              // its bytes
	twoShot   bool             // direct allreduces run fused too
	other     bool             // broadcasts, allgathers and reduce-scatters do
}

// setupFused registers this rank's region and maps every peer's. Every
// rank calls it; if any rank cannot take part (too many ranks, no memory,
// a peer's region that cannot be mapped), none uses the fused kernel and
// the Comm runs one-shot allreduces as programs instead.
func (g *Comm) setupFused(ctx context.Context, host Host, opts Options) error {
	if g.n < 2 || (opts.OneShotBytes <= 0 && !opts.TwoShot && !opts.Fused) {
		return nil
	}
	slotBytes := opts.SlotBytes
	if slotBytes <= 0 {
		slotBytes = DefaultSlotBytes(g.n)
	}
	slotBytes = max(slotBytes, opts.OneShotBytes)
	slotBytes = (slotBytes + 255) / 256 * 256
	minRounds := DefaultMinRounds
	if opts.MinRounds > 0 {
		minRounds = opts.MinRounds
	}
	first := opts.FirstSeq
	if first == 0 {
		first = 1
	}
	f := &fused{slotBytes: slotBytes, blocks: min(max(opts.Blocks, 0), cuda.OneShotMaxBlocks), regions: make([]cuda.DevicePtr, g.n),
		seq: first, seqLimit: SeqLimit, twoShot: opts.TwoShot, other: opts.Fused, minRounds: minRounds,
		llMax: llMax(opts.LLBytes, g.n), ll2Max: ll2Max(opts.LL2Bytes, g.n), llBlocks: min(max(opts.LLBlocks, 0), cuda.OneShotMaxBlocks)}
	if opts.Threads >= 32 && opts.Threads <= 512 && opts.Threads%32 == 0 {
		f.threads = opts.Threads
	}
	switch r := opts.BcastRamp; {
	case r == 0:
		f.ramp = -1 // by size
	case r < 0:
		f.ramp = 0
	default:
		f.ramp = min(r, cuda.MaxRamp)
	}
	var local error
	var h cuda.IPCMemHandle
	hostOK := false
	if g.n > cuda.OneShotMaxRanks {
		local = fmt.Errorf("%d ranks: the fused kernel takes at most %d", g.n, cuda.OneShotMaxRanks)
	} else {
		local = g.w.Do(ctx, func(c *cuda.Ctx) (err error) {
			size := cuda.OneShotRegionBytes(g.n, slotBytes)
			if f.own, err = c.Alloc(size); err != nil {
				return err
			}
			if err = c.Memset8(f.own, 0, cuda.OneShotSlotsOffset, 0); err != nil {
				return err
			}
			ll := cuda.OneShotLLOffset(g.n, slotBytes)
			if err = c.Memset8(f.own.Add(ll), 0, size-ll, 0); err != nil {
				return err
			}
			if err = c.Synchronize(); err != nil {
				return err
			}
			if h, err = c.IPCGetMemHandle(f.own); err != nil {
				return err
			}
			if f.status, err = c.HostAlloc(4, cuda.HostAllocPortable|cuda.HostAllocDeviceMap); err != nil {
				return err
			}
			// The host region: a failure only leaves the host path out.
			if hm := g.hostRegion(); hm != nil {
				if c.HostRegister(hm, cuda.HostRegisterPortable|cuda.HostRegisterDeviceMap) == nil {
					if f.host, err = c.HostDevicePointer(hm); err != nil {
						c.HostUnregister(hm)
						f.host = 0
					}
				}
			}
			hostOK = f.host != 0
			return nil
		})
	}
	// Round 1: every rank's handle, or that it cannot take part, and
	// whether it mapped the host region.
	const recLen = 2 + len(h)
	rec := make([]byte, recLen)
	if local == nil {
		rec[0] = 1
		if hostOK {
			rec[1] = 1
		}
		copy(rec[2:], h[:])
	}
	all := make([]byte, recLen*g.n)
	if err := host.Allgather(ctx, rec, all); err != nil {
		g.freeFused(f)
		return fmt.Errorf("gpu: sharing the one-shot regions: %w", err)
	}
	ok := true
	for r := range g.n {
		ok = ok && all[r*recLen] == 1
		hostOK = hostOK && all[r*recLen+1] == 1
	}
	if !hostOK && f.host != 0 {
		// Some rank cannot use it: none does.
		g.unregisterHost(f)
	}
	f.hostShare = g.hostShare
	if ok {
		local = g.w.Do(ctx, func(c *cuda.Ctx) error {
			for r := range g.n {
				if r == g.rank {
					f.regions[r] = f.own
					continue
				}
				var ph cuda.IPCMemHandle
				copy(ph[:], all[r*recLen+2:])
				p, err := c.IPCOpenMemHandle(ph)
				if err != nil {
					return fmt.Errorf("mapping rank %d's one-shot region: %w", r, err)
				}
				f.regions[r] = p
			}
			return nil
		})
	}
	// Round 2: whether every rank mapped every region.
	rec2 := []byte{0}
	if ok && local == nil {
		rec2[0] = 1
	}
	all2 := make([]byte, g.n)
	if err := host.Allgather(ctx, rec2, all2); err != nil {
		g.freeFused(f)
		return fmt.Errorf("gpu: sharing the one-shot regions: %w", err)
	}
	for _, b := range all2 {
		ok = ok && b == 1
	}
	if !ok {
		g.fusedOff = "a rank could not register its region"
		if local != nil {
			g.fusedOff = local.Error()
		}
		g.freeFused(f)
		return nil
	}
	g.fused = f
	return nil
}

// freeFused releases what setupFused made of f.
func (g *Comm) freeFused(f *fused) error {
	if f == nil || g.w == nil {
		return nil
	}
	g.unregisterHost(f)
	return g.w.Do(context.Background(), func(c *cuda.Ctx) error {
		var errs []error
		for r, p := range f.regions {
			if p != 0 && r != g.rank {
				errs = append(errs, c.IPCCloseMemHandle(p))
			}
		}
		if f.own != 0 {
			errs = append(errs, c.Free(f.own))
		}
		if f.status != nil {
			errs = append(errs, c.FreeHost(f.status))
		}
		if f.stage != 0 {
			errs = append(errs, c.Free(f.stage))
		}
		return errors.Join(errs...)
	})
}

// HostPath says how much of the fused kernels' data goes through host
// memory (Options.HostShare), for logs.
func (g *Comm) HostPath() string {
	switch f := g.fused; {
	case f == nil || f.host == 0:
		if g.n <= 2 {
			return "off (2 GPUs)"
		}
		return "off"
	case f.hostShare > 0:
		return fmt.Sprintf("%d %% of every round of two-shot allreduces and broadcasts above %d bytes", f.hostShare, cuda.BcastDirectMax)
	}
	return fmt.Sprintf("by size (two-shot allreduces %s; broadcasts %s)", sharesBySize(cuda.FusedTwoShot), sharesBySize(cuda.FusedBcast))
}

// sharesBySize describes DefaultHostShare for kind, as "from 16 MiB: 8 %,
// from 64 MiB: 11 %", from 1 MiB to 1 GiB.
func sharesBySize(kind cuda.FusedKind) string {
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

// unregisterHost undoes the registration of the host region, if f has it.
func (g *Comm) unregisterHost(f *fused) error {
	if f == nil || f.host == 0 {
		return nil
	}
	f.host = 0
	return g.w.Do(context.Background(), func(c *cuda.Ctx) error { return c.HostUnregister(g.hostRegion()) })
}

// DefaultHostShare is the percentage of a round of a fused kernel of kind
// that goes through host memory, beside NVLink, when a call moves bytes
// (the vector of an allreduce or a broadcast) on n > 2 GPUs and nothing
// says otherwise. Four H200s, busbw at 64 MiB, 256 MiB and 1 GiB:
//
//   - the two-shot allreduce: none 298, 332, 343 GB/s; 8 % 311, 352, 367;
//     in a later run 11 % 312, 357, 371 against 8 %'s 311, 352, 367 (the
//     region holds 9 % there, cuda.HostFits: 1,632 bytes a block and round
//     beside NVLink's 16 KiB, so 14 % ran as 11 % did);
//   - the broadcast: none 294, 332, 342; 8 % 313, 353, 366; 11 % 306, 359,
//     377.
//
// At 16 MiB the host path bought nothing on four GPUs (allreduce; 6 % on
// three) or cost 3–20 % (broadcast), and smaller calls have too few rounds
// for it.
func DefaultHostShare(kind cuda.FusedKind, bytes int) int {
	switch {
	case kind == cuda.FusedTwoShot && bytes >= 64<<20:
		return 11
	case kind == cuda.FusedTwoShot && bytes >= 16<<20:
		return 8
	case kind == cuda.FusedBcast && bytes >= 256<<20:
		return 11
	case kind == cuda.FusedBcast && bytes >= 64<<20:
		return 8
	}
	return 0
}

// hostShare resolves Options.HostShare: 0 (by kind and size), negative
// (none, -1) or a percentage, at most 50.
func hostShare(opt int) int {
	return min(max(opt, -1), 50)
}

// mailboxAlign is where the host region starts in the mailbox file: on a
// boundary of this many bytes, so that it can be registered on its own.
const mailboxAlign = 64 << 10

// mbBytes is the size of the mailbox file: the rings, then, unless the
// host path is off, the host region.
func (g *Comm) mbBytes() int {
	if g.hostShare < 0 {
		return mailboxSize(g.n)
	}
	return (mailboxSize(g.n)+mailboxAlign-1)/mailboxAlign*mailboxAlign + cuda.HostRegionBytes
}

// hostRegion is the host region in the mailbox file, or nil without one.
func (g *Comm) hostRegion() []byte {
	if g.hostShare < 0 || len(g.mb.mem) < mailboxSize(g.n)+cuda.HostRegionBytes {
		return nil
	}
	return g.mb.mem[len(g.mb.mem)-cuda.HostRegionBytes:]
}

// DefaultMinRounds is the fewest rounds a pipelined fused kernel cuts a
// vector into, where areas of at least 1 KiB a block allow; Options.MinRounds
// overrides it.
const DefaultMinRounds = 1

// llMax is the largest one-shot allreduce in low-latency lines on n
// ranks: Options.LLBytes where not zero (negative: none), else
// DefaultLLBytes(n); at most cuda.OneShotLLMax.
func llMax(opt, n int) int {
	v := opt
	if v == 0 {
		v = DefaultLLBytes(n)
	}
	return min(max(v, 0), cuda.OneShotLLMax)
}

// ll2Max is the largest one-shot allreduce (above llMax) that runs as a
// two-shot in low-latency lines on n ranks: Options.LL2Bytes where not
// zero (negative: none), else DefaultLL2Bytes(n); at most
// cuda.TwoShotLLMax(n).
func ll2Max(opt, n int) int {
	v := opt
	if v == 0 {
		v = DefaultLL2Bytes(n)
	}
	return min(max(v, 0), cuda.TwoShotLLMax(n))
}

// DefaultLL2Bytes is the largest allreduce that runs as a two-shot in
// low-latency lines by default on n ranks: none on 2 (where it sends as
// much as the one-shot, with a hop more), else cuda.TwoShotLLMax(n).
func DefaultLL2Bytes(n int) int {
	if n <= 2 {
		return 0
	}
	return cuda.TwoShotLLMax(n)
}

// DefaultLLBytes is Options.LLBytes's default on n ranks: the largest
// power of two whose lines, sent to every peer, stay within 1 MiB
// (2·(n−1)·bytes ≤ 1 MiB), at most cuda.OneShotLLMax: 256 KiB on 2 and 3
// GPUs, 128 KiB on 4, 64 KiB on 8. On four H200s the lines won up to
// 128 KiB (6.9 against 7.7 µs) and lost at 256 KiB (9.5 against 9.0);
// on two they won at every size to 256 KiB (5.3 against 6.8 µs).
func DefaultLLBytes(n int) int {
	b := cuda.OneShotLLMax
	for b > 8 && 2*(n-1)*b > 1<<20 {
		b /= 2
	}
	return b
}

// DefaultSlotBytes is Options.SlotBytes's default on n GPUs: 32 MiB / n,
// so that the region (2·n slots) takes 64 MiB.
func DefaultSlotBytes(n int) int { return (32 << 20) / max(n, 1) }

// shape returns the fused kernel of kind that runs a call of p, of dt
// and op: its grid, rounds, area, ramp and host share, from what every
// rank shares (the size, the options, whether every rank mapped the host
// region), but none of the call's buffers, sequence number or rank. It
// reports false where the Comm has no fused kernels, kind is off, or the
// call does not fit: a one-shot larger than a slot, or areas too small
// for the kind.
func (f *fused) shape(kind cuda.FusedKind, p sched.Params, dt dtype.DType, op dtype.Op) (cuda.OneShot, bool) {
	if f == nil || p.NRanks != len(f.regions) {
		return cuda.OneShot{}, false
	}
	switch {
	case kind == cuda.FusedOneShot:
		if kind.Slot(p.Count, dt.Size(), p.NRanks) > f.slotBytes {
			return cuda.OneShot{}, false
		}
	case kind == cuda.FusedTwoShot && !f.twoShot, kind != cuda.FusedTwoShot && !f.other:
		return cuda.OneShot{}, false
	}
	a := f.kernel(kind, p, dt, op)
	return a, a.Rounds() > 0
}

// Shape returns the fused kernel of kind that would run a call of p, of
// dt and op, on this Comm, or false if none would (see fused.shape); the
// planner costs it and Call.Fused carries it to Run. Kind FusedOneShot
// becomes one of the kernels in low-latency lines where the size and the
// options choose them.
func (g *Comm) Shape(kind cuda.FusedKind, p sched.Params, dt dtype.DType, op dtype.Op) (cuda.OneShot, bool) {
	return g.fused.shape(kind, p, dt, op)
}

// SeqLimit is the last sequence number of the fused kernels before the
// flags are reset. Flags are compared by signed difference of 32-bit
// words and carry 2·seq; a flag that a block of the grid last raised
// 2^30 sequence numbers ago (blocks 64 to 255 run only in calls of 64 MiB
// and more) would read as ahead of the call that waits for it, and the
// low-latency lines compare seq for equality. So the sequence stays
// within [1, SeqLimit], where every flag and line value differs from
// every wait's by less than 2^31: a call that would pass SeqLimit first
// resets the regions (resetFused) and starts again at 1.
const SeqLimit = 1<<30 - 1

// launch enqueues k as one fused kernel on s, with a wait for peers
// bounded by deadline. Where the call would pass f.seqLimit, reset is
// called first: it clears this rank's flags and lines once no peer uses
// them (every rank resets at the same call, since every rank has the
// same sequence).
func (f *fused) launch(c *cuda.Ctx, s cuda.Stream, rank int, k *Call, deadline time.Time, reset func() error) error {
	if err := f.failed(rank); err != nil {
		return err
	}
	a := *k.Fused
	a.In, a.Out, a.Seq, a.Rank, a.Regions = k.In, k.Out, f.seq, rank, f.regions
	rounds := uint32(max(a.Rounds(), 1))
	if f.passes(rounds) {
		if err := reset(); err != nil {
			return err
		}
		f.seq, a.Seq = 1, 1
		f.resets++
	}
	// The call takes its sequence numbers even if it fails here, so that
	// a rank never reuses numbers its peers have used.
	f.seq += rounds
	wait := time.Until(deadline)
	if wait <= 0 {
		return fmt.Errorf("gpu: rank %d: the call's deadline passed before it started: %w", rank, context.DeadlineExceeded)
	}
	a.Timeout, a.Status = wait, f.status.Ptr()
	if (a.Kind == cuda.FusedOneShotLL || a.Kind == cuda.FusedTwoShotLL) && (a.In|a.Out)&7 != 0 {
		// Every rank runs the kernel in lines that the size chose; a rank
		// whose buffers are not 8-byte aligned runs it on aligned scratch.
		return f.staged(c, s, a)
	}
	return c.LaunchOneShot(s, a)
}

// passes reports whether a call of rounds rounds from f.seq would pass
// f.seqLimit.
func (f *fused) passes(rounds uint32) bool {
	return uint64(f.seq)+uint64(rounds)-1 > uint64(f.seqLimit)
}

// staged runs a, a call in low-latency lines, through f.stage: a copy of
// the input there, the kernel in place there, a copy of the result out.
func (f *fused) staged(c *cuda.Ctx, s cuda.Stream, a cuda.OneShot) error {
	b := a.Count * a.DType.Size()
	if f.stage == 0 {
		// Once, at the most the lines carry, so that it is never freed
		// while a queued kernel may still use it.
		size := max(f.llMax, f.ll2Max, 8)
		p, err := c.Alloc(size)
		if err != nil {
			return fmt.Errorf("gpu: scratch for a call in low-latency lines: %w", err)
		}
		f.stage, f.stageSize = p, size
	}
	if b > f.stageSize {
		return fmt.Errorf("gpu: a call in low-latency lines of %d bytes, above the %d the scratch holds", b, f.stageSize)
	}
	in, out := a.In, a.Out
	if err := c.Copy(f.stage, in, b, s); err != nil {
		return err
	}
	a.In, a.Out = f.stage, f.stage
	if err := c.LaunchOneShot(s, a); err != nil {
		return err
	}
	return c.Copy(out, f.stage, b, s)
}

// BigBlocks is the grid of pipelined kernels from bigFused: two blocks of
// BigThreads threads per SM on an H200 (132 SMs), less a few, but for the
// allgather (bigGrid).
const (
	BigBlocks  = 256
	BigThreads = 256
)

// bigFused is the size (the vector of an allreduce, a rank's block of an
// allgather or reduce-scatter, a broadcast) from which pipelined kernels
// run with BigBlocks blocks instead of
// cuda.DefaultFusedBlocks. On H200s 128 blocks moved more than 64 at
// 1 GiB: allreduce 333 against 317 GB/s busbw on four GPUs, reduce-scatter
// 318 against 298 (352 against 330 on two), allgather 342 against 329
// (355 against 337), broadcast 328 against 312; and as much from 64 MiB
// (the broadcast too, since bigGrid).
func bigFused(kind cuda.FusedKind, n int) int {
	switch kind {
	case cuda.FusedBcast:
		return 64 << 20
	case cuda.FusedAllgather, cuda.FusedReduceScatter:
		return (64 << 20) / max(n, 1)
	}
	return 64 << 20
}

// gridFor is the most blocks a pipelined kernel of kind runs with for
// bytes on n ranks, and their threads (0: cuda's default, 512):
// Options.Blocks and Options.Threads where set,
// else cuda.DefaultFusedBlocks, or from bigFused bigGrid.
func (f *fused) gridFor(kind cuda.FusedKind, bytes, n int) (blocks, threads int) {
	blocks, threads = cuda.DefaultFusedBlocks, 0
	if bytes >= bigFused(kind, n) {
		blocks, threads = bigGrid(kind, n)
	}
	if f.blocks > 0 {
		blocks = f.blocks
	}
	if f.threads > 0 {
		threads = f.threads
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
func bigGrid(kind cuda.FusedKind, n int) (blocks, threads int) {
	if kind == cuda.FusedAllgather || n <= 2 {
		return 128, 0
	}
	return BigBlocks, BigThreads
}

// kernel is the kernel call of kind that runs a call of p, of dt and op,
// but for its buffers, sequence number, rank, timeout and status word.
func (f *fused) kernel(kind cuda.FusedKind, p sched.Params, dt dtype.DType, op dtype.Op) cuda.OneShot {
	if !p.Coll.Reduces() {
		op = dtype.Sum // unused, but checked: any op the type has
	}
	a := cuda.OneShot{
		Kind:  kind,
		Root:  p.Root,
		DType: dt, Op: op, Count: p.Count,
		Regions: f.regions, SlotBytes: f.slotBytes,
	}
	if kind == cuda.FusedOneShot {
		// The kernel is chosen from what every rank shares (the size), not
		// from this rank's buffers: see launch for unaligned ones.
		switch b, es, n := p.Count*dt.Size(), dt.Size(), p.NRanks; {
		case b <= f.llMax && cuda.LLSizeFits(p.Count, es):
			a.Kind = cuda.FusedOneShotLL
		case b > f.llMax && b <= f.ll2Max && cuda.TwoShotLLSizeFits(p.Count, es, n):
			a.Kind = cuda.FusedTwoShotLL
		}
		if a.Kind != cuda.FusedOneShot && f.llBlocks > 0 {
			a.Blocks = f.llBlocks
		}
	}
	if kind != cuda.FusedOneShot {
		most, threads := f.gridFor(kind, p.Count*dt.Size(), p.NRanks)
		a.Blocks, a.Threads = cuda.FusedBlocks(p.Count*dt.Size(), most), threads
		if kind == cuda.FusedBcast {
			a.Ramp = f.ramp
			if a.Ramp < 0 {
				a.Ramp = DefaultBcastRamp(p.Count*dt.Size(), p.NRanks)
			}
		}
		// Vectors that a few rounds would carry run in at least minRounds
		// (smaller areas, down to 1 KiB a block), so that pushes overlap.
		if f.minRounds > 1 {
			a.Area = f.slotBytes / a.Blocks
			for a.Area > 1024 && a.Rounds() < f.minRounds {
				a.Area /= 2
			}
		}
		f.multiPath(&a, p.Count*dt.Size())
	}
	return a
}

// DefaultBcastRamp is the cuda.OneShot.Ramp of a broadcast of bytes on n
// GPUs (Options.BcastRamp sets another): 1, the last full round in two
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

// multiPath sends a share of a's data through the host region, beside
// NVLink (the multi-path copy of Temuçin's MASc thesis, Queen's University
// 2021, inside the kernel), where a is a
// broadcast above cuda.BcastDirectMax or a two-shot allreduce on more than
// 2 GPUs and the Comm has the region: HostBytes is f.hostShare percent
// (DefaultHostShare where 0) of what a block sends a round, NVLink and
// host together (a broadcast's block sends n - 1 halves of an area over
// NVLink, a two-shot's half an area of every chunk in each phase).
func (f *fused) multiPath(a *cuda.OneShot, bytes int) {
	n := len(f.regions)
	share := f.hostShare
	if share == 0 {
		share = DefaultHostShare(a.Kind, bytes)
	}
	if f.host == 0 || share <= 0 || n <= 2 || a.Blocks < 1 {
		return
	}
	area := f.slotBytes / a.Blocks
	if a.Area > 0 {
		area = min(area, a.Area)
	}
	nv := (area &^ 15) / 2 &^ 15
	switch {
	case a.Kind == cuda.FusedBcast && bytes > cuda.BcastDirectMax:
		nv *= n - 1
	case a.Kind == cuda.FusedTwoShot:
	default:
		return
	}
	a.Host, a.HostBytes = f.host, min(nv*share/(100-share), cuda.HostFits(a.Kind, a.Blocks, n))&^15
}

// HostShareOf is the percentage of a's rounds that goes through host
// memory, for a kernel from Shape that has HostBytes.
func (g *Comm) HostShareOf(a *cuda.OneShot) int {
	if g.fused == nil || a.HostBytes == 0 {
		return 0
	}
	if s := g.fused.hostShare; s > 0 {
		return s
	}
	return DefaultHostShare(a.Kind, a.Count*a.DType.Size())
}

// failed returns an error if a fused kernel gave up waiting for a peer.
// It reads what kernels finished so far have written.
func (f *fused) failed(rank int) error {
	if f == nil {
		return nil
	}
	if p := atomic.LoadUint32((*uint32)(unsafe.Pointer(&f.status.Bytes()[0]))); p != 0 {
		return fmt.Errorf("gpu: rank %d: rank %d did not reach a fused kernel (device-side wait) before the deadline of the call that launched it: %w",
			rank, p-1, context.DeadlineExceeded)
	}
	return nil
}

// deadlineCtx is the context of a call that runs after its caller has
// returned (Enqueue): only its deadline is kept, without the timer and
// allocations of context.WithDeadline.
type deadlineCtx struct{ dl time.Time }

func (d deadlineCtx) Deadline() (time.Time, bool) { return d.dl, true }
func (d deadlineCtx) Done() <-chan struct{}       { return nil }
func (d deadlineCtx) Value(any) any               { return nil }
func (d deadlineCtx) Err() error {
	if time.Now().After(d.dl) {
		return context.DeadlineExceeded
	}
	return nil
}
