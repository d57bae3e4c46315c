package shmreg

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var secret = []byte("test secret")

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed*131 + i*7 + i>>8)
	}
}

func same(b []byte, seed int) error {
	for i := range b {
		if want := byte(seed*131 + i*7 + i>>8); b[i] != want {
			return fmt.Errorf("byte %d is %d, want %d (seed %d)", i, b[i], want, seed)
		}
	}
	return nil
}

// pools returns a file pool in a fresh directory with one reader, and the
// reader's view of it.
func pools(t *testing.T) (*Pool, *Peer) {
	t.Helper()
	p, err := Create(t.TempDir(), secret, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(p.Path(), secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); p.Close() })
	return p, r
}

// TestOpenUnlinks: the file is gone once its one expected reader opened
// it, another job's secret is refused, and Close removes a file no reader
// opened.
func TestOpenUnlinks(t *testing.T) {
	dir := t.TempDir()
	p, err := Create(dir, secret, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(p.Path(), []byte("other")); !errors.Is(err, ErrAuth) {
		t.Errorf("open with another secret: %v, want ErrAuth", err)
	}
	if p.Shared() {
		t.Error("Shared before its reader opened the pool")
	}
	r, err := Open(p.Path(), secret)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !p.Shared() {
		t.Error("not Shared after its reader opened the pool")
	}
	if _, err := os.Stat(p.Path()); !os.IsNotExist(err) {
		t.Errorf("pool file after its reader opened it: %v, want it gone", err)
	}
	p.Close()
	q, err := Create(dir, secret, 3)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files left after Close: %v", ents)
	}
}

// TestFreeRules: Free takes only the start of a live allocation, once, and
// not while a collective pins it; Find sees only live allocations, whole.
func TestFreeRules(t *testing.T) {
	for _, kind := range []string{"file", "mem"} {
		t.Run(kind, func(t *testing.T) {
			p := NewMem()
			if kind == "file" {
				p, _ = pools(t)
			}
			b, err := p.Alloc(10000)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, ok := p.Find(make([]byte, 8)); ok {
				t.Error("Find found Go memory")
			}
			if _, _, ok := p.Find(b[9000:10000:10000][:1000]); !ok {
				t.Error("Find missed the end of an allocation")
			}
			r, off, ok := p.Find(b[100:200])
			if !ok || off != 100 || r.Gen == 0 {
				t.Fatalf("Find(b[100:200]) = %+v %d %v", r, off, ok)
			}
			p.Unpin(r) // the first Find's pin
			if err := p.Free(b); !errors.Is(err, ErrInUse) {
				t.Errorf("Free while pinned: %v, want ErrInUse", err)
			}
			p.Unpin(r)
			if err := p.Free(b[1:]); !errors.Is(err, ErrNotAllocated) {
				t.Errorf("Free of the middle: %v, want ErrNotAllocated", err)
			}
			if err := p.Free(b); err != nil {
				t.Fatal(err)
			}
			if err := p.Free(b); !errors.Is(err, ErrNotAllocated) {
				t.Errorf("second Free: %v, want ErrNotAllocated", err)
			}
			if _, _, ok := p.Find(make([]byte, 1)); ok {
				t.Error("Find found something in an empty pool")
			}
			if p.Live() != 0 {
				t.Errorf("%d live after freeing everything", p.Live())
			}
		})
	}
}

// TestStaleNeverUsed frees and reallocates, many times, buffers whose ids,
// file ranges and sizes now repeat and now move, each with new contents,
// and reads each through the reader's cache: every read must give the new
// contents, a Ref of a freed allocation must be refused, and the cache
// must hold no more mappings than the owner has live allocations.
func TestStaleNeverUsed(t *testing.T) {
	for _, kind := range []string{"file", "mem"} {
		t.Run(kind, func(t *testing.T) {
			p := NewMem()
			var get func(Ref) ([]byte, error) = p.Get
			var r *Peer
			if kind == "file" {
				p, r = pools(t)
				get = r.Get
			}
			rng := rand.New(rand.NewPCG(1, 2))
			type live struct {
				b    []byte
				ref  Ref
				seed int
			}
			var held []live
			var old []Ref
			sameRange := 0
			for i := range 400 {
				// Free one at random (most of the time), then allocate.
				if len(held) > 0 && rng.IntN(4) != 0 {
					k := rng.IntN(len(held))
					if err := p.Free(held[k].b); err != nil {
						t.Fatal(err)
					}
					old = append(old, held[k].ref)
					held = append(held[:k], held[k+1:]...)
				}
				size := []int{4096, 4096, 5000, 20000, 1 << 16}[rng.IntN(5)]
				b, err := p.Alloc(size)
				if err != nil {
					t.Fatal(err)
				}
				fill(b, i)
				ref, off, ok := p.Find(b)
				if !ok || off != 0 {
					t.Fatalf("Find of a new allocation: %v %d", ok, off)
				}
				for _, o := range old {
					if o.ID == ref.ID && o.Base == ref.Base && o.Size == ref.Size {
						sameRange++
					}
				}
				held = append(held, live{b, ref, i})
				// Read every live allocation through the cache.
				for _, h := range held {
					mem, err := get(h.ref)
					if err != nil {
						t.Fatalf("step %d: Get(%+v): %v", i, h.ref, err)
					}
					if err := same(mem[:len(h.b)], h.seed); err != nil {
						t.Fatalf("step %d: allocation %+v: %v", i, h.ref, err)
					}
				}
				p.Unpin(ref)
				if len(old) > 0 {
					o := old[rng.IntN(len(old))]
					var se *StaleError
					if _, err := get(o); !errors.As(err, &se) {
						t.Fatalf("step %d: Get of freed %+v: %v, want a StaleError", i, o, err)
					}
				}
				if r != nil {
					if s := r.Stats(); s.Entries > len(held) {
						t.Fatalf("step %d: the cache holds %d mappings for %d live allocations", i, s.Entries, len(held))
					}
				}
			}
			if kind == "file" && sameRange == 0 {
				t.Error("no allocation reused the id and range of a freed one: the test did not test that case")
			}
			if r != nil {
				s := r.Stats()
				t.Logf("cache: %+v, %d allocations with a freed one's id and range", s, sameRange)
				if s.Hits == 0 || s.Unmaps == 0 {
					t.Errorf("cache stats %+v: want hits and unmaps", s)
				}
			}
			for _, h := range held {
				if err := p.Free(h.b); err != nil {
					t.Fatal(err)
				}
			}
			if r != nil {
				// The next lookup sweeps every freed mapping out.
				b, _ := p.Alloc(1)
				ref, _, _ := p.Find(b)
				if _, err := r.Get(ref); err != nil {
					t.Fatal(err)
				}
				if s := r.Stats(); s.Entries != 1 {
					t.Errorf("after freeing everything and one new allocation, the cache holds %d mappings, want 1", s.Entries)
				}
				p.Unpin(ref)
			}
		})
	}
}

// TestFreeGivesPagesBack: a freed range holds no memory any more, even
// while a reader still maps it, and the file shrinks back when its last
// ranges are freed.
func TestFreeGivesPagesBack(t *testing.T) {
	p, r := pools(t)
	blocks := func() int64 {
		var st unix.Stat_t
		if err := unix.Fstat(p.fd, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	before := blocks()
	b, err := p.Alloc(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if got := blocks() - before; got < 8<<20 {
		t.Errorf("allocation of 8 MiB holds %d bytes of the file system, want its pages allocated up front", got)
	}
	ref, _, _ := p.Find(b)
	if _, err := r.Get(ref); err != nil {
		t.Fatal(err)
	}
	p.Unpin(ref)
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if got := blocks() - before; got > 64<<10 {
		t.Errorf("after Free the file still holds %d bytes more than before", got)
	}
	if p.end != HeaderSize || len(p.spans) != 0 {
		t.Errorf("after freeing everything: end %d, spans %v", p.end, p.spans)
	}
}

// TestFullFileSystem: an allocation that does not fit fails with ENOSPC
// from Alloc, rather than with SIGBUS on first touch. It mounts a 1 MiB
// tmpfs (root only).
func TestFullFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	defer unix.Unmount(dir, 0)
	p, err := Create(dir, secret, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Alloc(4 << 20); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("Alloc of 4 MiB in a 1 MiB tmpfs: %v, want ENOSPC", err)
	}
	b, err := p.Alloc(256 << 10)
	if err != nil {
		t.Fatalf("Alloc of 256 KiB after the failure: %v", err)
	}
	fill(b, 1)
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
}

// TestReapStale: a pool file whose maker died is removed by the next
// Create in its directory; a live maker's is kept.
func TestReapStale(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	dead := filepath.Join(dir, poolName(cmd.Process.Pid, pidNS(), [6]byte{1}))
	alive := filepath.Join(dir, poolName(os.Getpid(), pidNS(), [6]byte{2}))
	for _, f := range []string{dead, alive} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, err := Create(dir, secret, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead maker's pool file survived: %v", err)
	}
	if _, err := os.Stat(alive); err != nil {
		t.Errorf("a live maker's pool file was removed: %v", err)
	}
	if !strings.HasPrefix(filepath.Base(p.Path()), "braid-reg-") {
		t.Errorf("pool file %s", p.Path())
	}
}
