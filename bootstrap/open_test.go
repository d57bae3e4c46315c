package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// runRanks opens the store of each Info in its own goroutine, as ranks
// would, and has every rank publish a key and read all the others'. It
// returns the Infos after Open and the ranks' closers, in rank order.
func runRanks(t *testing.T, infos []Info) ([]Info, []func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	closers := make([]func() error, len(infos))
	var wg sync.WaitGroup
	for r := range infos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info := &infos[r]
			s, closer, err := Open(ctx, info)
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			closers[r] = closer
			if err := s.Set(ctx, fmt.Sprintf("rank/%d", r), []byte(fmt.Sprint(r*r))); err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			for p := range infos {
				v, err := s.Get(ctx, fmt.Sprintf("rank/%d", p))
				if err != nil || string(v) != fmt.Sprint(p*p) {
					t.Errorf("rank %d: key of rank %d = %q, %v", r, p, v, err)
				}
			}
			// A barrier, so that rank 0 closes last.
			if _, err := s.Add(ctx, "done", 1); err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
			for {
				v, _ := s.Get(ctx, "done")
				if string(v) == fmt.Sprint(len(infos)) || ctx.Err() != nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for r := range infos {
		if !bytes.Equal(infos[r].Secret, infos[0].Secret) || len(infos[r].Secret) < MinSecretLen {
			t.Fatalf("rank %d has secret %x, rank 0 %x", r, infos[r].Secret, infos[0].Secret)
		}
	}
	return infos, closers
}

func closeRanks(t *testing.T, closers []func() error) {
	for r := len(closers) - 1; r >= 0; r-- {
		if err := closers[r](); err != nil {
			t.Errorf("rank %d: close: %v", r, err)
		}
	}
}

func ranks(n int, store, job string) []Info {
	infos := make([]Info, n)
	for r := range infos {
		infos[r] = Info{Rank: r, Size: n, LocalRank: r, LocalSize: n, Store: store, JobID: job, Launcher: LauncherOpenMPI}
	}
	return infos
}

func TestOpenFileStore(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dir := filepath.Join(privateTempDir(), "job-1")
	infos, closers := runRanks(t, ranks(3, "file:"+dir, "job-1"))
	if fi, err := os.Stat(filepath.Join(dir, secretFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, %v", fi, err)
	}
	closeRanks(t, closers)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("rank 0 left the job's directory: %v (%v)", err, entries)
	}
	// A second job with the same id gets a new secret, hence new keys.
	again, closers := runRanks(t, ranks(3, "file:"+dir, "job-1"))
	if bytes.Equal(again[0].Secret, infos[0].Secret) {
		t.Fatal("two jobs got the same secret")
	}
	closeRanks(t, closers)
}

// TestOpenStaleSecret: a secret file left by a dead rank 0 of this host
// is not taken for the current job's.
func TestOpenStaleSecret(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dir := filepath.Join(privateTempDir(), "job-2")
	if err := prepareDir(dir); err != nil {
		t.Fatal(err)
	}
	host := HostID()
	_, start, ok := procStat(os.Getpid())
	if !ok {
		t.Skip("no /proc")
	}
	stale := secretRecord{host: host, pid: os.Getpid(), start: start + 1, secret: []byte(strings.Repeat("s", 32))}
	if err := writeFileAtomic(dir, secretFile, stale.encode()); err != nil {
		t.Fatal(err)
	}
	infos := ranks(2, "file:"+dir, "job-2")
	got := make(chan []byte, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, closer, err := Open(ctx, &infos[1])
		if err != nil {
			t.Error(err)
		} else {
			closer()
		}
		got <- infos[1].Secret
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case s := <-got:
		t.Fatalf("rank 1 took the stale secret %q", s)
	default:
	}
	_, closer, err := Open(context.Background(), &infos[0])
	if err != nil {
		t.Fatal(err)
	}
	defer closer()
	if s := <-got; !bytes.Equal(s, infos[0].Secret) {
		t.Fatalf("rank 1 got secret %x; rank 0 wrote %x", s, infos[0].Secret)
	}
}

func TestOpenTCPStore(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	infos := ranks(3, addr, "torchrun-x")
	infos[0].ServeStore = true
	_, closers := runRanks(t, infos)
	closeRanks(t, closers)
	if _, err := os.Stat(filepath.Join(privateTempDir(), "torchrun-x", secretFile)); !os.IsNotExist(err) {
		t.Fatalf("rank 0 left the secret file: %v", err)
	}
	// With the secret given, nothing is written.
	infos = ranks(2, addr, "torchrun-y")
	infos[0].ServeStore = true
	for r := range infos {
		infos[r].Secret = testSecret
		infos[r].LocalRank, infos[r].LocalSize = 0, 1
	}
	_, closers = runRanks(t, infos)
	closeRanks(t, closers)
	if _, err := os.Stat(filepath.Join(privateTempDir(), "torchrun-y")); !os.IsNotExist(err) {
		t.Fatalf("a job with BRAID_SECRET wrote a directory: %v", err)
	}
}

func TestOpenSingle(t *testing.T) {
	info := Info{Size: 1, Launcher: LauncherSingle}
	s, closer, err := Open(context.Background(), &info)
	if err != nil {
		t.Fatal(err)
	}
	defer closer()
	if len(info.Secret) == 0 {
		t.Fatal("no secret")
	}
	if err := s.Set(context.Background(), "k", nil); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		info Info
		want string
	}{
		{Info{Rank: 2, Size: 2}, "rank 2 is not in [0, 2)"},
		{Info{Rank: 0, Size: 2}, "no store"},
		{Info{Rank: 1, Size: 2, Store: "h:1"}, "set BRAID_SECRET"},
		{Info{Rank: 1, Size: 2, Store: "file:"}, "names no directory"},
	} {
		if _, _, err := Open(ctx, &tc.info); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v) = %v; want %q", tc.info, err, tc.want)
		}
	}
}

func TestOpenRefusesSharedTempDir(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	if err := os.Mkdir(privateTempDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(privateTempDir(), 0o755) // whatever the umask
	info := ranks(2, "file:"+filepath.Join(privateTempDir(), "j"), "j")[0]
	if _, _, err := Open(context.Background(), &info); err == nil || !strings.Contains(err.Error(), "open to other users") {
		t.Fatalf("Open in a shared directory = %v", err)
	}
}
