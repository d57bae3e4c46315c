package tcp

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

func TestDbgHist(t *testing.T) {
	dir := t.TempDir()
	const n = 20000
	cmd, _ := startChild(t, "echo", dir, 1, 2, 1, "20000")
	defer cmd.Wait()
	ctx := context.Background()
	m, err := procConnect(ctx, dir, 0, 2, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a := m.Conn(1)
	msg := make([]byte, 8)
	buf := make([]byte, 8)
	var d []time.Duration
	for i := range n {
		t0 := time.Now()
		tag := transport.Tag{Comm: 1, Seq: uint32(i), Step: 2}
		r, _ := a.Irecv(tag, buf)
		tag.Step = 1
		s, _ := a.Isend(tag, msg)
		transport.Wait(ctx, nil, s, r)
		d = append(d, time.Since(t0))
	}
	s, _ := a.Isend(transport.Tag{Comm: 9}, nil)
	transport.Wait(ctx, nil, s)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	t.Logf("rtt mean %v p10 %v p50 %v p90 %v p99 %v max %v", sum/n, d[n/10], d[n/2], d[n*9/10], d[n*99/100], d[n-1])
}
