package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// storeFactory returns n stores that share one key space, as n ranks'
// stores do.
type storeFactory func(t *testing.T, n int) []Store

// testStore is the conformance suite that every Store passes.
func testStore(t *testing.T, factory storeFactory) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	closeAll := func(ss []Store) {
		for _, s := range ss {
			s.Close()
		}
	}

	t.Run("SetGet", func(t *testing.T) {
		ss := factory(t, 2)
		defer closeAll(ss)
		if err := ss[0].Set(ctx, "a/b c", []byte("value")); err != nil {
			t.Fatal(err)
		}
		v, err := ss[1].Get(ctx, "a/b c")
		if err != nil || string(v) != "value" {
			t.Fatalf("Get = %q, %v; want value", v, err)
		}
		// Overwrite, empty values and binary values.
		for _, val := range [][]byte{{}, {0, 1, 2, 255}, []byte(strings.Repeat("x", 1<<20))} {
			if err := ss[1].Set(ctx, "a/b c", val); err != nil {
				t.Fatal(err)
			}
			v, err := ss[0].Get(ctx, "a/b c")
			if err != nil || string(v) != string(val) {
				t.Fatalf("Get = %d bytes, %v; want %d", len(v), err, len(val))
			}
		}
		// The caller owns what it passed and what it got.
		buf := []byte("mine")
		ss[0].Set(ctx, "own", buf)
		buf[0] = 'X'
		v, _ = ss[1].Get(ctx, "own")
		v[1] = 'Y'
		if w, _ := ss[0].Get(ctx, "own"); string(w) != "mine" {
			t.Fatalf("Get = %q after the caller changed its slices; want mine", w)
		}
	})

	t.Run("GetWaits", func(t *testing.T) {
		ss := factory(t, 3)
		defer closeAll(ss)
		got := make(chan string, 2)
		for _, s := range ss[1:] {
			go func() {
				v, err := s.Get(ctx, "late")
				if err != nil {
					got <- err.Error()
					return
				}
				got <- string(v)
			}()
		}
		time.Sleep(30 * time.Millisecond)
		select {
		case v := <-got:
			t.Fatalf("Get returned %q before Set", v)
		default:
		}
		ss[0].Set(ctx, "late", []byte("now"))
		for range 2 {
			if v := <-got; v != "now" {
				t.Fatalf("Get = %q; want now", v)
			}
		}
	})

	t.Run("GetDeadline", func(t *testing.T) {
		ss := factory(t, 1)
		defer closeAll(ss)
		c, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err := ss[0].Get(c, "never")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "never") {
			t.Fatalf("Get = %v; want a deadline error naming the key", err)
		}
		// The store still works.
		if err := ss[0].Set(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if v, err := ss[0].Get(ctx, "k"); err != nil || string(v) != "v" {
			t.Fatalf("Get after a timeout = %q, %v", v, err)
		}
	})

	t.Run("Add", func(t *testing.T) {
		const ranks, adds = 4, 25
		ss := factory(t, ranks)
		defer closeAll(ss)
		var wg sync.WaitGroup
		seen := make(chan int64, ranks*adds)
		for _, s := range ss {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range adds {
					n, err := s.Add(ctx, "count", 1)
					if err != nil {
						t.Error(err)
						return
					}
					seen <- n
				}
			}()
		}
		wg.Wait()
		close(seen)
		uniq := map[int64]bool{}
		for n := range seen {
			if uniq[n] {
				t.Fatalf("Add returned %d twice", n)
			}
			uniq[n] = true
		}
		if n, err := ss[0].Add(ctx, "count", -5); n != ranks*adds-5 || err != nil {
			t.Fatalf("Add = %d, %v; want %d", n, err, ranks*adds-5)
		}
		if v, _ := ss[1].Get(ctx, "count"); string(v) != fmt.Sprint(ranks*adds-5) {
			t.Fatalf("Get of a counter = %q", v)
		}
		ss[0].Set(ctx, "text", []byte("abc"))
		if _, err := ss[1].Add(ctx, "text", 1); err == nil || !strings.Contains(err.Error(), "not an integer") {
			t.Fatalf("Add to text = %v; want an error", err)
		}
	})

	t.Run("BadKeys", func(t *testing.T) {
		ss := factory(t, 1)
		defer closeAll(ss)
		if err := ss[0].Set(ctx, "", nil); err == nil {
			t.Fatal("Set of an empty key succeeded")
		}
		if err := ss[0].Set(ctx, strings.Repeat("k", MaxKeyLen+1), nil); err == nil {
			t.Fatal("Set of a long key succeeded")
		}
		long := strings.Repeat("k/", MaxKeyLen/2)
		if err := ss[0].Set(ctx, long, []byte("L")); err != nil {
			t.Fatal(err)
		}
		if v, err := ss[0].Get(ctx, long); err != nil || string(v) != "L" {
			t.Fatalf("Get of a long key = %q, %v", v, err)
		}
	})

	t.Run("Close", func(t *testing.T) {
		ss := factory(t, 1)
		errc := make(chan error, 1)
		go func() { _, err := ss[0].Get(ctx, "never"); errc <- err }()
		time.Sleep(20 * time.Millisecond)
		ss[0].Close()
		select {
		case err := <-errc:
			if err == nil {
				t.Fatal("Get succeeded after Close")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not end a pending Get")
		}
		if err := ss[0].Set(ctx, "k", nil); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Set after Close = %v; want ErrClosed", err)
		}
	})
}

func TestMemStore(t *testing.T) {
	testStore(t, func(t *testing.T, n int) []Store {
		s := NewMemStore().(*memStore)
		ss := []Store{s}
		for i := 1; i < n; i++ {
			ss = append(ss, &memStore{t: s.t, done: make(chan struct{})})
		}
		return ss
	})
}

func TestFileStore(t *testing.T) {
	testStore(t, func(t *testing.T, n int) []Store {
		dir := t.TempDir() + "/store"
		var ss []Store
		for range n {
			s, err := NewFileStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			ss = append(ss, s)
		}
		return ss
	})
}

func TestTCPStore(t *testing.T) {
	testStore(t, func(t *testing.T, n int) []Store {
		srv := serve(t, testSecret, nil)
		var ss []Store
		for range n {
			ss = append(ss, dial(t, srv, testSecret))
		}
		return ss
	})
}

func TestTCPStoreLocal(t *testing.T) {
	testStore(t, func(t *testing.T, n int) []Store {
		srv := serve(t, testSecret, nil)
		ss := []Store{srv.Local()}
		for i := 1; i < n; i++ {
			ss = append(ss, dial(t, srv, testSecret))
		}
		return ss
	})
}

func TestKeyFile(t *testing.T) {
	for key, want := range map[string]string{
		"a/b":     "k-a%2Fb",
		"..":      "k-..",
		"x y%":    "k-x%20y%25",
		"Rank_3-": "k-Rank_3-",
	} {
		if got := keyFile(key); got != want {
			t.Errorf("keyFile(%q) = %q; want %q", key, got, want)
		}
	}
	if a, b := keyFile(strings.Repeat("a", 300)), keyFile(strings.Repeat("a", 301)); a == b || len(a) > 200 {
		t.Errorf("long keys map to %q and %q", a, b)
	}
}
