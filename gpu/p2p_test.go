package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// p2pPair is two ranks' executors sharing a mailbox in Go memory: enough
// for the notices of point-to-point calls, without a GPU.
func p2pPair() [2]*Comm {
	mem := make([]byte, mailboxSize(2))
	var gs [2]*Comm
	for r := range gs {
		gs[r] = &Comm{rank: r, n: 2, mb: mailbox{mem: mem, n: 2, rank: r}, outbox: make([][]notice, 2), stash: map[stashKey]notice{}}
	}
	return gs
}

// p2pCall is the state of a one-step point-to-point call of message
// number num.
func p2pCall(st sched.Step, num uint32, dt dtype.DType) *call {
	k := &Call{Params: sched.Params{NRanks: 2}, Prog: &sched.Program{Steps: []sched.Step{st}}, DType: dt, P2P: []uint32{num}}
	return &call{k: k, steps: k.Prog.Steps, seq: 1}
}

// TestP2PNotices checks how the two ends of a point-to-point message find
// each other's notices: numbered per message and marked apart from the
// collectives' (a collective's notice of the same number and tag is not
// taken for it), and a message whose ends differ in length or type is
// refused on both ends, each naming the other's length and type.
func TestP2PNotices(t *testing.T) {
	gs := p2pPair()
	send := p2pCall(sched.Step{Kind: sched.KindSend, Peer: 1, Tag: 3, Src: sched.Chunk{Buf: sched.In, Len: 10}}, 1, dtype.Float32)
	recv := p2pCall(sched.Step{Kind: sched.KindRecv, Peer: 0, Tag: 3, Dst: sched.Chunk{Buf: sched.Out, Len: 12}}, 1, dtype.Float32)

	// A collective's offer of call 1, tag 3, is not this message's.
	gs[1].send(0, notice{Kind: noticeDest, Seq: 1, Tag: 3})
	gs[0].drain()
	if _, ok := gs[0].takeStep(send, noticeDest, 0); ok {
		t.Fatal("a point-to-point send took a collective's offer")
	}
	if _, ok := gs[0].take(1, noticeDest, 1, 3); !ok {
		t.Fatal("the collective's offer is gone")
	}

	// The receiver offers 12 elements; the sender has 10: refused.
	gs[1].send(0, recv.note(noticeDest, 0))
	gs[0].drain()
	n, ok := gs[0].takeStep(send, noticeDest, 0)
	if !ok {
		t.Fatal("the sender did not find the receiver's offer")
	}
	if n.Count != 12 || n.DType != uint32(dtype.Float32) || n.Kind != noticeDest|noticeP2P || n.Seq != 1 {
		t.Fatalf("the offer: %+v", n)
	}
	err := gs[0].refused(send, 0, &n, noticeWritten)
	var sm *SizeMismatchError
	if !errors.As(err, &sm) || sm.Peer != 1 || !sm.Send || sm.Count != 10 || sm.PeerCount != 12 {
		t.Fatalf("the sender: %v, want a SizeMismatchError for 10 against 12 elements", err)
	}
	gs[1].drain()
	w, ok := gs[1].takeStep(recv, noticeWritten, 0)
	if !ok || w.Flags&flagRefused == 0 || w.Flags&flagEvent != 0 {
		t.Fatalf("the receiver got %+v (%v), want a refusal without an event", w, ok)
	}
	err = gs[1].refused(recv, 0, &w, noticeWritten)
	if !errors.As(err, &sm) || sm.Peer != 0 || sm.Send || sm.Count != 12 || sm.PeerCount != 10 ||
		!strings.Contains(err.Error(), "recv of 12 float32 elements with tag 3, and rank 0's matching send has 10 float32 elements") {
		t.Fatalf("the receiver: %v", err)
	}
	gs[0].drain()
	if len(gs[0].stash) != 0 {
		t.Errorf("the receiver answered a refusal: %v", gs[0].stash)
	}

	// Matching ends of message 2: no refusal; the type counts too.
	send2 := p2pCall(sched.Step{Kind: sched.KindSend, Peer: 1, Tag: 3, Src: sched.Chunk{Buf: sched.In, Len: 12}}, 2, dtype.Float32)
	recv2 := p2pCall(sched.Step{Kind: sched.KindRecv, Peer: 0, Tag: 3, Dst: sched.Chunk{Buf: sched.Out, Len: 12}}, 2, dtype.Float32)
	o := recv2.note(noticeDest, 0)
	if err := gs[0].refused(send2, 0, &o, noticeWritten); err != nil {
		t.Errorf("matching ends: %v", err)
	}
	recv2.k.DType = dtype.Int32
	o = recv2.note(noticeDest, 0)
	if err := gs[0].refused(send2, 0, &o, noticeWritten); !errors.As(err, &sm) || sm.PeerDType != dtype.Int32 {
		t.Errorf("float32 sent into int32: %v", err)
	}
}

// TestP2PCheck checks the calls Run refuses as point-to-point.
func TestP2PCheck(t *testing.T) {
	g := &Comm{rank: 0, n: 2}
	good := sched.Step{Kind: sched.KindSend, Peer: 1, Src: sched.Chunk{Buf: sched.In, Len: 4}}
	for _, k := range []struct {
		name  string
		steps []sched.Step
		nums  int
		coll  sched.Collective
		want  string
	}{
		{"send", []sched.Step{good}, 1, 0, ""},
		{"a number short", []sched.Step{good}, 0, 0, "a message number per step"},
		{"a collective", []sched.Step{good}, 1, sched.Allreduce, "a message number per step"},
		{"a reduction", []sched.Step{{Kind: sched.KindRecvReduce, Peer: 1}}, 1, 0, "only sends, receives and copies"},
		{"to itself", []sched.Step{{Kind: sched.KindSend, Peer: 0}}, 1, 0, "names no other rank"},
		{"to rank 2 of 2", []sched.Step{{Kind: sched.KindRecv, Peer: 2}}, 1, 0, "names no other rank"},
	} {
		c := &Call{Params: sched.Params{Coll: k.coll, NRanks: 2}, Prog: &sched.Program{Steps: k.steps}, DType: dtype.Float32, P2P: make([]uint32, k.nums)}
		err := g.check(c)
		if k.want == "" && err != nil || k.want != "" && (err == nil || !strings.Contains(err.Error(), k.want)) {
			t.Errorf("%s: %v, want %q", k.name, err, k.want)
		}
	}
}
