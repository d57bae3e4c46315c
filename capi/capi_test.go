package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/internal/launch"
)

var built struct {
	once       sync.Once
	prog, skip string
	err        error
}

// buildC builds libbraid.so and the C program testdata/smoke.c against it,
// once, in a temporary directory and returns the program's path. It skips
// the test where cgo is off or there is no C compiler.
func buildC(t *testing.T) string {
	t.Helper()
	built.once.Do(func() { built.prog, built.skip, built.err = buildSmoke() })
	if built.skip != "" {
		t.Skip(built.skip)
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.prog
}

func buildSmoke() (prog, skip string, err error) {
	if testing.Short() {
		return "", "-short: building libbraid.so takes a while", nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", "no go command in PATH to build libbraid.so", nil
	}
	goEnv, err := exec.Command(goTool, "env", "CGO_ENABLED", "CC").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env: %v", err)
	}
	lines := strings.Split(string(goEnv), "\n")
	if strings.TrimSpace(lines[0]) != "1" {
		return "", "cgo is off (CGO_ENABLED=0, or no C compiler): the C API is not built", nil
	}
	cc := []string{"cc"}
	if len(lines) > 1 && strings.TrimSpace(lines[1]) != "" {
		cc = strings.Fields(lines[1])
	}
	if _, err := exec.LookPath(cc[0]); err != nil {
		return "", fmt.Sprintf("no C compiler (%s): the C API is not tested", cc[0]), nil
	}
	dir, err := os.MkdirTemp("", "braid-capi-")
	if err != nil {
		return "", "", err
	}
	build := exec.Command(goTool, "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "libbraid.so"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	prog = filepath.Join(dir, "smoke")
	args := append(cc[1:], "-Wall", "-Wextra", "-Werror", "-O1", "-o", prog, filepath.Join("testdata", "smoke.c"),
		"-I.", "-L"+dir, "-lbraid", "-Wl,-rpath,"+dir)
	if out, err := exec.Command(cc[0], args...).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("%s %s: %v\n%s", cc[0], strings.Join(args, " "), err, out)
	}
	return prog, "", nil
}

// runRanks runs prog on n ranks as braid run does and returns their
// output, prefixed by rank.
func runRanks(t *testing.T, n int, prog string, args ...string) (string, error) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := launch.Run(ctx, launch.Config{N: n, Prog: prog, Args: args, Prefix: true,
		Stdout: &out, Stderr: &out, Env: []string{"BRAID_TIMEOUT=20s"}, Logf: t.Logf})
	return out.String(), err
}

// TestCSmoke runs testdata/smoke.c, which calls every function of braid.h
// and checks every result element, on 2 and 3 ranks.
func TestCSmoke(t *testing.T) {
	prog := buildC(t)
	for _, n := range []int{2, 3} {
		out, err := runRanks(t, n, prog)
		if err != nil || !strings.Contains(out, "ok: ") {
			t.Errorf("%d ranks: %v\n%s", n, err, out)
		}
	}
}

// TestCAbort checks that braid_abort on one rank fails the others' calls
// with BRAID_ERR_ABORTED and the reason (testdata/smoke.c, mode "abort").
func TestCAbort(t *testing.T) {
	prog := buildC(t)
	out, err := runRanks(t, 3, prog, "abort")
	for r := 0; r < 2; r++ {
		if !strings.Contains(out, "["+string(rune('0'+r))+"] rank ") {
			t.Errorf("rank %d printed no aborted call", r)
		}
	}
	if t.Failed() || strings.Contains(out, "check failed") {
		t.Errorf("%v\n%s", err, out)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.prog != "" {
		os.RemoveAll(filepath.Dir(built.prog))
	}
	os.Exit(code)
}
