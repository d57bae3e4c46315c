package bootstrap

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/braid-ccl/braid/transport"
)

// Store is a key-value store that the ranks of a job share during set-up:
// they publish their addresses under keys and wait for their peers'.
// Stores are made by Open, DialTCPStore, NewFileStore and NewMemStore.
//
// All methods may be called from several goroutines at once. Values are
// copied in and out: the caller owns the slices it passes and receives.
// After Close, every method returns an error wrapping transport.ErrClosed.
type Store interface {
	// Set stores value under key, replacing any value there, and wakes
	// the Gets that wait for key. A key has 1 to MaxKeyLen bytes.
	Set(ctx context.Context, key string, value []byte) error

	// Get returns the value under key, waiting until some rank sets it or
	// ctx ends (then it returns ctx's error, wrapped).
	Get(ctx context.Context, key string) ([]byte, error)

	// Add adds delta to the integer under key (a missing key counts as 0)
	// and returns the sum, atomically with respect to every rank's Add.
	// The integer is stored in decimal, so Get returns e.g. "3"; Add on a
	// key that holds something else fails.
	Add(ctx context.Context, key string, delta int64) (int64, error)

	// Close releases the store's resources. It does not wait for the
	// calls in progress, which fail.
	Close() error
}

var _ transport.KV = Store(nil)

// table is the state of an in-memory store: the TCP store server's and
// NewMemStore's.
type table struct {
	mu     sync.Mutex
	values map[string][]byte
	wait   map[string]chan struct{} // closed when the key is set
	closed chan struct{}
	once   sync.Once
}

func newTable() *table {
	return &table{values: map[string][]byte{}, wait: map[string]chan struct{}{}, closed: make(chan struct{})}
}

func (t *table) close() { t.once.Do(func() { close(t.closed) }) }

func (t *table) isClosed() bool {
	select {
	case <-t.closed:
		return true
	default:
		return false
	}
}

// setLocked stores value (which the table then owns) and wakes waiters.
func (t *table) setLocked(key string, value []byte) {
	t.values[key] = value
	if ch, ok := t.wait[key]; ok {
		close(ch)
		delete(t.wait, key)
	}
}

func (t *table) set(key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if t.isClosed() {
		return errClosed
	}
	v := append([]byte{}, value...)
	t.mu.Lock()
	t.setLocked(key, v)
	t.mu.Unlock()
	return nil
}

// setIfAbsent stores value under key unless key holds a value already.
func (t *table) setIfAbsent(key string, value []byte) {
	if t.isClosed() {
		return
	}
	v := append([]byte{}, value...)
	t.mu.Lock()
	if _, ok := t.values[key]; !ok {
		t.setLocked(key, v)
	}
	t.mu.Unlock()
}

// get waits for key. The returned slice is the table's: do not modify it.
func (t *table) get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	for {
		if t.isClosed() {
			return nil, errClosed
		}
		t.mu.Lock()
		v, ok := t.values[key]
		ch := t.wait[key]
		if !ok && ch == nil {
			ch = make(chan struct{})
			t.wait[key] = ch
		}
		t.mu.Unlock()
		if ok {
			return v, nil
		}
		select {
		case <-ch:
		case <-t.closed:
		case <-ctx.Done():
			return nil, fmt.Errorf("bootstrap: waiting for key %q: %w", key, ctx.Err())
		}
	}
}

func (t *table) add(key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if t.isClosed() {
		return 0, errClosed
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := addValue(key, t.values[key], delta)
	if err != nil {
		return 0, err
	}
	t.setLocked(key, strconv.AppendInt(nil, n, 10))
	return n, nil
}

// addValue returns old (a decimal integer, or nil for none) plus delta.
func addValue(key string, old []byte, delta int64) (int64, error) {
	if old == nil {
		return delta, nil
	}
	n, err := strconv.ParseInt(string(old), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bootstrap: add to key %q: its value %.40q is not an integer", key, old)
	}
	return n + delta, nil
}

var errClosed = fmt.Errorf("bootstrap: store %w", transport.ErrClosed)

// memStore is a Store over a table in this process.
type memStore struct {
	t     *table
	owner bool // Close closes the table
	done  chan struct{}
	once  sync.Once
}

// NewMemStore returns a store that lives in this process's memory, for a
// single rank, or for ranks that are goroutines of one process.
func NewMemStore() Store { return &memStore{t: newTable(), owner: true, done: make(chan struct{})} }

func (m *memStore) check() error {
	select {
	case <-m.done:
		return errClosed
	default:
		return nil
	}
}

func (m *memStore) Set(ctx context.Context, key string, value []byte) error {
	if err := m.check(); err != nil {
		return err
	}
	return m.t.set(key, value)
}

func (m *memStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	v, err := m.t.get(ctx, key)
	if err != nil {
		if m.check() != nil {
			return nil, errClosed
		}
		return nil, err
	}
	return append([]byte{}, v...), nil
}

func (m *memStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := m.check(); err != nil {
		return 0, err
	}
	return m.t.add(key, delta)
}

func (m *memStore) Close() error {
	m.once.Do(func() {
		close(m.done)
		if m.owner {
			m.t.close()
		}
	})
	return nil
}
