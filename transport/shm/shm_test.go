package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/transporttest"
	"golang.org/x/sys/unix"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.FactoryFor(New()))
}

func TestConformanceNoCMA(t *testing.T) {
	transporttest.Run(t, transporttest.FactoryFor(NewWithOptions(Options{NoCMA: true})))
}

func TestConformanceSmallRing(t *testing.T) {
	transporttest.Run(t, transporttest.FactoryFor(NewWithOptions(Options{RingSize: 16 << 10, EagerLimit: 1000, Slots: 8})))
}

func TestNoFilesLeft(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	meshes, err := transporttest.Connect(ctx, NewWithOptions(Options{Dir: dir}), 3, transporttest.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("segment files left after Connect: %v", files)
	}
	for _, m := range meshes {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := New().Connect(ctx, transport.Config{
		Self:  transport.Endpoint{Rank: 0, Host: "h"},
		World: 1,
		Store: &transporttest.MemKV{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Conn(0); c != nil {
		t.Errorf("Conn(0) = %v, want nil", c)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
}

func TestWrongSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv := &transporttest.MemKV{}
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			m, err := New().Connect(ctx, transport.Config{
				Self:   transport.Endpoint{Rank: r, Host: "h"},
				Peers:  []transport.Endpoint{{Rank: 1 - r, Host: "h"}},
				World:  2,
				Store:  kv,
				Prefix: t.Name(),
				Secret: []byte{byte(r)},
			})
			if err == nil {
				m.Close()
			}
			errs <- err
		}()
	}
	// Both fail; the first to map the other's segment sees ErrAuth, and the
	// other may find that segment already gone.
	auth := 0
	for range 2 {
		err := <-errs
		if err == nil {
			t.Error("Connect with another rank's secret succeeded")
		}
		if errors.Is(err, transport.ErrAuth) {
			auth++
		}
	}
	if auth == 0 {
		t.Error("no Connect failed with ErrAuth")
	}
}

func TestCanConnect(t *testing.T) {
	tr := New()
	if tr.Name() != "shm" {
		t.Errorf("Name() = %q", tr.Name())
	}
	a, b := transport.Endpoint{Rank: 0, Host: "h1"}, transport.Endpoint{Rank: 1, Host: "h1"}
	if !tr.CanConnect(a, b) {
		t.Error("CanConnect on one host = false")
	}
	b.Host = "h2"
	if tr.CanConnect(a, b) {
		t.Error("CanConnect across hosts = true")
	}
}

func TestMain(m *testing.M) {
	if role := os.Getenv(envChild); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// TestFullDir checks that a segment that does not fit its directory fails
// Connect with ENOSPC, leaving no file, rather than being made sparse and
// killing the rank with SIGBUS at its first write (found by the chaos
// campaign's full /dev/shm). It mounts a 1 MiB tmpfs, so it needs root.
func TestFullDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("braid-test", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Two rings of 1 MiB each: twice what the directory holds.
	meshes, err := transporttest.Connect(ctx, NewWithOptions(Options{Dir: dir, RingSize: 1 << 20}), 3, transporttest.Hooks{})
	for _, m := range meshes {
		m.Close()
	}
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Connect in a full directory: %v; want ENOSPC", err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("files left: %v", files)
	}
}

// TestReapStale: Connect removes the segment files that dead processes of
// its PID namespace left (ranks killed while they waited for their peers
// to map their segments, or while they made them), and nothing else.
func TestReapStale(t *testing.T) {
	dir := t.TempDir()
	ns := pidNS()
	if ns == 0 {
		t.Skip("no /proc/self/ns/pid")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip(err)
	}
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rnd := [4]byte{1, 2, 3, 4}
	stale := file(segmentName(0x0123, 0, dead.Process.Pid, ns, rnd))
	live := file(segmentName(0x0123, 1, os.Getpid(), ns, rnd))
	other := file(segmentName(0x0123, 2, dead.Process.Pid, ns+1, rnd)) // another namespace's: its pid means nothing here
	coll := file(fmt.Sprintf("braid-coll-%d-dd", dead.Process.Pid))
	old := file("braid-0123456789abcdef-0-deadbeef") // an older release's name
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	meshes, err := transporttest.Connect(ctx, NewWithOptions(Options{Dir: dir}), 2, transporttest.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range meshes {
		m.Close()
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead process's segment is still there (%v)", err)
	}
	for _, p := range []string{live, other, coll, old} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it left alone", filepath.Base(p), err)
		}
	}
}

// TestReapAfterFailedConnect: a Connect that fails (here because the peer
// it waits for is dead and its segment unusable, as when a rank is killed
// while the job connects) removes the segment files that dead processes
// left since it began, rather than leaving them to the next Connect.
func TestReapAfterFailedConnect(t *testing.T) {
	ns := pidNS()
	if ns == 0 {
		t.Skip("no /proc/self/ns/pid")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv := &transporttest.MemKV{}
	done := make(chan error, 1)
	go func() {
		m, err := NewWithOptions(Options{Dir: dir}).Connect(ctx, transport.Config{
			Self: transport.Endpoint{Rank: 0, Host: "h"}, Peers: []transport.Endpoint{{Rank: 1, Host: "h"}},
			World: 2, Store: kv, Prefix: t.Name(), Secret: []byte("s"),
		})
		if err == nil {
			m.Close()
		}
		done <- err
	}()
	// Rank 0 has reaped and made its segment; then rank 1's appears, made
	// by a process that is gone, with no header.
	if _, err := kv.Get(ctx, t.Name()+"shm/0"); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, segmentName(0x0123, 1, dead.Process.Pid, ns, [4]byte{1, 2, 3, 4}))
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	kv.Set(ctx, t.Name()+"shm/1", []byte(fmt.Sprintf("%d 4096 %s", dead.Process.Pid, stale)))
	if err := <-done; err == nil {
		t.Fatal("Connect to a dead rank's empty segment succeeded")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead rank's segment is still there (%v)", err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("files left: %v", files)
	}
}

// stallGet is a store whose Get of one key waits for the context's end: a
// rank that uses it publishes its segment and then stalls before it maps
// the segment of that key's rank, as a rank stopped during Connect does.
type stallGet struct {
	transport.KV
	key string
}

func (s stallGet) Get(ctx context.Context, key string) ([]byte, error) {
	if key == s.key {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.KV.Get(ctx, key)
}

// TestConnectNamesUnmapped: when a rank has published its segment but
// never maps the others' (here it stalls looking up rank 0's), the ranks
// that wait for it to map theirs name it in their error, and only it.
func TestConnectNamesUnmapped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	kv := &transporttest.MemKV{}
	errs := make([]error, 3)
	done := make(chan struct{})
	for r := range 3 {
		go func() {
			defer func() { done <- struct{}{} }()
			var store transport.KV = kv
			if r == 2 {
				store = stallGet{KV: kv, key: t.Name() + "shm/0"}
			}
			var peers []transport.Endpoint
			for q := range 3 {
				if q != r {
					peers = append(peers, transport.Endpoint{Rank: q, Host: "h"})
				}
			}
			m, err := NewWithOptions(Options{Dir: t.TempDir()}).Connect(ctx, transport.Config{
				Self: transport.Endpoint{Rank: r, Host: "h"}, Peers: peers,
				World: 3, Store: store, Prefix: t.Name(), Secret: []byte("s"),
			})
			if err == nil {
				m.Close()
			}
			errs[r] = err
		}()
	}
	for range 3 {
		<-done
	}
	pid := fmt.Sprintf("(pid %d)", os.Getpid())
	for r, err := range errs[:2] {
		want := fmt.Sprintf("shm: rank %d: waiting for peers to map its segment: rank 2 %s has not: ", r, pid)
		if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rank %d: %v; want %q…, a deadline", r, err, want)
		}
	}
	if err := errs[2]; err == nil || !strings.Contains(err.Error(), "look up rank 0") {
		t.Errorf("rank 2: %v; want its lookup of rank 0 named", err)
	}
}
