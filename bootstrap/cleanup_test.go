package bootstrap

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// leftovers lists what is under $TMPDIR/braid-UID.
func leftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(privateTempDir(), func(p string, d os.DirEntry, err error) error {
		if err == nil {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// openAll opens the stores of infos as ranks would, in goroutines.
func openAll(t *testing.T, infos []Info) ([]Store, []func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stores := make([]Store, len(infos))
	closers := make([]func() error, len(infos))
	var wg sync.WaitGroup
	for r := range infos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, c, err := Open(ctx, &infos[r])
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			stores[r], closers[r] = s, c
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return stores, closers
}

// TestSettleRemovesFiles: once every rank has settled, nothing of the job
// is left on disk, so that a crash later leaves nothing; the closers still
// work, and a TCP store still serves.
func TestSettleRemovesFiles(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		store string
	}{
		{"file store", "file:" + filepath.Join(privateTempDir(), "job-s")},
		{"tcp store", freeAddr(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			infos := ranks(3, tc.store, "job-s")
			infos[0].ServeStore = !strings.HasPrefix(tc.store, "file:")
			stores, closers := openAll(t, infos)
			if len(leftovers(t)) == 0 {
				t.Fatal("the job wrote nothing to disk: the test tests nothing")
			}
			for r, s := range stores {
				if err := Settle(ctx, s); err != nil {
					t.Fatalf("rank %d: Settle: %v", r, err)
				}
				if left := leftovers(t); r < 2 && len(left) == 0 {
					t.Fatalf("rank %d of 3 settled and the files are gone already", r)
				}
			}
			if left := leftovers(t); len(left) != 0 {
				t.Fatalf("every rank settled and the job left %v", left)
			}
			if infos[0].ServeStore {
				if err := stores[1].Set(ctx, "after", []byte("x")); err != nil {
					t.Fatalf("the TCP store after Settle: %v", err)
				}
			}
			closeRanks(t, closers)
		})
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestReapStale: rank 0 of a new job removes the directories of jobs whose
// rank 0 ran on this host and died, and old empty ones; it keeps those of
// live jobs and of other hosts.
func TestReapStale(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	_, start, ok := procStat(os.Getpid())
	if !ok {
		t.Skip("no /proc")
	}
	mk := func(job string, r secretRecord, name string) string {
		dir := filepath.Join(privateTempDir(), job)
		if err := prepareDir(dir); err != nil {
			t.Fatal(err)
		}
		if name != "" {
			if err := writeFileAtomic(dir, name, r.encode()); err != nil {
				t.Fatal(err)
			}
		}
		os.MkdirAll(filepath.Join(dir, "run-0123"), 0o700)
		return dir
	}
	secret := []byte(strings.Repeat("s", 32))
	dead := mk("dead", secretRecord{host: HostID(), pid: os.Getpid(), start: start + 1, secret: secret}, secretFile)
	deadOwner := mk("dead-owner", secretRecord{host: HostID(), pid: os.Getpid(), start: start + 1}, ownerFile)
	live := mk("live", secretRecord{host: HostID(), pid: os.Getpid(), start: start, secret: secret}, secretFile)
	other := mk("other-host", secretRecord{host: "elsewhere#00000000", pid: os.Getpid(), start: start + 1, secret: secret}, secretFile)
	oldEmpty := filepath.Join(privateTempDir(), "old-empty")
	newEmpty := filepath.Join(privateTempDir(), "new-empty")
	for _, d := range []string{oldEmpty, newEmpty} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleAge)
	os.Chtimes(oldEmpty, old, old)

	_, closers := openAll(t, ranks(2, "file:"+filepath.Join(privateTempDir(), "new-job"), "new-job"))
	defer closeRanks(t, closers)
	for dir, keep := range map[string]bool{dead: false, deadOwner: false, oldEmpty: false, live: true, other: true, newEmpty: true} {
		_, err := os.Stat(dir)
		if gone := errors.Is(err, os.ErrNotExist); gone == keep {
			t.Errorf("%s: removed %v, want removed %v", filepath.Base(dir), gone, !keep)
		}
	}
}

// TestStoreLost: a rank's store from Open reports the loss of its server,
// but not its own Close.
func TestStoreLost(t *testing.T) {
	var log logBuf
	srv := serve(t, testSecret, log.logf)
	info := Info{Rank: 1, Size: 2, Store: srv.Addr().String(), Secret: testSecret, Launcher: LauncherBraid}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, closer, err := Open(ctx, &info)
	if err != nil {
		t.Fatal(err)
	}
	lost, why := Lost(s)
	if lost == nil {
		t.Fatal("Lost of a dialled TCP store is nil")
	}
	srv.Close()
	select {
	case <-lost:
	case <-ctx.Done():
		t.Fatal("the loss of the server was not noticed")
	}
	if err := why(); !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), srv.Addr().String()) {
		t.Fatalf("Lost says %v; want peer lost naming %s", err, srv.Addr())
	}
	closer()

	srv = serve(t, testSecret, log.logf)
	info.Store = srv.Addr().String()
	s, closer, err = Open(ctx, &info)
	if err != nil {
		t.Fatal(err)
	}
	lost, why = Lost(s)
	s.Close()
	<-lost
	if err := why(); err != nil {
		t.Fatalf("Lost after Close says %v; want nil", err)
	}
	closer()
	if l, _ := Lost(NewMemStore()); l != nil {
		t.Fatal("Lost of a memory store is not nil")
	}
}

func TestFailureReports(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore()
	if fs, err := Failures(ctx, s); err != nil || len(fs) != 0 {
		t.Fatalf("Failures of an empty store = %v, %v", fs, err)
	}
	t0 := time.Unix(100, 5)
	want := []Failure{
		{Rank: 3, Time: t0, Kind: "timeout", Peer: 2, Msg: "braid: rank 3: allreduce: timeout\twith a tab"},
		{Rank: 0, Time: t0.Add(time.Millisecond), Kind: "aborted", Peer: -1, Echo: true, Msg: strings.Repeat("x", 3*MaxFailureMsg)},
		{Rank: 1, Time: t0, Kind: "timeout", Peer: 2, Echo: true, Msg: "in a call\twith a tab",
			InCall: true, Comm: 0xdeadbeef, Seq: 812, Call: "allreduce", Waited: 0},
	}
	for _, f := range want {
		if err := ReportFailure(ctx, s, f); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Failures(ctx, s)
	if err != nil || len(got) != len(want) {
		t.Fatalf("Failures = %v, %v", got, err)
	}
	want[1].Msg = want[1].Msg[:MaxFailureMsg]
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("report %d: got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestHostID(t *testing.T) {
	base := hostFacts{name: "node", bootID: "b1", netNS: "net:[1]", pidNS: "pid:[1]", shmDev: "27"}
	ids := map[string]string{}
	for what, f := range map[string]hostFacts{
		"base": base,
		"boot": {name: "node", bootID: "b2", netNS: "net:[1]", pidNS: "pid:[1]", shmDev: "27"},
		"net":  {name: "node", bootID: "b1", netNS: "net:[2]", pidNS: "pid:[1]", shmDev: "27"},
		"pid":  {name: "node", bootID: "b1", netNS: "net:[1]", pidNS: "pid:[2]", shmDev: "27"},
		"shm":  {name: "node", bootID: "b1", netNS: "net:[1]", pidNS: "pid:[1]", shmDev: "28"},
	} {
		id := f.id()
		if HostName(id) != "node" || !strings.HasPrefix(id, "node#") {
			t.Errorf("%s: id %q", what, id)
		}
		if other, dup := ids[id]; dup {
			t.Errorf("%s and %s share the identity %s", what, other, id)
		}
		ids[id] = what
	}
	if id := (hostFacts{name: "node"}).id(); id != "node" {
		t.Errorf("without /proc the identity is %q; want the host name", id)
	}
	if id := HostID(); id != HostID() || HostName(id) == "" {
		t.Errorf("HostID() = %q", id)
	}
}
