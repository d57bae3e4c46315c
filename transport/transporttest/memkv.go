package transporttest

import (
	"context"
	"sync"
)

// MemKV is a transport.KV held in memory, for ranks that are goroutines of
// one process. Get waits until the key is set. The zero value is ready to use
// and a MemKV may be used from any number of goroutines.
type MemKV struct {
	mu   sync.Mutex
	vals map[string][]byte
	wait map[string]chan struct{}
}

// Set stores a copy of value under key and wakes the Gets waiting for it.
func (kv *MemKV) Set(ctx context.Context, key string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.vals == nil {
		kv.vals = make(map[string][]byte)
	}
	kv.vals[key] = append([]byte(nil), value...)
	if ch, ok := kv.wait[key]; ok {
		close(ch)
		delete(kv.wait, key)
	}
	return nil
}

// Get returns a copy of the value under key, waiting until it is set or ctx
// ends; in the latter case it returns ctx's error.
func (kv *MemKV) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		kv.mu.Lock()
		if v, ok := kv.vals[key]; ok {
			kv.mu.Unlock()
			return append([]byte(nil), v...), nil
		}
		if kv.wait == nil {
			kv.wait = make(map[string]chan struct{})
		}
		ch, ok := kv.wait[key]
		if !ok {
			ch = make(chan struct{})
			kv.wait[key] = ch
		}
		kv.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
