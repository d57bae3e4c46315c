package algo_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/braid-ccl/braid/sched"
)

// fakeNet carries the messages of ranks that run a dynamic algorithm on
// fakeExecs, in one process: a message waits in its (sender, receiver,
// tag) queue until a receive takes it, and its send completes then (as a
// rendezvous transport's does), so that a sender is busy until its
// receiver has the data.
type fakeNet struct {
	mu   sync.Mutex
	cond *sync.Cond
	box  map[[3]int][]*fakeMsg
}

type fakeMsg struct {
	data  []float64
	word  uint64
	taken bool
}

func newFakeNet() *fakeNet {
	f := &fakeNet{box: map[[3]int][]*fakeMsg{}}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// fakeExec is a sched.Exec over a fakeNet with float64 elements. It logs
// the steps that move data (sends and receives of chunks, copies) and
// the words it sends, for the test to compare with the algorithm's Trace.
type fakeExec struct {
	net      *fakeNet
	rank     int
	in, out  []float64
	reqs     []fakeReq
	steps    []sched.Step
	words    []fakeWord
	deadline time.Time
}

type fakeReq struct {
	send bool
	key  [3]int
	dst  sched.Chunk
	word bool
	msg  *fakeMsg // a send's message
	done bool
	w    uint64
}

// fakeWord is a word a rank sent.
type fakeWord struct {
	peer int
	tag  int32
	v    uint64
}

func (x *fakeExec) chunk(c sched.Chunk) []float64 {
	b := x.in
	if c.Buf == sched.Out {
		b = x.out
	}
	return b[c.Off : c.Off+c.Len]
}

func (x *fakeExec) add(r fakeReq) sched.Handle {
	x.reqs = append(x.reqs, r)
	return sched.Handle(len(x.reqs) - 1)
}

func (x *fakeExec) post(peer int, tag int32, m *fakeMsg) sched.Handle {
	k := [3]int{x.rank, peer, int(tag)}
	x.net.mu.Lock()
	x.net.box[k] = append(x.net.box[k], m)
	x.net.cond.Broadcast()
	x.net.mu.Unlock()
	return x.add(fakeReq{send: true, key: k, msg: m})
}

func (x *fakeExec) Send(peer int, tag int32, src sched.Chunk) sched.Handle {
	x.steps = append(x.steps, sched.Step{Kind: sched.KindSend, Peer: peer, Tag: tag, Src: src})
	return x.post(peer, tag, &fakeMsg{data: append([]float64(nil), x.chunk(src)...)})
}

func (x *fakeExec) Recv(peer int, tag int32, dst sched.Chunk) sched.Handle {
	x.steps = append(x.steps, sched.Step{Kind: sched.KindRecv, Peer: peer, Tag: tag, Dst: dst})
	return x.add(fakeReq{key: [3]int{peer, x.rank, int(tag)}, dst: dst})
}

func (x *fakeExec) RecvReduce(peer int, tag int32, dst sched.Chunk) sched.Handle {
	panic("fakeExec: RecvReduce")
}

func (x *fakeExec) SendWord(peer int, tag int32, v uint64) sched.Handle {
	x.words = append(x.words, fakeWord{peer, tag, v})
	return x.post(peer, tag, &fakeMsg{word: v})
}

func (x *fakeExec) RecvWord(peer int, tag int32) sched.Handle {
	return x.add(fakeReq{key: [3]int{peer, x.rank, int(tag)}, word: true})
}

func (x *fakeExec) Word(h sched.Handle) uint64 { return x.reqs[h].w }

// test completes h if it can; x.net.mu is held.
func (x *fakeExec) test(h sched.Handle) bool {
	r := &x.reqs[h]
	if r.done {
		return true
	}
	if r.send {
		r.done = r.msg.taken
		return r.done
	}
	q := x.net.box[r.key]
	if len(q) == 0 {
		return false
	}
	m := q[0]
	x.net.box[r.key] = q[1:]
	m.taken = true
	x.net.cond.Broadcast()
	if r.word {
		r.w = m.word
	} else {
		copy(x.chunk(r.dst), m.data)
	}
	r.done = true
	return true
}

func (x *fakeExec) Test(h sched.Handle) (bool, error) {
	x.net.mu.Lock()
	defer x.net.mu.Unlock()
	return x.test(h), nil
}

func (x *fakeExec) Wait(h sched.Handle) error {
	_, err := x.WaitAny([]sched.Handle{h})
	return err
}

func (x *fakeExec) WaitAny(hs []sched.Handle) (int, error) {
	x.net.mu.Lock()
	defer x.net.mu.Unlock()
	for {
		for i, h := range hs {
			if x.test(h) {
				return i, nil
			}
		}
		if time.Now().After(x.deadline) {
			return -1, fmt.Errorf("rank %d: requests %v never completed", x.rank, hs)
		}
		x.net.cond.Wait()
	}
}

func (x *fakeExec) Copy(src, dst sched.Chunk) {
	x.steps = append(x.steps, sched.Step{Kind: sched.KindCopy, Src: src, Dst: dst})
	copy(x.chunk(dst), x.chunk(src))
}

func (x *fakeExec) Reduce(src, dst sched.Chunk) { panic("fakeExec: Reduce") }

// runFake runs a on every rank of p over a fakeNet, rank r after delay[r],
// with inputs in (the root's, for a broadcast), and returns every rank's
// executor after the run.
func runFake(a sched.Dynamic, p sched.Params, in [][]float64, delay []time.Duration) ([]*fakeExec, error) {
	net := newFakeNet()
	xs := make([]*fakeExec, p.NRanks)
	errs := make([]error, p.NRanks)
	var wg sync.WaitGroup
	// A waiter sleeping in cond.Wait sees the deadline only when woken:
	// wake everyone now and then.
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				net.mu.Lock()
				net.cond.Broadcast()
				net.mu.Unlock()
			}
		}
	}()
	defer close(stop)
	for r := range p.NRanks {
		xs[r] = &fakeExec{net: net, rank: r, in: in[r], out: make([]float64, p.OutLen(r)), deadline: time.Now().Add(20 * time.Second)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delay[r])
			errs[r] = a.Run(p, r, xs[r])
			// Every request must complete, as RunDynamic requires.
			for h := range xs[r].reqs {
				if errs[r] == nil {
					errs[r] = xs[r].Wait(sched.Handle(h))
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return xs, nil
}
