package shmfile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var testRe = regexp.MustCompile(`^test-p([0-9]+)-n([0-9]+)$`)

// TestReapZombie: the file of a process that died but is not reaped yet (a
// zombie, as ranks whose launcher was killed are until someone adopts and
// reaps them) is removed; a live process's is kept.
func TestReapZombie(t *testing.T) {
	ns := PIDNamespace()
	if ns == 0 {
		t.Skip("no /proc/self/ns/pid")
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Skip(err)
	}
	pid := child.Process.Pid
	child.Process.Kill()
	defer child.Wait()
	// Not waited for: a zombie, once the kill is through.
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("process %d did not become a zombie: %s", pid, b)
		}
	}
	dir := t.TempDir()
	file := func(pid int) string {
		p := filepath.Join(dir, fmt.Sprintf("test-p%d-n%d", pid, ns))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	zombie, live := file(pid), file(os.Getpid())
	ReapStale(dir, testRe)
	if _, err := os.Stat(zombie); !os.IsNotExist(err) {
		t.Errorf("the zombie's file is still there (%v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live process's file: %v", err)
	}
}
