package transporttest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// Hooks are the callbacks of a Config, for the meshes of a Factory, with
// the rank whose mesh calls them added.
type Hooks struct {
	Lost       func(rank, peer int, err error)
	Unexpected func(rank, peer int, tag transport.Tag)
}

// Factory returns n connected meshes living in this process; index i is
// world rank i. The factory must arrange that rank r's mesh calls
// hooks.Lost(r, peer, err) for its Config's Lost and
// hooks.Unexpected(r, peer, tag) for its Unexpected, where those are not
// nil (Run sets both). Run closes the meshes when the subtest that made them
// ends, so the factory need not. A factory reports set-up failures with
// t.Fatal.
type Factory func(t *testing.T, n int, hooks Hooks) []transport.Mesh

// Host is the Endpoint.Host that Connect gives every rank.
const Host = "transporttest"

// Secret is the job secret that Connect gives every rank.
var Secret = []byte("transporttest-secret")

var jobs atomic.Int64

// Connect connects n ranks of tr in this process: it calls tr.Connect once
// per rank, each in its own goroutine, with a shared MemKV, a Prefix unique
// to this call, Host as every rank's host and this process's PID. Rank r's
// Config calls hooks as Factory describes. On error it closes the meshes
// that did connect.
func Connect(ctx context.Context, tr transport.Transport, n int, hooks Hooks) ([]transport.Mesh, error) {
	kv := &MemKV{}
	prefix := fmt.Sprintf("transporttest/%d/%d/%d/", os.Getpid(), time.Now().UnixNano(), jobs.Add(1))
	eps := make([]transport.Endpoint, n)
	for r := range eps {
		eps[r] = transport.Endpoint{Rank: r, Host: Host, PID: os.Getpid()}
	}
	meshes := make([]transport.Mesh, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cfg := transport.Config{
			Self:   eps[r],
			World:  n,
			Store:  kv,
			Prefix: prefix,
			Secret: Secret,
		}
		for p := range n {
			if p != r {
				cfg.Peers = append(cfg.Peers, eps[p])
			}
		}
		if hooks.Lost != nil {
			cfg.Lost = func(peer int, err error) { hooks.Lost(r, peer, err) }
		}
		if hooks.Unexpected != nil {
			cfg.Unexpected = func(peer int, tag transport.Tag) { hooks.Unexpected(r, peer, tag) }
		}
		wg.Go(func() { meshes[r], errs[r] = tr.Connect(ctx, cfg) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			for _, m := range meshes {
				if m != nil {
					m.Close()
				}
			}
			return nil, fmt.Errorf("transporttest: connect rank %d of %d: %w", r, n, err)
		}
	}
	return meshes, nil
}

// FactoryFor returns a Factory that connects n ranks of tr with Connect.
func FactoryFor(tr transport.Transport) Factory {
	return func(t *testing.T, n int, hooks Hooks) []transport.Mesh {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		meshes, err := Connect(ctx, tr, n, hooks)
		if err != nil {
			t.Fatal(err)
		}
		return meshes
	}
}
