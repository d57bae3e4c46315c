package transporttest

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"time"
)

// FileKV is a transport.KV in a directory, for ranks that are processes:
// one file per key, written atomically; Get polls for it.
type FileKV struct{ Dir string }

func (kv FileKV) path(key string) string {
	return filepath.Join(kv.Dir, "kv-"+hex.EncodeToString([]byte(key)))
}

// Set writes value under key.
func (kv FileKV) Set(ctx context.Context, key string, value []byte) error {
	tmp, err := os.CreateTemp(kv.Dir, "tmp-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(value); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), kv.path(key))
}

// Get returns the value under key, polling every millisecond until it is
// set or ctx ends.
func (kv FileKV) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		v, err := os.ReadFile(kv.path(key))
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}
