package shmcoll

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/internal/shmfile"
	"github.com/braid-ccl/braid/transport/transporttest"
)

// envMake makes the test binary a child that makes an area in the
// directory it names, prints the file's path, and waits to be killed.
const envMake = "BRAID_SHMCOLL_TEST_MAKE"

func TestMain(m *testing.M) {
	if dir := os.Getenv(envMake); dir != "" {
		_, path, err := Make(dir, 2, Options{}, []byte("area-test-secret"))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(path)
		time.Sleep(time.Hour)
	}
	os.Exit(m.Run())
}

// TestReapStale kills a process between its making an area's file and
// the file's unlinking (as a rank 0 killed during Init or Split is): the
// next area made in that directory removes the file, and leaves alone the
// files of live processes, of another PID namespace, of an older release
// and of the shm transport.
func TestReapStale(t *testing.T) {
	ns := shmfile.PIDNamespace()
	if ns == 0 {
		t.Skip("no /proc/self/ns/pid")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envMake+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	stale := strings.TrimSpace(line)
	if err != nil || filepath.Dir(stale) != dir {
		t.Fatalf("the child made %q (%v)", stale, err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("the killed child's area file: %v", err)
	}
	dead := cmd.Process.Pid
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rnd := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	keep := []string{
		file(areaName(os.Getpid(), ns, rnd)),                                     // a live process's
		file(areaName(dead, ns+1, rnd)),                                          // another namespace's: its pid means nothing here
		file(fmt.Sprintf("braid-coll-%d-0102030405060708", dead)),                // an older release's name
		file(fmt.Sprintf("braid-0123456789abcdef-0-p%d-n%d-01020304", dead, ns)), // the shm transport's
	}
	g, path, err := Make(dir, 2, Options{}, []byte("area-test-secret"))
	if err != nil {
		t.Fatal(err)
	}
	Unlink(path)
	g.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead process's area file %s is still there (%v)", filepath.Base(stale), err)
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it left alone", filepath.Base(p), err)
		}
	}
}

// TestReapAfterFailedJoin: a Join that fails (here rank 1's, whose rank 0
// made the area's file and died before it was whole, as a rank 0 killed
// during Init) removes the file, now that its maker is dead, rather than
// leaving it to the next area made on the host.
func TestReapAfterFailedJoin(t *testing.T) {
	ns := shmfile.PIDNamespace()
	if ns == 0 {
		t.Skip("no /proc/self/ns/pid")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, areaName(dead.Process.Pid, ns, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}))
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv := &transporttest.MemKV{}
	kv.Set(ctx, "area/file", []byte("ok "+stale))
	kv.Set(ctx, "area/r/0", []byte("ok"))
	_, err := Join(ctx, Config{Rank: 1, Ranks: 2, Store: kv, Key: "area", Secret: []byte("s"), Dir: dir})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Join: %v, want ErrUnavailable", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead rank 0's area file is still there (%v)", err)
	}
}

func TestFlatMaxFor(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{1, 2048}, {2, 4096}, {3, 2048}, {8, 2048}, {15, 2048}, {16, 1024}, {31, 1024}, {32, 512}, {63, 512}, {64, 256}, {512, 256},
	} {
		if got := FlatMaxFor(tc.n); got != tc.want {
			t.Errorf("FlatMaxFor(%d) = %d, want %d", tc.n, got, tc.want)
		}
		o, err := Options{}.Check(tc.n)
		if err != nil || o.FlatMax != min(tc.want, o.Slot) {
			t.Errorf("Options{}.Check(%d): FlatMax %d, %v; want %d", tc.n, o.FlatMax, err, tc.want)
		}
	}
}
