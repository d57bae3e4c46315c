package transporttest

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestMemKV(t *testing.T) {
	kv := &MemKV{}
	ctx := context.Background()
	got := make(chan []byte)
	go func() {
		v, err := kv.Get(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	time.Sleep(time.Millisecond)
	val := []byte("v1")
	if err := kv.Set(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	val[0] = 'x' // Set keeps a copy
	if v := <-got; string(v) != "v1" {
		t.Errorf("Get = %q, want v1", v)
	}
	kv.Set(ctx, "k", []byte("v2"))
	if v, _ := kv.Get(ctx, "k"); string(v) != "v2" {
		t.Errorf("Get after a second Set = %q, want v2", v)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	if _, err := kv.Get(short, "missing"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get of a missing key = %v, want DeadlineExceeded", err)
	}
}
