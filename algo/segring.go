package algo

import (
	"fmt"
	"math"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// Segmented (pipelined) rings: allreduce, reducescatter and allgather
// "segring" run the same ring as "ring", but cut every block that travels
// around the ring into segments of at most sched.Params.Segment elements and
// send each segment as its own message, so that segment k+1 is in flight
// while segment k is being reduced and every receive stages one segment, not
// one block.
//
// A block keeps its segmentation all the way round the ring, so segment j of
// step s+1 reads exactly what segment j of step s wrote and depends on that
// step alone (gen derives the Deps from memory, as for every algorithm).
//
// The executor issues steps in program order and blocks at a step whose Deps
// have not completed, so the order of the steps is what makes the pipeline.
// Number the messages a rank sends u = s·nseg + j (step s, segment j; the
// receives it makes in the same order), so that send u ≥ nseg forwards what
// receive u−nseg brought. The program issues the sends of step 0 (which wait
// for nothing), then the first w receives, and from then on each send u
// followed by receive u−nseg+w. So the executor, waiting before send u for
// receive u−nseg, has segments u−nseg to u−nseg+w−1 in flight, and posts
// the next receive as soon as the oldest completes: at most w receives are
// outstanding beyond the ones the sends wait for, and the executor's staging
// buffers (one per posted RecvReduce) stay about w segments, in cache,
// however large the block. w is about segWindow elements' worth of segments,
// at least 1 and at most nseg (with w = nseg every receive of a step is
// posted before that step's sends; the reduce-scatter's double-buffered
// partial sums need w ≤ 2·nseg).

// DefaultSegment is the segment size, in elements, of the segmented rings
// when sched.Params.Segment is 0: 64 Ki elements, 256 KiB of float32, which
// keeps a segment and its staging buffer in a core's cache.
const DefaultSegment = 64 << 10

// segWindow is how many elements of receives a segmented ring posts ahead
// (see above): 256 Ki elements, four default segments.
const segWindow = 256 << 10

// maxSegments bounds NRanks × segments per block: where Count/Segment would
// exceed it, the segments grow instead. It keeps programs (and their
// generation, which tracks every segment's memory) small, and tags far below
// 2^31: a program has at most 2(n−1)·nseg ≤ 2·max(n, maxSegments) messages
// per peer, and n ≤ 2^24.
const maxSegments = 1 << 13

// segBase is the base of the segmented algorithms: it also rejects a
// negative Segment.
type segBase struct{ base }

func (b segBase) Supports(p sched.Params) error {
	if err := b.base.Supports(p); err != nil {
		return err
	}
	if p.Segment < 0 {
		return fmt.Errorf("algo: %v %q: negative segment size %d", b.coll, b.name, p.Segment)
	}
	return nil
}

// segPlan is how a segmented ring cuts its blocks.
type segPlan struct {
	seg    int // elements per segment (the last segment of a block may be shorter)
	nseg   int // segments of the largest block, ≥ 1
	window int // receives posted ahead, in [1, nseg]
}

// planSegments cuts blocks of at most blockMax elements, on n ranks, into
// segments of at most segment elements (0: DefaultSegment), evened out: the
// largest block into nseg = ⌈blockMax/segment⌉ segments (at most
// maxSegments/n) of ⌈blockMax/nseg⌉ elements, the last one shorter; the
// other blocks, which have at most one element less, on the same grid. About
// window elements of receives are posted ahead.
func planSegments(blockMax, n, segment, window int) segPlan {
	if segment <= 0 {
		segment = DefaultSegment
	}
	if blockMax <= 0 {
		return segPlan{seg: 1, nseg: 1, window: 1}
	}
	nseg := (blockMax-1)/segment + 1
	nseg = min(nseg, max(1, maxSegments/n))
	seg := (blockMax-1)/nseg + 1
	nseg = (blockMax-1)/seg + 1
	w := min(max(1, (window-1)/seg+1), nseg)
	if 2*(n-1)*nseg > math.MaxInt32 {
		panic("algo: segmented ring: too many messages for int32 tags") // maxSegments rules it out
	}
	return segPlan{seg: seg, nseg: nseg, window: w}
}

// segment returns segment j of the block of blockLen elements at off in
// buf: empty when the block has fewer than j+1 segments.
func (sp segPlan) segment(buf sched.Buf, off, blockLen, j int) sched.Chunk {
	lo := min(j*sp.seg, blockLen)
	hi := min(lo+sp.seg, blockLen)
	return span(buf, off+lo, hi-lo)
}

// pipeline emits the messages of steps ring steps of sp.nseg segments each in
// the order described above: send(s, j) emits the steps of message
// u = s·nseg + j on the sending side, recv(s, j) those on the receiving
// side; the message's tag is u. send(s, j) must wait for recv(s−1, j) (it
// may be a local step that does, rather than a send); the receives that no
// later step waits for are posted all together at the end.
func (sp segPlan) pipeline(steps int, send, recv func(s, j, tag int)) {
	total := steps * sp.nseg
	posted := 0
	postTo := func(v int) {
		for ; posted < min(v, total); posted++ {
			recv(posted/sp.nseg, posted%sp.nseg, posted)
		}
	}
	for u := range min(sp.nseg, total) {
		send(0, u, u)
	}
	postTo(sp.window)
	for u := sp.nseg; u < total; u++ {
		send(u/sp.nseg, u%sp.nseg, u)
		postTo(u - sp.nseg + sp.window + 1)
	}
	postTo(total)
}

// segTime is a segmented ring's time over link l with reduction cost gamma
// per byte, on n ranks, when its largest block is cut into q segments of s
// bytes and each rank posts its receives w ≤ q segments ahead (segPlan's
// window); serial says that the rank's own thread carries its transfers
// (cost.Model.Serial), so that they do not overlap its reductions. It grows
// with s and as w shrinks, and for w = q and s = B/q (B the block's bytes)
// it is convex in q; segTune relies on all three.
type segTime func(l cost.Link, gamma float64, n, q, w int, s float64, serial bool) float64

// paced returns the time to move k ≥ 1 segments over one link, c seconds
// each, when each is received only once the one w before it has been
// received and added (r seconds): ⌊(k−1)/w⌋·(c + r) + ((k−1) mod w + 1)·c.
func paced(k, w int, c, r float64) float64 {
	return float64((k-1)/w)*(c+r) + float64((k-1)%w+1)*c
}

// segCost is Cost for a segmented ring whose largest block has blockMax
// elements.
func segCost(p sched.Params, es int, m cost.Model, blockMax int, t segTime) float64 {
	if idle(p) {
		return 0
	}
	sp := planSegments(blockMax, p.NRanks, p.Segment, segWindow)
	return t(m.Flat(p), m.Gamma, p.NRanks, sp.nseg, sp.window, bytesOf(sp.seg, es), m.Serial(cost.FlatClass(p)))
}

// segTune is Tune for a segmented ring whose largest block has blockMax
// elements: it sets Params.Segment, if 0, to the segment that minimises
// segCost. Every cut planSegments makes is q segments of ⌈blockMax/q⌉
// elements for some q, so it searches q (see minimize), bounding t from
// below by its value for segments of exactly B/q bytes and a window of all
// q. Where a rank's transfers and additions take turns
// (cost.Model.Serial), it cuts at least as many segments as Segment 0
// would.
func segTune(p sched.Params, es int, m cost.Model, blockMax int, t segTime) sched.Params {
	if p.Segment != 0 {
		return p
	}
	if idle(p) {
		p.Segment = max(1, blockMax)
		return p
	}
	l, n, serial := m.Flat(p), p.NRanks, m.Serial(cost.FlatClass(p))
	f := func(q int) float64 {
		seg := ceilDiv(blockMax, q)
		sp := planSegments(blockMax, n, seg, segWindow)
		if sp.nseg != q || sp.seg != seg { // the same cut as a smaller q
			return math.Inf(1)
		}
		return t(l, m.Gamma, n, q, sp.window, bytesOf(seg, es), serial)
	}
	b := bytesOf(blockMax, es)
	lb := func(q int) float64 { return t(l, m.Gamma, n, q, q, b/float64(q), serial) }
	hi := min(blockMax, max(1, maxSegments/n))
	lo := 1
	if serial {
		// Where the transfers hide nothing (cost.Model.Serial), fewer
		// segments always cost less under the model, which does not see
		// what smaller ones gain: staging that stays in a core's cache.
		// Segments stay at most DefaultSegment there, as Segment 0 has
		// them: on this 2-core VM, 2 ranks, forced segmented-ring
		// allreduces of 4 and 16 MiB took 1280–1320 µs and 4620–4770
		// starting from the whole block as one segment, 800–875 and
		// 4350–5450 from at most DefaultSegment (and 1015–1035 and
		// 5150–5650 from the segments that the overlapped model chose;
		// MIAD adapting each).
		lo = min(ceilDiv(blockMax, DefaultSegment), hi)
	}
	q := minimize(lo, hi, f, lb)
	p.Segment = ceilDiv(blockMax, q)
	return p
}
