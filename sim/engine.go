package sim

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/braid-ccl/braid/sched"
)

// ref names one step of one rank.
type ref struct{ rank, step int32 }

// message is one Send with its matching receive.
type message struct {
	send, recv ref
	conn       int32
	bytes      int64
	eager      bool

	sendPosted, recvPosted bool
	delivered              bool // the data arrived before the receive was posted (eager)

	posted, head, start float64

	// While its data moves: bytes left at time last, at rate bytes/s.
	rem, rate, last float64
	ver             uint32 // bumped whenever rate changes; stale end events carry an older one
	mark            uint32 // reshare's visit mark
	newRate         float64
}

// conn is a FIFO connection: the messages of one (source, destination,
// channel) move one at a time, in the order they became ready.
type conn struct {
	src, dst int32
	ch       uint8
	route    []int   // every link, in order
	fin      []int32 // the links of finite bandwidth
	lat      float64 // the route's latency plus Config.StepOverhead
	queue    []int32
	qhead    int
	busy     bool
}

// linkState is one link during the run.
type linkState struct {
	bw    float64
	flows []int32 // messages whose data is moving over the link
	since float64 // when flows last became non-empty
	busy  float64
	bytes int64
	msgs  int

	mark uint32
	cap  float64 // reshare scratch: capacity not yet given out
	cnt  int     // reshare scratch: flows not yet frozen
}

type evKind uint8

const (
	evCompute evKind = iota // a (rank) b (step): a computation ended
	evLatency               // a (message): latency paid, data may move
	evFlowEnd               // a (message), ver: its last byte arrived
	evStart                 // a (rank): the rank enters (Config.Start)
)

type event struct {
	t    float64
	seq  uint64
	kind evKind
	ver  uint32
	a, b int32
}

// engine is the state of one simulation.
type engine struct {
	p     sched.Params
	progs []sched.Program
	cfg   Config
	es    int64

	base    []int   // base[r]: index of rank r's step 0 in the flat arrays
	done    []bool  // flat: the step has completed
	msgOf   []int32 // flat: the message of a Send, Recv or RecvReduce, else -1
	next    []int   // steps [0, next[r]) of rank r have been issued
	left    []int   // steps of rank r not yet completed
	waiting []int32 // the step rank r's issue waits for, or -1
	cpuFree []float64
	finish  []float64
	alias   []aliasInfo

	msgs  []message
	conns []conn
	links []linkState
	net   []Link

	now    float64
	seq    uint64
	heap   []event
	fifo   []event // events at time now, in order
	fhead  int
	dirty  []int32
	epoch  uint32
	events int

	compFlows []int32
	compLinks []int32

	flows    []Flow
	computes []Compute
}

type aliasInfo struct {
	inner sched.Buf
	off   int
	ok    bool
}

func newEngine(p sched.Params, progs []sched.Program, net *Network, cfg Config) (*engine, error) {
	n := p.NRanks
	e := &engine{
		p: p, progs: progs, cfg: cfg, es: int64(cfg.ElemSize),
		base: make([]int, n+1), next: make([]int, n), left: make([]int, n),
		waiting: make([]int32, n), cpuFree: make([]float64, n), finish: make([]float64, n),
		alias: make([]aliasInfo, n),
	}
	var l errs
	for r := range progs {
		e.base[r+1] = e.base[r] + len(progs[r].Steps)
		e.left[r] = len(progs[r].Steps)
		e.waiting[r] = -1
		if len(cfg.Start) > 0 {
			e.finish[r] = cfg.Start[r] // an empty program ends when it starts
		}
		if cfg.InPlace {
			inner, off, ok := p.InPlaceAlias(r)
			e.alias[r] = aliasInfo{inner, off, ok}
		}
		if progs[r].Rank != r {
			l.add(fmt.Errorf("sim: program at index %d is for rank %d", r, progs[r].Rank))
		}
	}
	if err := l.err(); err != nil {
		return nil, err
	}
	total := e.base[n]
	e.done = make([]bool, total)
	e.msgOf = make([]int32, total)

	// Check the steps and index the receives: recvs[r] maps (sender, tag)
	// of rank r's receives to their step index, -1 once matched.
	recvs := make([]map[uint64]int32, n)
	nsend := 0
	for r := range progs {
		nrecv := 0
		for i := range progs[r].Steps {
			if k := progs[r].Steps[i].Kind; k == sched.KindRecv || k == sched.KindRecvReduce {
				nrecv++
			}
		}
		recvs[r] = make(map[uint64]int32, nrecv)
		for i := range progs[r].Steps {
			e.msgOf[e.base[r]+i] = -1
			s := &progs[r].Steps[i]
			for _, d := range s.Deps {
				if d < 0 || int(d) >= i {
					l.add(stepError(r, i, s, "depends on step %d, which is not an earlier step", d))
				}
			}
			switch s.Kind {
			case sched.KindCopy, sched.KindReduce:
				if s.Src.Len != s.Dst.Len || s.Dst.Len < 0 {
					l.add(stepError(r, i, s, "source and destination lengths differ"))
				}
				continue
			case sched.KindSend, sched.KindRecv, sched.KindRecvReduce:
			default:
				l.add(stepError(r, i, s, "unknown step kind"))
				continue
			}
			if s.Peer < 0 || s.Peer >= n || s.Peer == r {
				l.add(stepError(r, i, s, "peer %d is not another rank in [0, %d)", s.Peer, n))
				continue
			}
			if s.Len() < 0 {
				l.add(stepError(r, i, s, "negative length"))
				continue
			}
			if s.Kind == sched.KindSend {
				nsend++
				continue
			}
			k := msgKey(s.Peer, s.Tag)
			if j, dup := recvs[r][k]; dup {
				l.add(stepError(r, i, s, "receives tag %d from rank %d as step %d does", s.Tag, s.Peer, j))
				continue
			}
			recvs[r][k] = int32(i)
		}
	}
	if err := l.err(); err != nil {
		return nil, err
	}

	// Match every Send to its receive; make the messages and connections.
	e.msgs = make([]message, 0, nsend)
	connOf := map[chanKey]int32{}
	for r := range progs {
		for i := range progs[r].Steps {
			s := &progs[r].Steps[i]
			if s.Kind != sched.KindSend {
				continue
			}
			k := msgKey(r, s.Tag)
			j, ok := recvs[s.Peer][k]
			if !ok {
				l.add(stepError(r, i, s, "no matching recv or recvreduce from rank %d with tag %d on rank %d", r, s.Tag, s.Peer))
				continue
			}
			if j < 0 {
				l.add(stepError(r, i, s, "sends tag %d to rank %d again", s.Tag, s.Peer))
				continue
			}
			rs := &progs[s.Peer].Steps[j]
			if rs.Dst.Len != s.Src.Len {
				l.add(stepError(r, i, s, "sends %d elements, but rank %d step %d (%v) receives %d", s.Src.Len, s.Peer, j, rs, rs.Dst.Len))
				continue
			}
			recvs[s.Peer][k] = -1 // matched
			ck := chanKey{r, s.Peer, s.Channel}
			c, ok := connOf[ck]
			if !ok {
				route, err := net.Route(r, s.Peer, s.Channel)
				if err != nil {
					return nil, err
				}
				c = int32(len(e.conns))
				connOf[ck] = c
				e.conns = append(e.conns, conn{src: int32(r), dst: int32(s.Peer), ch: s.Channel, route: route})
			}
			id := int32(len(e.msgs))
			bytes := int64(s.Src.Len) * e.es
			e.msgs = append(e.msgs, message{
				send: ref{int32(r), int32(i)}, recv: ref{int32(s.Peer), j}, conn: c,
				bytes: bytes, eager: cfg.Eager > 0 && bytes <= cfg.Eager,
			})
			e.msgOf[e.base[r]+i] = id
			e.msgOf[e.base[s.Peer]+int(j)] = id
		}
	}
	for r := range progs {
		// Report unmatched receives in step order, not map order.
		for i := range progs[r].Steps {
			s := &progs[r].Steps[i]
			if (s.Kind == sched.KindRecv || s.Kind == sched.KindRecvReduce) && recvs[r][msgKey(s.Peer, s.Tag)] >= 0 {
				l.add(stepError(r, i, s, "no matching send to rank %d with tag %d on rank %d", r, s.Tag, s.Peer))
			}
		}
	}
	if err := l.err(); err != nil {
		return nil, err
	}

	e.net = net.Links()
	e.links = make([]linkState, len(e.net))
	for i := range e.links {
		e.links[i].bw = e.net[i].Bandwidth
	}
	for ci := range e.conns {
		c := &e.conns[ci]
		c.lat = cfg.StepOverhead
		for _, id := range c.route {
			c.lat += e.net[id].Latency
			if !math.IsInf(e.net[id].Bandwidth, 1) {
				c.fin = append(c.fin, int32(id))
			}
		}
	}
	return e, nil
}

// msgKey packs a peer and a tag into a map key.
func msgKey(peer int, tag int32) uint64 { return uint64(peer)<<32 | uint64(uint32(tag)) }

func (e *engine) isDone(r, i int) bool { return e.done[e.base[r]+i] }

// schedule adds an event at time t ≥ now.
func (e *engine) schedule(t float64, kind evKind, a, b int32, ver uint32) {
	e.seq++
	ev := event{t: t, seq: e.seq, kind: kind, a: a, b: b, ver: ver}
	if t <= e.now {
		ev.t = e.now
		e.fifo = append(e.fifo, ev)
		return
	}
	e.push(ev)
}

func (a *event) before(b *event) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}

func (e *engine) push(ev event) {
	h := append(e.heap, ev)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	e.heap = h
}

func (e *engine) pop() event {
	h := e.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1].before(&h[c]) {
			c++
		}
		if !h[c].before(&h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	e.heap = h
	return top
}

// run processes events until none is left.
func (e *engine) run(ctx context.Context) error {
	for r := range e.progs {
		switch {
		case e.left[r] == 0:
		case len(e.cfg.Start) > 0 && e.cfg.Start[r] > 0:
			e.schedule(e.cfg.Start[r], evStart, int32(r), 0, 0)
		default:
			e.issue(r)
		}
	}
	for {
		var ev event
		switch {
		case e.fhead < len(e.fifo):
			ev = e.fifo[e.fhead]
			e.fhead++
			if e.fhead == len(e.fifo) {
				e.fifo, e.fhead = e.fifo[:0], 0
			}
		case len(e.heap) > 0 && e.heap[0].t <= e.now:
			ev = e.pop()
		case len(e.dirty) > 0:
			e.reshare()
			continue
		case len(e.heap) > 0:
			ev = e.pop()
			e.now = ev.t
		default:
			for r := range e.left {
				if e.left[r] > 0 {
					return e.deadlock()
				}
			}
			return nil
		}
		if ev.kind == evFlowEnd && e.msgs[ev.a].ver != ev.ver {
			continue // the flow's rate changed since
		}
		e.events++
		if e.events&(1<<16-1) == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		switch ev.kind {
		case evCompute:
			e.markDone(int(ev.a), int(ev.b))
			e.issue(int(ev.a))
		case evLatency:
			m := &e.msgs[ev.a]
			m.start = e.now
			if m.bytes == 0 || len(e.conns[m.conn].fin) == 0 {
				e.deliver(ev.a)
			} else {
				e.addFlow(ev.a)
			}
		case evFlowEnd:
			e.removeFlow(ev.a)
			e.deliver(ev.a)
		case evStart:
			e.issue(int(ev.a))
		}
	}
}

// markDone records that step i of rank r completed.
func (e *engine) markDone(r, i int) {
	e.done[e.base[r]+i] = true
	e.left[r]--
	if e.left[r] == 0 {
		e.finish[r] = e.now
	}
}

// complete records that step i of rank r completed and resumes the rank's
// issue if it waited for that step.
func (e *engine) complete(r, i int) {
	e.markDone(r, i)
	if e.waiting[r] == int32(i) {
		e.waiting[r] = -1
		e.issue(r)
	}
}

// issue issues rank r's steps in order, as the executor does, until one
// must wait: for a dependency, or for the rank's processor, busy with a
// computation (Copy and Reduce run on the issuing thread, and so does the
// reduction of a RecvReduce once its data is in).
func (e *engine) issue(r int) {
	steps := e.progs[r].Steps
	e.waiting[r] = -1
	for e.next[r] < len(steps) {
		if e.cpuFree[r] > e.now {
			return // the computation's end event resumes the rank
		}
		i := e.next[r]
		s := &steps[i]
		for _, d := range s.Deps {
			if !e.done[e.base[r]+int(d)] {
				e.waiting[r] = d
				return
			}
		}
		e.next[r]++
		switch s.Kind {
		case sched.KindCopy, sched.KindReduce:
			b := int64(s.Dst.Len) * e.es
			d := e.cfg.StepOverhead
			switch {
			case s.Kind == sched.KindReduce:
				d += float64(b) * e.cfg.Gamma
			case e.cfg.CopyBandwidth > 0 && !e.sameMemory(r, s.Src, s.Dst):
				d += float64(b) / e.cfg.CopyBandwidth
			}
			e.compute(r, i, s.Kind, b, e.now, d, true)
		case sched.KindSend:
			m := e.msgOf[e.base[r]+i]
			e.msgs[m].sendPosted = true
			if e.msgs[m].eager || e.msgs[m].recvPosted {
				e.ready(m)
			}
		default: // Recv, RecvReduce
			m := e.msgOf[e.base[r]+i]
			msg := &e.msgs[m]
			msg.recvPosted = true
			switch {
			case msg.delivered:
				e.received(m, true)
			case !msg.eager && msg.sendPosted:
				e.ready(m)
			}
		}
	}
}

// compute runs a computation of d seconds for step i of rank r, starting
// at start (when the rank's processor is free). Called from issue (inIssue),
// it must not resume the issue itself.
func (e *engine) compute(r, i int, kind sched.Kind, bytes int64, start, d float64, inIssue bool) {
	if e.cfg.Timeline {
		e.computes = append(e.computes, Compute{Rank: r, Step: i, Kind: kind, Bytes: bytes, Start: start, End: start + d})
	}
	if d > 0 {
		e.cpuFree[r] = start + d
		e.schedule(start+d, evCompute, int32(r), int32(i), 0)
		return
	}
	if inIssue {
		e.markDone(r, i)
	} else {
		e.complete(r, i)
	}
}

// sameMemory reports whether chunks a and b of rank r start at the same
// element of the same memory under the in-place aliasing.
func (e *engine) sameMemory(r int, a, b sched.Chunk) bool {
	norm := func(c sched.Chunk) (sched.Buf, int) {
		al := e.alias[r]
		if al.ok && c.Buf == al.inner {
			outer := sched.Out
			if al.inner == sched.Out {
				outer = sched.In
			}
			return outer, c.Off + al.off
		}
		return c.Buf, c.Off
	}
	ab, ao := norm(a)
	bb, bo := norm(b)
	return ab == bb && ao == bo
}

// ready queues message m on its connection: it may go.
func (e *engine) ready(m int32) {
	e.msgs[m].posted = e.now
	c := &e.conns[e.msgs[m].conn]
	c.queue = append(c.queue, m)
	if !c.busy {
		e.startHead(c)
	}
}

// startHead starts the first queued message of c: it pays the route's
// latency, then its data moves.
func (e *engine) startHead(c *conn) {
	m := c.queue[c.qhead]
	c.qhead++
	if c.qhead == len(c.queue) {
		c.queue, c.qhead = c.queue[:0], 0
	}
	c.busy = true
	e.msgs[m].head = e.now
	e.schedule(e.now+c.lat, evLatency, m, 0, 0)
}

// deliver records that message m arrived.
func (e *engine) deliver(m int32) {
	msg := &e.msgs[m]
	c := &e.conns[msg.conn]
	for _, id := range c.route {
		e.links[id].bytes += msg.bytes
		e.links[id].msgs++
	}
	if e.cfg.Timeline {
		e.flows = append(e.flows, Flow{
			Src: int(c.src), Dst: int(c.dst), Channel: c.ch,
			Tag:      e.progs[msg.send.rank].Steps[msg.send.step].Tag,
			SendStep: int(msg.send.step), RecvStep: int(msg.recv.step),
			Bytes: msg.bytes, Posted: msg.posted, Head: msg.head, Start: msg.start, End: e.now,
			Route: c.route,
		})
	}
	c.busy = false
	if c.qhead < len(c.queue) {
		e.startHead(c)
	}
	e.complete(int(msg.send.rank), int(msg.send.step))
	if msg.recvPosted {
		e.received(m, false)
	} else {
		msg.delivered = true
	}
}

// received completes the receive of message m, whose data is in and whose
// receive is posted; a RecvReduce first reduces on the receiver's
// processor.
func (e *engine) received(m int32, inIssue bool) {
	msg := &e.msgs[m]
	r, i := int(msg.recv.rank), int(msg.recv.step)
	if e.progs[r].Steps[i].Kind == sched.KindRecvReduce {
		e.compute(r, i, sched.KindRecvReduce, msg.bytes, max(e.now, e.cpuFree[r]), float64(msg.bytes)*e.cfg.Gamma, inIssue)
		return
	}
	if inIssue {
		e.markDone(r, i)
	} else {
		e.complete(r, i)
	}
}

func (e *engine) markDirty(l int32) {
	ls := &e.links[l]
	if ls.mark != e.epoch+1 {
		ls.mark = e.epoch + 1
		e.dirty = append(e.dirty, l)
	}
}

// addFlow puts message m's data on its links.
func (e *engine) addFlow(m int32) {
	msg := &e.msgs[m]
	msg.rem, msg.rate, msg.last = float64(msg.bytes), 0, e.now
	for _, l := range e.conns[msg.conn].fin {
		ls := &e.links[l]
		if len(ls.flows) == 0 {
			ls.since = e.now
		}
		ls.flows = append(ls.flows, m)
		e.markDirty(l)
	}
}

// removeFlow takes message m's data off its links.
func (e *engine) removeFlow(m int32) {
	msg := &e.msgs[m]
	msg.rem, msg.rate = 0, 0
	msg.ver++
	for _, l := range e.conns[msg.conn].fin {
		ls := &e.links[l]
		for k, f := range ls.flows {
			if f == m {
				last := len(ls.flows) - 1
				ls.flows[k] = ls.flows[last]
				ls.flows = ls.flows[:last]
				break
			}
		}
		if len(ls.flows) == 0 {
			ls.busy += e.now - ls.since
		}
		e.markDirty(l)
	}
}

// reshare gives every flow that shares a link, directly or through other
// flows, with a link whose flows changed its max-min fair rate
// (progressive filling), and reschedules the end of those whose rate
// changed. Flows elsewhere keep their rates: max-min fairness splits over
// the connected components of the flow-link graph.
func (e *engine) reshare() {
	e.epoch++ // dirty links carry this mark already
	ep := e.epoch
	links := append(e.compLinks[:0], e.dirty...)
	e.dirty = e.dirty[:0]
	flows := e.compFlows[:0]
	for k := 0; k < len(links); k++ {
		for _, f := range e.links[links[k]].flows {
			msg := &e.msgs[f]
			if msg.mark == ep {
				continue
			}
			msg.mark = ep
			flows = append(flows, f)
			for _, l := range e.conns[msg.conn].fin {
				if e.links[l].mark != ep {
					e.links[l].mark = ep
					links = append(links, l)
				}
			}
		}
	}
	for _, f := range flows {
		msg := &e.msgs[f]
		msg.rem -= msg.rate * (e.now - msg.last)
		msg.rem = max(msg.rem, 0)
		msg.last = e.now
		msg.newRate = -1
	}
	for _, l := range links {
		ls := &e.links[l]
		ls.cap, ls.cnt = ls.bw, len(ls.flows)
	}
	for left := len(flows); left > 0; {
		var bott *linkState
		share := math.Inf(1)
		for _, l := range links {
			ls := &e.links[l]
			if ls.cnt > 0 && ls.cap/float64(ls.cnt) < share {
				share, bott = ls.cap/float64(ls.cnt), ls
			}
		}
		if bott == nil {
			break // cannot happen: every flow has a finite link
		}
		if !(share > 0) {
			// Rounding left the bottleneck no capacity; give its flows a
			// sliver rather than stop them for ever.
			share = bott.bw * 1e-12
		}
		for _, f := range bott.flows {
			msg := &e.msgs[f]
			if msg.newRate >= 0 {
				continue
			}
			msg.newRate = share
			left--
			for _, l := range e.conns[msg.conn].fin {
				ls := &e.links[l]
				ls.cap -= share
				ls.cnt--
			}
		}
	}
	for _, f := range flows {
		msg := &e.msgs[f]
		if msg.newRate == msg.rate {
			continue
		}
		msg.rate = msg.newRate
		msg.ver++
		e.schedule(e.now+msg.rem/msg.rate, evFlowEnd, f, 0, msg.ver)
	}
	e.compLinks, e.compFlows = links[:0], flows[:0]
}

// result collects what the run measured.
func (e *engine) result() *Result {
	start := slices.Clone(e.cfg.Start)
	if len(start) == 0 {
		start = make([]float64, len(e.progs))
	}
	res := &Result{Finish: e.finish, Start: start, Messages: len(e.msgs), Events: e.events, Flows: e.flows, Computes: e.computes, timeline: e.cfg.Timeline}
	for _, t := range e.finish {
		res.Time = max(res.Time, t)
	}
	for _, m := range e.msgs {
		res.Bytes += m.bytes
	}
	res.Links = make([]LinkStats, len(e.links))
	for i, ls := range e.links {
		st := LinkStats{Bytes: ls.bytes, Messages: ls.msgs, Busy: ls.busy}
		if !math.IsInf(ls.bw, 1) && res.Time > 0 {
			st.Utilization = float64(ls.bytes) / (ls.bw * res.Time)
		}
		res.Links[i] = st
	}
	return res
}
