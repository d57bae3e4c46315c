package bootstrap

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// openJob opens the TCP store of a job of n ranks with the secret given,
// rank 0 serving it, and returns each rank's store and closer.
func openJob(t *testing.T, n int) ([]Store, []func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stores := make([]Store, n)
	closers := make([]func() error, n)
	for r := range n {
		info := Info{Rank: r, Size: n, Store: addr, Secret: testSecret, ServeStore: r == 0, Launcher: LauncherBraid}
		s, closer, err := Open(ctx, &info)
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		stores[r], closers[r] = s, closer
	}
	return stores, closers
}

// kill ends rank r's connection to the store as its death would, without
// its closer.
func kill(s Store) { s.(*jobStore).Store.(*tcpStore).c.Close() }

// TestLostRank: the store tells the ranks in their set-up which rank was
// lost during its own: one whose connection ended without a word (killed)
// or that left before Settle (its Init failed: Leave, or its closer); not
// one that settled first. A killed rank is counted out for the owner's
// closer.
func TestLostRank(t *testing.T) {
	leave := func(s Store, closer func() error) {
		Leave(context.Background(), s, "unsupported: no space left on device")
		closer()
	}
	for _, c := range []struct {
		name   string
		settle bool
		end    func(s Store, closer func() error)
		failed bool
		want   string // in what LostRank says; "" for no report
	}{
		{"killed", false, func(s Store, _ func() error) { kill(s) }, false, "died or was killed"},
		{"left", false, leave, true, "no space left on device"},
		{"closed", false, func(_ Store, closer func() error) { closer() }, true, "closed its connection"},
		{"settled-killed", true, func(s Store, _ func() error) { kill(s) }, false, ""},
		{"settled-left", true, leave, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			stores, closers := openJob(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if c.settle {
				if err := Settle(ctx, stores[2]); err != nil {
					t.Fatal(err)
				}
			}
			c.end(stores[2], closers[2])
			for r := range 2 { // the server's rank and a dialled one
				wctx := ctx
				if c.want == "" {
					var wcancel context.CancelFunc
					wctx, wcancel = context.WithTimeout(ctx, 200*time.Millisecond)
					defer wcancel()
				}
				lost, err := LostRank(wctx, stores[r])
				switch {
				case c.want == "" && !errors.Is(err, context.DeadlineExceeded):
					t.Errorf("rank %d: LostRank = %+v, %v, want no rank lost", r, lost, err)
				case c.want != "" && (err != nil || lost.Rank != 2 || lost.Failed != c.failed || !strings.Contains(lost.Why, c.want)):
					t.Errorf("rank %d: LostRank = %+v, %v, want rank 2, failed %v, %q", r, lost, err, c.failed, c.want)
				}
			}
			// Rank 2 counted out, by its closer or by the server.
			n := 0
			for ctx.Err() == nil {
				v, _ := stores[0].Get(ctx, closedKey)
				if n, _ = strconv.Atoi(string(v)); n >= 1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if n != 1 {
				t.Errorf("%d ranks counted out, want 1 (rank 2)", n)
			}
			closers[1]()
			closers[0]()
		})
	}
	// The rank that serves the store leaves.
	stores, closers := openJob(t, 2)
	Leave(context.Background(), stores[0], "invalid argument")
	if lost, err := LostRank(context.Background(), stores[1]); err != nil || lost.Rank != 0 || !lost.Failed || lost.Why != "invalid argument" {
		t.Errorf("after rank 0 left: LostRank = %+v, %v", lost, err)
	}
	closers[1]()
	closers[0]()
	// A file store cannot tell.
	dir := t.TempDir()
	info := Info{Rank: 0, Size: 1, Store: "file:" + dir, Launcher: LauncherBraid}
	s, closer, err := Open(context.Background(), &info)
	if err != nil {
		t.Fatal(err)
	}
	defer closer()
	if _, err := LostRank(context.Background(), s); !errors.Is(err, ErrNoWatch) {
		t.Errorf("file store: LostRank: %v, want ErrNoWatch", err)
	}
}
