package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/launch"
)

var built struct {
	once      sync.Once
	dir, skip string
	err       error
}

// cPrograms are the C programs of testdata that buildC builds.
var cPrograms = []string{"smoke", "device"}

// buildC builds libbraid.so and the C programs of testdata against it,
// once, in a temporary directory and returns the path of program name
// there. It skips the test where cgo is off or there is no C compiler.
func buildC(t *testing.T, name string) string {
	t.Helper()
	built.once.Do(func() { built.dir, built.skip, built.err = buildPrograms() })
	if built.skip != "" {
		t.Skip(built.skip)
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return filepath.Join(built.dir, name)
}

func buildPrograms() (dir, skip string, err error) {
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
	dir, err = os.MkdirTemp("", "braid-capi-")
	if err != nil {
		return "", "", err
	}
	build := exec.Command(goTool, "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "libbraid.so"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	for _, name := range cPrograms {
		args := append(cc[1:], "-Wall", "-Wextra", "-Werror", "-O1", "-o", filepath.Join(dir, name), filepath.Join("testdata", name+".c"),
			"-I.", "-L"+dir, "-lbraid", "-Wl,-rpath,"+dir, "-ldl")
		if out, err := exec.Command(cc[0], args...).CombinedOutput(); err != nil {
			return dir, "", fmt.Errorf("%s %s: %v\n%s", cc[0], strings.Join(args, " "), err, out)
		}
	}
	return dir, "", nil
}

// runRanks runs prog on n ranks as braid run does and returns their
// output, prefixed by rank.
func runRanks(t *testing.T, n int, env []string, prog string, args ...string) (string, error) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err := launch.Run(ctx, launch.Config{N: n, Prog: prog, Args: args, Prefix: true,
		Stdout: &out, Stderr: &out, Env: append([]string{"BRAID_TIMEOUT=20s"}, env...), Logf: t.Logf})
	return out.String(), err
}

// TestCSmoke runs testdata/smoke.c, which calls every function of braid.h
// and checks every result element, on 2 and 3 ranks.
func TestCSmoke(t *testing.T) {
	prog := buildC(t, "smoke")
	for _, n := range []int{2, 3} {
		out, err := runRanks(t, n, nil, prog)
		if err != nil || !strings.Contains(out, "ok: ") {
			t.Errorf("%d ranks: %v\n%s", n, err, out)
		}
	}
}

// TestCAbort checks that braid_abort on one rank fails the others' calls
// with BRAID_ERR_ABORTED and the reason (testdata/smoke.c, mode "abort").
func TestCAbort(t *testing.T) {
	prog := buildC(t, "smoke")
	out, err := runRanks(t, 3, nil, prog, "abort")
	for r := 0; r < 2; r++ {
		if !strings.Contains(out, "["+string(rune('0'+r))+"] rank ") {
			t.Errorf("rank %d printed no aborted call", r)
		}
	}
	if t.Failed() || strings.Contains(out, "check failed") {
		t.Errorf("%v\n%s", err, out)
	}
}

// TestCDeviceNoDriver runs testdata/device.c's "nodriver" mode on 2
// ranks with BRAID_CUDA_LIB naming a library that does not exist, as on a
// machine without a GPU (here and in CI, and on a GPU machine too): every
// device call fails with BRAID_ERR_UNSUPPORTED and says that there is no
// CUDA driver, and the host calls go on.
func TestCDeviceNoDriver(t *testing.T) {
	prog := buildC(t, "device")
	out, err := runRanks(t, 2, []string{"BRAID_CUDA_LIB=" + filepath.Join(t.TempDir(), "no-libcuda.so.1")}, prog, "nodriver")
	if err != nil || !strings.Contains(out, "ok: ") {
		t.Errorf("%v\n%s", err, out)
	}
}

// TestCDevice runs testdata/device.c on GPUs: every device call of
// braid.h, blocking and ordered on a stream, checked element by element.
// It runs one rank per GPU, or BRAID_TEST_GPUS ranks (up to 8), which
// share the GPUs where they outnumber them (rank r on GPU r mod the
// count), so that BRAID_TEST_GPUS=2 runs it on a machine with one GPU.
// It skips without a CUDA driver and GPU (as here and in CI), and with
// fewer than 2 ranks.
func TestCDevice(t *testing.T) {
	if !cuda.Available() {
		t.Skip("no CUDA driver or GPU here: the device C test runs on a GPU machine (BRAID_TEST_GPUS=n runs n ranks, sharing the GPUs where n exceeds them)")
	}
	gpus, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	n := gpus
	if s := os.Getenv("BRAID_TEST_GPUS"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > 8 {
			t.Fatalf("BRAID_TEST_GPUS=%q: want a count of ranks from 1 to 8", s)
		}
	}
	if n < 2 {
		t.Skipf("needs 2 ranks, have %d GPU(s): BRAID_TEST_GPUS=2 runs them sharing the GPU", gpus)
	}
	prog := buildC(t, "device")
	out, err := runRanks(t, min(n, 8), []string{"BRAID_TIMEOUT=60s"}, prog, "gpu")
	if err != nil || !strings.Contains(out, "ok: ") {
		t.Errorf("%d ranks on %d GPU(s): %v\n%s", n, gpus, err, out)
	}
	t.Logf("%d ranks on %d GPU(s): %s", n, gpus, strings.TrimSpace(out))
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
