package shmfile

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestCreateOpen makes a file, maps it a second time through Open (whose
// check sees the size and may refuse it), and sees one write through
// both; a second Create of the same path fails and leaves the file.
func TestCreateOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	a, err := Create(path, 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(a)
	var seen int64
	b, err := Open(path, func(n int64) error { seen = n; return nil })
	if err != nil || len(b) != 8192 || seen != 8192 {
		t.Fatalf("Open: %d bytes (check saw %d), %v", len(b), seen, err)
	}
	defer Unmap(b)
	a[5000] = 7
	if b[5000] != 7 {
		t.Error("a write through one mapping is not seen through the other")
	}
	refuse := errors.New("wrong size")
	if _, err := Open(path, func(int64) error { return refuse }); !errors.Is(err, refuse) {
		t.Errorf("a refused size: %v", err)
	}
	if _, err := Create(path, 4096); err == nil {
		t.Error("a second Create of the same path succeeded")
	}
	if c, err := Open(path, nil); err != nil || len(c) != 8192 {
		t.Errorf("the file after a failed Create: %d bytes, %v", len(c), err)
	} else {
		Unmap(c)
	}
}
