package bootstrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/transport"
)

// Polling of the file store: a Get that finds nothing waits minPoll, then
// twice as long each time, up to maxPoll.
const (
	minPoll = time.Millisecond
	maxPoll = 50 * time.Millisecond
)

// fileStore keeps each key in a file of its directory.
type fileStore struct {
	dir  string
	done chan struct{}
	once sync.Once
}

// NewFileStore returns a store kept in directory dir, which it creates
// (mode 0700) if needed. Ranks that see dir, on one host or on a shared
// file system, share the store.
//
// Each key is one file (named "k-" and the key, escaped), written
// atomically: a temporary file renamed into place. Get polls for the file,
// waiting 1 ms at first and up to 50 ms between looks. Add holds an
// exclusive flock(2) on dir/.lock while it reads and writes; on NFS, Linux
// maps it to a POSIX lock, which works across hosts with NFSv4. Set does
// not take the lock: do not Set and Add one key at the same time.
//
// The store does not remove its files; remove dir when the job is done.
// A Get fails, rather than waiting, once dir is removed.
func NewFileStore(dir string) (Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("bootstrap: file store: %w", err)
	}
	return &fileStore{dir: dir, done: make(chan struct{})}, nil
}

// keyFile returns the name of the file that holds key.
func keyFile(key string) string {
	const hexd = "0123456789ABCDEF"
	b := []byte("k-")
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' {
			b = append(b, c)
		} else {
			b = append(b, '%', hexd[c>>4], hexd[c&15])
		}
	}
	if len(b) > 200 {
		sum := sha256.Sum256([]byte(key))
		return "h-" + hex.EncodeToString(sum[:])
	}
	return string(b)
}

func (s *fileStore) check() error {
	select {
	case <-s.done:
		return errClosed
	default:
		return nil
	}
}

// writeFileAtomic writes data to dir/name through a temporary file and a
// rename, so that readers see all of it or nothing.
func writeFileAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-*") // mode 0600
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

func (s *fileStore) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	if err := writeFileAtomic(s.dir, keyFile(key), value); err != nil {
		return fmt.Errorf("bootstrap: file store: set %q: %w", key, err)
	}
	return nil
}

// poll waits for the next look with backoff; it returns an error when ctx
// ends or the store closes.
func (s *fileStore) poll(ctx context.Context, delay *time.Duration, what string) error {
	if *delay == 0 {
		*delay = minPoll
	} else {
		*delay = min(2**delay, maxPoll)
	}
	t := time.NewTimer(*delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.done:
		return errClosed
	case <-ctx.Done():
		return fmt.Errorf("bootstrap: file store %s: %s: %w", s.dir, what, ctx.Err())
	}
}

func (s *fileStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	path := filepath.Join(s.dir, keyFile(key))
	var delay time.Duration
	for {
		if err := s.check(); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(path)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("bootstrap: file store: get %q: %w", key, err)
		}
		if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
			// Removed by the job's last rank to settle, or by rank 0.
			return nil, fmt.Errorf("bootstrap: file store %s: get %q: the store's directory is gone: %w", s.dir, key, transport.ErrClosed)
		}
		if err := s.poll(ctx, &delay, fmt.Sprintf("waiting for key %q", key)); err != nil {
			return nil, err
		}
	}
}

func (s *fileStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if err := s.check(); err != nil {
		return 0, err
	}
	lock, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, fmt.Errorf("bootstrap: file store: add to %q: %w", key, err)
	}
	defer lock.Close()
	var delay time.Duration
	for {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			return 0, fmt.Errorf("bootstrap: file store: lock %s: %w", lock.Name(), err)
		}
		if err := s.poll(ctx, &delay, "waiting for the lock"); err != nil {
			return 0, err
		}
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	name := keyFile(key)
	old, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("bootstrap: file store: add to %q: %w", key, err)
	}
	n, err := addValue(key, old, delta)
	if err != nil {
		return 0, err
	}
	if err := writeFileAtomic(s.dir, name, strconv.AppendInt(nil, n, 10)); err != nil {
		return 0, fmt.Errorf("bootstrap: file store: add to %q: %w", key, err)
	}
	return n, nil
}

func (s *fileStore) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}
