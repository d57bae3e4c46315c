package exec

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/par"
	"github.com/braid-ccl/braid/internal/reduce"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
)

// host is the state of the executor's own backend, Run's: steps over
// env.Conn's transports on host memory, reductions with the host kernels.
// The loop runs its copies and reductions itself, starts its transfers
// with startHost, tests their requests and completes them with finish:
// direct calls, no indirect call per step.
type host struct {
	in     []byte
	out    []byte
	tmp    *[]byte
	es     int
	kernel reduce.Kernel
	red    reduceTask // scratch of reduceInto
	reqs   []transport.Request
	stage  []*[]byte
}

// splitMin is the least bytes of a copy or reduction that the executor
// splits across the rank's threads (package par): par's size where set
// (par.SetThreads, par.EnvMinSize), else splitFloor.
func splitMin() int { return par.MinSizeOr(splitFloor) }

// splitFloor is the executor's default in place of par.DefaultMinSize:
// between its transfers a split costs more than it gives below 2 MiB. On
// the 16-core node (session 19, 2 ranks of 8 threads, three rounds) the
// direct allgather of 1 MiB, whose one copy (512 KiB, the rank's own
// block) par split, took 157 µs, and 81–98 with copies unsplit; Bruck's
// 167 and 78–82; of 2 MiB 262 and 205; at 4 MiB the split gave 3–14 %
// (direct: 390 µs against 428–454). The shared area, whose copies follow
// one another, gains from par.MinSize (shmcoll).
const splitFloor = 2 << 20

// copySplit copies src to dst, split across the rank's threads from
// splitMin bytes.
func copySplit(dst, src []byte) {
	if len(dst) < splitMin() {
		copy(dst, src)
		return
	}
	par.Copy(dst, src)
}

// reduceTask is a reduction that package par splits.
type reduceTask struct {
	k        reduce.Kernel
	dst, src []byte
}

func (t *reduceTask) Piece(lo, hi int) { t.k(t.dst[lo:hi], t.src[lo:hi]) }

// reduceInto does k(dst, src), split at element bounds (es bytes) across
// the rank's threads when large (package par); t is the caller's scratch,
// so that nothing is allocated.
func reduceInto(t *reduceTask, k reduce.Kernel, es int, dst, src []byte) {
	if len(dst) < splitMin() || len(src) != len(dst) {
		k(dst, src)
		return
	}
	t.k, t.dst, t.src = k, dst, src
	par.Run(len(dst), es, t)
	*t = reduceTask{}
}

// bufPools recycle scratch and staging buffers by size class (bufClass),
// so that a request takes a buffer of about its own size: with one pool
// for every size, a small request could hold on to a huge buffer, and a
// large one, finding a small buffer, allocated anew while the small one
// went back, so that memory grew with the spread of sizes (braid tune
// reached 9 GiB).
var bufPools [4*64 + 1]sync.Pool

// bufClass returns the size class of an n-byte buffer and the size of its
// buffers: 64 bytes and below share class 0; above, each power of two is
// split in quarters (5/8, 6/8, 7/8 and 8/8 of it), so that a buffer is at
// most 25% larger than asked for.
func bufClass(n int) (class, size int) {
	if n <= 64 {
		return 0, 64
	}
	k := bits.Len(uint(n - 1)) // 2^(k-1) < n <= 2^k, k >= 7
	step := 1 << (k - 3)
	q := (n + step - 1) / step // 5..8
	return (k-7)*4 + q - 4, q * step
}

// getBuf returns a buffer of n bytes, aligned for every element type.
func getBuf(n int) *[]byte {
	if n == 0 {
		return nil
	}
	class, size := bufClass(n)
	if p, _ := bufPools[class].Get().(*[]byte); p != nil {
		*p = (*p)[:n]
		return p
	}
	w := make([]uint64, size/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), size)[:n]
	return &b
}

// putBuf returns a buffer from getBuf to its class's pool.
func putBuf(p *[]byte) {
	if p == nil {
		return
	}
	class, size := bufClass(cap(*p))
	if size != cap(*p) {
		return // not from getBuf
	}
	bufPools[class].Put(p)
}

func (r *run) slice(c sched.Chunk) []byte {
	var base []byte
	switch c.Buf {
	case sched.In:
		base = r.in
	case sched.Out:
		base = r.out
	default:
		if r.tmp != nil {
			base = *r.tmp
		}
	}
	lo, hi := c.Off*r.es, (c.Off+c.Len)*r.es
	return base[lo:hi:hi]
}

// startHost starts the send or receive step i, whose dependencies have
// completed, on its connection; it completes at once if its transport
// already could. (The loop runs copies and reductions itself.)
func (r *run) startHost(i int) error {
	s := &r.prog.Steps[i]
	c := r.env.Conn(s.Peer)
	if c == nil {
		return r.stepErr(i, fmt.Errorf("no connection to rank %d", s.Peer))
	}
	tag := r.env.Tag
	tag.Step = uint32(s.Tag)
	var req transport.Request
	var e error
	switch s.Kind {
	case sched.KindSend:
		req, e = c.Isend(tag, r.slice(s.Src))
	case sched.KindRecv:
		req, e = c.Irecv(tag, r.slice(s.Dst))
	case sched.KindRecvReduce:
		r.stage[i] = getBuf(s.Dst.Len * r.es)
		req, e = c.Irecv(tag, *r.stage[i])
	default:
		e = fmt.Errorf("unknown step kind %v", s.Kind)
	}
	if e != nil {
		return r.stepErr(i, e)
	}
	r.reqs[i] = req
	r.status[i] = running
	// Complete at once what can be: saves a trip through progress.
	done, e := req.Test()
	if e != nil {
		return r.stepErr(i, e)
	}
	if done {
		r.finish(int32(i))
		return nil
	}
	r.pending = append(r.pending, int32(i))
	return nil
}

// finish completes step i, whose request is done.
func (r *run) finish(i int32) {
	s := &r.prog.Steps[i]
	if s.Kind == sched.KindRecvReduce {
		reduceInto(&r.red, r.kernel, r.es, r.slice(s.Dst), *r.stage[i])
		putBuf(r.stage[i])
		r.stage[i] = nil
	}
	r.status[i] = complete
	r.reqs[i] = nil
}

// releaseHost withdraws the requests still running after a failure (see
// transport.Canceler), so that no transport writes into the caller's
// buffers once Run has returned, and returns the run's memory to the
// pools. A staging buffer of a failed run is left to the garbage
// collector, in case its transport could not withdraw its request.
func (r *run) releaseHost(failed bool) {
	if failed {
		for i, st := range r.status {
			if st == running && r.reqs[i] != nil {
				transport.Cancel(r.reqs[i])
			}
		}
	}
	for i := range r.stage {
		if !failed {
			putBuf(r.stage[i])
		}
		r.stage[i] = nil
		r.reqs[i] = nil
	}
	if !failed {
		putBuf(r.tmp)
	}
	r.tmp, r.in, r.out, r.kernel = nil, nil, nil, nil
}

// kernels caches reduce.For per (dtype, op).
var kernels = func() (k [32][16]reduce.Kernel) {
	for _, d := range dtype.All() {
		for _, o := range dtype.AllOps() {
			k[d][o], _ = reduce.For(d, o)
		}
	}
	return k
}()

func kernelFor(d dtype.DType, o dtype.Op) (reduce.Kernel, error) {
	if int(d) < len(kernels) && int(o) < len(kernels[0]) && kernels[d][o] != nil {
		return kernels[d][o], nil
	}
	return reduce.For(d, o)
}
