package tcp

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

func pct(d []time.Duration) string {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	n := len(d)
	return (d[n/10].String() + " " + d[n/2].String() + " " + d[n*9/10].String() + " " + d[n*99/100].String())
}

func TestDbgPP(t *testing.T) {
	ms := connect(t, New(local(1, 0)), 2, nil)
	a, c := ms[0].Conn(1), ms[1].Conn(0)
	ctx := context.Background()
	const n = 5000
	var ewait, esend, eswait []time.Duration
	fin := make(chan bool)
	go func() {
		buf := make([]byte, 8)
		for i := range n {
			tag := transport.Tag{Comm: 1, Seq: uint32(i), Step: 1}
			r, _ := c.Irecv(tag, buf)
			t0 := time.Now()
			transport.Wait(ctx, nil, r)
			t1 := time.Now()
			tag.Step = 2
			s, _ := c.Isend(tag, buf)
			t2 := time.Now()
			transport.Wait(ctx, nil, s)
			t3 := time.Now()
			ewait = append(ewait, t1.Sub(t0))
			esend = append(esend, t2.Sub(t1))
			eswait = append(eswait, t3.Sub(t2))
		}
		close(fin)
	}()
	msg := make([]byte, 8)
	buf := make([]byte, 8)
	var d, sd, rd []time.Duration
	for i := range n {
		t0 := time.Now()
		tag := transport.Tag{Comm: 1, Seq: uint32(i), Step: 2}
		r, _ := a.Irecv(tag, buf)
		tag.Step = 1
		s, _ := a.Isend(tag, msg)
		t1 := time.Now()
		transport.Wait(ctx, nil, s, r)
		d = append(d, time.Since(t0))
		sd = append(sd, t1.Sub(t0))
		rd = append(rd, time.Since(t1))
	}
	<-fin
	t.Logf("rtt %s", pct(d))
	t.Logf("a isend %s", pct(sd))
	t.Logf("a wait %s", pct(rd))
	t.Logf("echo recv wait %s", pct(ewait))
	t.Logf("echo isend %s", pct(esend))
	t.Logf("echo send wait %s", pct(eswait))
}
