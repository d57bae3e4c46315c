//go:build cgo

package main

import (
	"sync"

	"github.com/braid-ccl/braid"
)

// A table hands out the numbers that stand for Go values in C: C keeps
// no Go pointer, only a number, which the table maps back (and which it
// never hands out twice, so that a stale handle is an error, not another
// value).
type table[T any] struct {
	what string // "communicator", "request": for errors
	mu   sync.Mutex
	next uint64
	m    map[uint64]T
}

var (
	comms    = table[*braid.Comm]{what: "communicator"}
	requests = table[*braid.Request]{what: "request"}
)

// add stores v and returns its handle, never 0.
func (t *table[T]) add(v T) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]T{}
	}
	t.next++
	t.m[t.next] = v
	return t.next
}

// get returns the value of handle h; call names the C call for the error.
func (t *table[T]) get(h uint64, call string) (T, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[h]
	if !ok {
		return v, argErr(nil, call, "%d is not a live %s handle", h, t.what)
	}
	return v, nil
}

// remove forgets handle h and returns its value.
func (t *table[T]) remove(h uint64, call string) (T, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[h]
	if !ok {
		return v, argErr(nil, call, "%d is not a live %s handle", h, t.what)
	}
	delete(t.m, h)
	return v, nil
}
