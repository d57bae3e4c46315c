package braid_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
)

// TestFlightRecorder: two goroutine ranks with BRAID_FLIGHT=DIR make four
// calls; SIGUSR1 makes each dump them to DIR/braid-flight.RANK, oldest
// first, done, with their sequence numbers; Abort appends a dump whose
// reason names it.
func TestFlightRecorder(t *testing.T) {
	dir := t.TempDir()
	comms, err := braid.NewLocal(2, &braid.Options{Flight: dir})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			v := make([]float64, 3)
			for range 3 {
				if err := c.Allreduce(ctx, v, v, braid.Sum); err != nil {
					t.Error(err)
				}
			}
			if err := c.Bcast(ctx, make([]int32, 1000), 1); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	read := func(r int) string {
		b, _ := os.ReadFile(filepath.Join(dir, "braid-flight."+string(rune('0'+r))))
		return string(b)
	}
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(read(0), "signal") && strings.Contains(read(1), "signal") {
			break
		}
	}
	row := regexp.MustCompile(`(?m)^braid: rank (\d): +[0-9a-f]{8} +(\d+) (\w+) +(\d+) +(\S+) +(\w+) `)
	for r := range 2 {
		s := read(r)
		if !strings.Contains(s, "flight recorder, the last 4 of 4 calls, oldest first (signal user defined signal 1)") {
			t.Fatalf("rank %d's dump after SIGUSR1:\n%s", r, s)
		}
		m := row.FindAllStringSubmatch(s, -1)
		want := [][]string{{"1", "allreduce", "24"}, {"2", "allreduce", "24"}, {"3", "allreduce", "24"}, {"4", "bcast", "4000"}}
		if len(m) != len(want) {
			t.Fatalf("rank %d: %d calls in the dump, want %d:\n%s", r, len(m), len(want), s)
		}
		for i, w := range want {
			if m[i][1] != string(rune('0'+r)) || m[i][2] != w[0] || m[i][3] != w[1] || m[i][4] != w[2] || m[i][6] != "done" {
				t.Errorf("rank %d: call %d is %q, want seq %s, %s of %s bytes, done", r, i, m[i][0], w[0], w[1], w[2])
			}
		}
	}
	comms[0].Abort(errors.New("test abort"))
	if s := read(0); !strings.Contains(s, "(failure: ") || !strings.Contains(s, "test abort") {
		t.Errorf("rank 0's file after Abort:\n%s", s)
	}
	for _, c := range comms {
		c.Close()
	}
}
