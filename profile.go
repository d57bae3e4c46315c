package braid

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/braid-ccl/braid/profile"
	"github.com/braid-ccl/braid/sched"
	"golang.org/x/sys/unix"
)

// The profiler (package profile): BRAID_PROFILE=FILE or Options.Profile
// makes every rank record its calls and write FILE.RANK and
// FILE.RANK.trace.json at Close. The hooks are one per kind of call:
// collective (blocking collectives), Comm.newRequest with Request.finish and
// Request.Wait (non-blocking collectives and point-to-point), and
// sendRecv (blocking point-to-point). With profiling off each costs one
// nil test of world.prof.

// checkProfile checks Options.Profile or BRAID_PROFILE: a path prefix in a
// directory that exists and can be written.
func checkProfile(path string) error {
	switch strings.ToLower(path) {
	case "0", "1", "on", "off", "true", "false", "yes", "no", "none":
		return errors.New("want the prefix of the files to write (each rank writes PREFIX.RANK and PREFIX.RANK.trace.json), e.g. /tmp/prof; leave it empty to profile nothing")
	}
	if strings.HasSuffix(path, "/") {
		return errors.New("want a file prefix, not a directory: each rank writes PREFIX.RANK and PREFIX.RANK.trace.json (e.g. " + filepath.Join(path, "prof") + ")")
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("directory %s: %v", dir, errors.Unwrap(err))
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("cannot write in %s: %v", dir, err)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return errors.New("is a directory: want the prefix of files to write (e.g. " + filepath.Join(path, "prof") + ")")
	}
	return nil
}

// startProfile makes w record its calls when the options name a profile.
// Init and NewLocal call it as they return, so that the wall time runs from
// there to Close.
func (w *world) startProfile() {
	if w.opts.Profile != "" {
		w.prof = profile.New(w.opts.Profile, w.rank, w.size, w.hosts[w.rank])
	}
}

// stopProfile writes w's profile. Close calls it before its own barrier,
// which is no call of the program's.
func (w *world) stopProfile() error {
	if w.prof == nil {
		return nil
	}
	if err := w.prof.Close(); err != nil {
		return &Error{Kind: InvalidArgument, Rank: w.rank, Call: "close", Peer: -1, Err: fmt.Errorf("BRAID_PROFILE=%s: %w", w.opts.Profile, err)}
	}
	return nil
}

// profCollective records the blocking collective k, which began at t0
// (profile.Untimed for a small call the profiler does not time) and ends
// now with *errp. Calls whose arguments did not check (k is empty) and
// calls on device buffers are not recorded.
func (c *Comm) profCollective(p *profile.Recorder, k *call, t0 int64, errp *error) {
	if k.name == "" {
		return
	}
	t1 := p.End(t0)
	cl := c.profCall(k)
	cl.Start, cl.End, cl.Failed = t0, t1, *errp != nil
	profArrival(&cl, k)
	p.Record(&cl)
}

// profArrival copies what the rank knew of k's arrival pattern into cl.
func profArrival(cl *profile.Call, k *call) {
	if k.pat.arrive == 0 {
		return
	}
	cl.Arrive, cl.Return = k.pat.arrive, k.pat.end
	if k.pat.known {
		cl.Known, cl.Worst, cl.Average = true, k.pat.worst, k.pat.avg
	}
}

// profCall describes the collective k for the profiler.
func (c *Comm) profCall(k *call) profile.Call {
	es := k.d.Size()
	b := int64(k.p.Count) * int64(es)
	switch k.p.Coll {
	case sched.Allgather, sched.Gather, sched.ReduceScatter, sched.Scatter, sched.Alltoall:
		// As braid bench and nccl-tests count them: the whole vector.
		b *= int64(k.p.NRanks)
	case sched.Barrier:
		b = 0
	}
	return profile.Call{Name: k.name, Kind: profile.Collective, Comm: c.id, Rank: c.rank, Group: k.p.NRanks, Seq: k.seq,
		DType: k.d.String(), InElems: int64(len(k.in) / es), OutElems: int64(len(k.out) / es), Bytes: b, Peer: -1,
		Algo: profAlgo(k)}
}

// profAlgos caches the names of algorithms with parameters, which
// choiceString would format anew for every call.
var profAlgos sync.Map // algoKey -> string

type algoKey struct {
	algo       string
	seg, radix int
	es         int
}

// profAlgo names the algorithm k ran as BRAID_ALGO would force it.
func profAlgo(k *call) string {
	if k.p.Segment == 0 && k.p.Radix == 0 {
		return k.algo
	}
	key := algoKey{k.algo, k.p.Segment, k.p.Radix, k.d.Size()}
	if s, ok := profAlgos.Load(key); ok {
		return s.(string)
	}
	s := choiceString(k.algo, k.p, k.d.Size())
	profAlgos.Store(key, s)
	return s
}

// profP2P records the blocking Send or Recv of buf with peer, which began
// at t0 and ends now with *errp. Calls whose arguments did not check are
// not recorded.
func (c *Comm) profP2P(p *profile.Recorder, name string, buf any, peer, tag int, t0 int64, errp *error) {
	t1 := p.End(t0)
	cl, ok := c.profP2PCall(name, buf, peer, tag)
	if !ok {
		return
	}
	cl.Start, cl.End, cl.Failed = t0, t1, *errp != nil
	p.Record(&cl)
}

func (c *Comm) profP2PCall(name string, buf any, peer, tag int) (profile.Call, bool) {
	b, d, err := view(buf)
	if err != nil || peer < 0 || peer >= c.Size() || peer == c.rank {
		return profile.Call{}, false
	}
	n := int64(len(b) / d.Size())
	cl := profile.Call{Name: name, Kind: profile.P2P, Comm: c.id, Rank: c.rank, Group: c.Size(), Tag: tag,
		DType: d.String(), Bytes: int64(len(b)), Peer: c.members[peer]}
	if name == "send" {
		cl.InElems = n
	} else {
		cl.OutElems = n
	}
	return cl, true
}

// profOp is what the profiler keeps of a non-blocking call until it ends.
type profOp struct {
	rec   *profile.Recorder
	c     *Comm
	name  string
	kind  profile.Kind
	t0    int64 // entry of the issuing method
	issue int64 // the issuing method's time, up to the start of the call
	k     *call // a collective, once checked and issued
	p2p   profile.Call
	ok    bool   // p2p is filled in
	seq   uint32 // the collective's sequence number, set at the end
}

// newRequest returns a Request for the non-blocking call name, which the
// profiler follows when it is on.
func (c *Comm) newRequest(name string) *Request {
	r := newRequest()
	if p := c.w.prof; p != nil {
		o := &profOp{rec: p, c: c, name: name, t0: p.Now()}
		if name == "send" || name == "recv" {
			o.kind = profile.P2P
		}
		r.prof = o
	}
	return r
}

// issued notes that the collective k was issued. o may be nil.
func (o *profOp) issued(k *call) {
	if o != nil {
		o.k = k
		o.issue = o.rec.Now() - o.t0
	}
}

// issuedP2P notes that the send or receive of buf with peer was posted. o
// may be nil.
func (o *profOp) issuedP2P(buf any, peer, tag int) {
	if o != nil {
		o.p2p, o.ok = o.c.profP2PCall(o.name, buf, peer, tag)
		o.issue = o.rec.Now() - o.t0
	}
}

// done records the call's end with err; Request.finish calls it once,
// before it wakes the waiters. Calls that failed before they were issued
// are not recorded.
func (o *profOp) done(err error) {
	t1 := o.rec.Now()
	var cl profile.Call
	switch {
	case o.k != nil:
		cl = o.c.profCall(o.k)
		profArrival(&cl, o.k)
		o.seq = o.k.seq
	case o.ok:
		cl = o.p2p
	default:
		return
	}
	cl.Async, cl.Start, cl.End, cl.Issue, cl.Failed = true, o.t0, t1, o.issue, err != nil
	o.rec.Record(&cl)
}

// waited records that Wait on r blocked from t0 to now.
func (o *profOp) waited(r *Request, t0 int64) {
	var seq uint32
	select {
	case <-r.done:
		seq = o.seq // written before done was closed
	default:
	}
	o.rec.Waited(o.name, o.kind, seq, t0, o.rec.Now())
}
