package cma

import (
	"bytes"
	"os"
	"testing"
	"unsafe"
)

// TestReadSelf reads a buffer of this process through process_vm_readv,
// whole and from an offset, and fails on an address that is not mapped.
func TestReadSelf(t *testing.T) {
	src := make([]byte, 3<<20+5)
	for i := range src {
		src[i] = byte(i*7 + i>>12)
	}
	addr := uint64(uintptr(unsafe.Pointer(&src[0])))
	dst := make([]byte, len(src))
	if err := Read(os.Getpid(), dst, addr); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("the copy differs")
	}
	part := make([]byte, 1000)
	if err := Read(os.Getpid(), part, addr+4097); err != nil || !bytes.Equal(part, src[4097:5097]) {
		t.Fatalf("from an offset: %v", err)
	}
	if err := Read(os.Getpid(), part, 8); err == nil {
		t.Error("reading address 8 succeeded")
	}
}
