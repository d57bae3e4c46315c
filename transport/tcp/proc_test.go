package tcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/transporttest"
)

// The test binary re-executes itself as other ranks: envRole names what
// the child does, and the other variables give its place in the job.
const (
	envRole   = "BRAID_TCP_TEST_ROLE"
	envRank   = "BRAID_TCP_TEST_RANK"
	envWorld  = "BRAID_TCP_TEST_WORLD"
	envDir    = "BRAID_TCP_TEST_DIR"
	envArg    = "BRAID_TCP_TEST_ARG"
	envStream = "BRAID_TCP_TEST_STREAMS"
)

var childRoles = map[string]func() error{
	"exchange": childExchange,
	"echo":     childEcho,
	"sink":     childSink,
}

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := childRoles[role](); err != nil {
			fmt.Fprintf(os.Stderr, "child rank %s: %v\n", os.Getenv(envRank), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var procSecret = []byte("processes' secret")

// procRank connects rank of world through the file KV in dir.
func procConnect(ctx context.Context, dir string, rank, world, streams int, lost func(int, error)) (transport.Mesh, error) {
	cfg := transport.Config{
		Self:   transport.Endpoint{Rank: rank, PID: os.Getpid()},
		World:  world,
		Store:  transporttest.FileKV{Dir: dir},
		Prefix: "job",
		Secret: procSecret,
		Lost:   lost,
	}
	for r := range world {
		if r != rank {
			cfg.Peers = append(cfg.Peers, transport.Endpoint{Rank: r})
		}
	}
	return New(Options{Streams: streams, ListenAddr: "127.0.0.1:0"}).Connect(ctx, cfg)
}

// startChild starts this test binary as rank of world in role.
func startChild(t testing.TB, role, dir string, rank, world, streams int, arg string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envRank+"="+strconv.Itoa(rank), envWorld+"="+strconv.Itoa(world),
		envDir+"="+dir, envArg+"="+arg, envStream+"="+strconv.Itoa(streams))
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

func childEnv() (rank, world, streams int, dir, arg string) {
	rank, _ = strconv.Atoi(os.Getenv(envRank))
	world, _ = strconv.Atoi(os.Getenv(envWorld))
	streams, _ = strconv.Atoi(os.Getenv(envStream))
	return rank, world, streams, os.Getenv(envDir), os.Getenv(envArg)
}

// exchangeSizes are the messages every rank sends every other rank.
var exchangeSizes = []int{0, 8, 100003, 3<<20 + 5}

func seedOf(from, to, size int) byte { return byte(from*31 + to*7 + size) }

// allToAll sends every exchangeSizes message to every peer and checks what
// comes back.
func allToAll(ctx context.Context, m transport.Mesh, rank, world int) error {
	var reqs []transport.Request
	var checks []func() error
	for peer := range world {
		if peer == rank {
			continue
		}
		for k, size := range exchangeSizes {
			tag := transport.Tag{Comm: 1, Seq: uint32(k), Step: uint32(rank*world + peer)}
			s, err := m.Conn(peer).Isend(tag, pattern(size, seedOf(rank, peer, size)))
			if err != nil {
				return err
			}
			buf := make([]byte, size)
			tag.Step = uint32(peer*world + rank)
			r, err := m.Conn(peer).Irecv(tag, buf)
			if err != nil {
				return err
			}
			reqs = append(reqs, s, r)
			checks = append(checks, func() error {
				if string(buf) != string(pattern(size, seedOf(peer, rank, size))) {
					return fmt.Errorf("message of %d bytes from rank %d differs", size, peer)
				}
				return nil
			})
		}
	}
	if err := transport.Wait(ctx, nil, reqs...); err != nil {
		return err
	}
	for _, c := range checks {
		if err := c(); err != nil {
			return err
		}
	}
	return nil
}

func touch(dir, name string) error { return os.WriteFile(filepath.Join(dir, name), nil, 0o644) }

func waitFile(ctx context.Context, dir, name string) error {
	for {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", name, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// childExchange is ranks 1 and 2 of TestProcesses.
func childExchange() error {
	rank, world, streams, dir, _ := childEnv()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := procConnect(ctx, dir, rank, world, streams, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := allToAll(ctx, m, rank, world); err != nil {
		return err
	}
	if rank == 2 {
		touch(dir, "ready2")
		time.Sleep(time.Minute) // until killed
		return errors.New("not killed")
	}
	// Rank 1: a receive from rank 2 that rank 2 never sends.
	r, err := m.Conn(2).Irecv(transport.Tag{Comm: 2}, make([]byte, 8))
	if err != nil {
		return err
	}
	touch(dir, "ready1")
	err = transport.Wait(ctx, nil, r)
	failed := time.Now()
	if !errors.Is(err, transport.ErrPeerLost) {
		return fmt.Errorf("receive from killed rank 2: %v, want ErrPeerLost", err)
	}
	if !strings.Contains(err.Error(), "peer 2 at 127.0.0.1:") {
		return fmt.Errorf("error does not name rank 2 and its address: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "killed"))
	if err != nil {
		return err
	}
	killed, _ := time.Parse(time.RFC3339Nano, string(b))
	if d := failed.Sub(killed); d > 2*time.Second {
		return fmt.Errorf("ErrPeerLost %v after the kill, want < 2s", d)
	}
	// Rank 0 and 1 still talk.
	buf := make([]byte, 1<<20+1)
	rr, _ := m.Conn(0).Irecv(transport.Tag{Comm: 3}, buf)
	sr, _ := m.Conn(0).Isend(transport.Tag{Comm: 3}, pattern(1<<20+1, 9))
	if err := transport.Wait(ctx, nil, rr, sr); err != nil {
		return err
	}
	if string(buf) != string(pattern(1<<20+1, 9)) {
		return errors.New("message from rank 0 after the kill differs")
	}
	return nil
}

// TestProcesses runs three ranks as processes (this one is rank 0): they
// exchange messages, then rank 2 is killed with SIGKILL and ranks 0 and 1
// must see ErrPeerLost within 2 s, and still talk to each other.
func TestProcesses(t *testing.T) {
	defer checkGoroutines(t)()
	dir := t.TempDir()
	const world = 3
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for rank := 1; rank < world; rank++ {
		cmd, out := startChild(t, "exchange", dir, rank, world, 2, "")
		cmds = append(cmds, cmd)
		outs = append(outs, out)
	}
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	lost := map[int]error{}
	lostAt := map[int]time.Time{}
	lostCalls := 0
	m, err := procConnect(ctx, dir, 0, world, 2, func(peer int, err error) {
		mu.Lock()
		if peer == 2 {
			lostCalls++
		}
		lost[peer], lostAt[peer] = err, time.Now()
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := allToAll(ctx, m, 0, world); err != nil {
		t.Fatal(err)
	}
	r, err := m.Conn(2).Irecv(transport.Tag{Comm: 2}, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFile(ctx, dir, "ready2"); err != nil {
		t.Fatal(err)
	}
	if err := waitFile(ctx, dir, "ready1"); err != nil {
		t.Fatal(err)
	}
	// The time of the kill is in place, whole (renamed), before the kill:
	// rank 1 reads it as soon as it sees rank 2 gone, which may come
	// before this rank would have written it after the signal.
	killed := time.Now()
	tmp := filepath.Join(dir, "killed.tmp")
	if err := os.WriteFile(tmp, []byte(killed.Format(time.RFC3339Nano)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "killed")); err != nil {
		t.Fatal(err)
	}
	if err := cmds[1].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = transport.Wait(ctx, nil, r)
	if d := time.Since(killed); d > 2*time.Second {
		t.Errorf("ErrPeerLost %v after the kill, want < 2s", d)
	}
	if !errors.Is(err, transport.ErrPeerLost) {
		t.Errorf("receive from killed rank 2: %v, want ErrPeerLost", err)
	}
	mu.Lock()
	if lost[2] == nil || !errors.Is(lost[2], transport.ErrPeerLost) || lostAt[2].Sub(killed) > 2*time.Second {
		t.Errorf("Lost(2) = %v at %v after the kill", lost[2], lostAt[2].Sub(killed))
	}
	mu.Unlock()
	// Rank 1 checks the same and exchanges a message with us.
	buf := make([]byte, 1<<20+1)
	rr, _ := m.Conn(1).Irecv(transport.Tag{Comm: 3}, buf)
	sr, _ := m.Conn(1).Isend(transport.Tag{Comm: 3}, pattern(1<<20+1, 9))
	if err := transport.Wait(ctx, nil, rr, sr); err != nil {
		werr := cmds[0].Wait()
		t.Fatalf("exchange with rank 1 after the kill: %v (rank 1: %v)\n%s", err, werr, outs[0])
	}
	if err := cmds[0].Wait(); err != nil {
		t.Errorf("rank 1: %v\n%s", err, outs[0])
	}
	cmds[1].Wait()
	mu.Lock()
	if lostCalls != 1 {
		t.Errorf("Lost called %d times for rank 2", lostCalls)
	}
	mu.Unlock()
}

// childEcho is the far rank of BenchmarkPingPongProcs: it echoes 8-byte
// messages, "count,mode" of them, waiting as waitMode says.
func childEcho() error {
	rank, world, streams, dir, arg := childEnv()
	var n int
	var mode string
	fmt.Sscanf(strings.Replace(arg, ",", " ", 1), "%d %s", &n, &mode)
	ctx := context.Background()
	m, err := procConnect(ctx, dir, rank, world, streams, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	c := m.Conn(0)
	buf := make([]byte, 8)
	for i := range n {
		tag := transport.Tag{Comm: 1, Seq: uint32(i), Step: 1}
		r, _ := c.Irecv(tag, buf)
		if err := waitMode(ctx, mode, r); err != nil {
			return err
		}
		tag.Step = 2
		s, _ := c.Isend(tag, buf)
		if err := waitMode(ctx, mode, s); err != nil {
			return err
		}
	}
	// Wait for rank 0 to finish before closing.
	r, _ := c.Irecv(transport.Tag{Comm: 9}, nil)
	return transport.Wait(ctx, nil, r)
}

// waitMode waits for reqs: "block" blocks on their Done channels at once,
// anything else calls transport.Wait (spin, yield, then block).
func waitMode(ctx context.Context, mode string, reqs ...transport.Request) error {
	if mode != "block" {
		return transport.Wait(ctx, nil, reqs...)
	}
	for _, r := range reqs {
		<-r.Done()
		if _, err := r.Test(); err != nil {
			return err
		}
	}
	return nil
}

// childSink is the far rank of BenchmarkThroughputProcs: it receives
// "count,size" messages, 4 at a time.
func childSink() error {
	rank, world, streams, dir, arg := childEnv()
	var n, size int
	fmt.Sscanf(arg, "%d,%d", &n, &size)
	ctx := context.Background()
	m, err := procConnect(ctx, dir, rank, world, streams, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	c := m.Conn(0)
	const window = 4
	bufs := make([][]byte, window)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	var reqs []transport.Request
	for i := range n {
		r, _ := c.Irecv(transport.Tag{Comm: 2, Seq: uint32(i)}, bufs[i%window])
		reqs = append(reqs, r)
		if len(reqs) == window {
			if err := transport.Wait(ctx, nil, reqs...); err != nil {
				return err
			}
			reqs = reqs[:0]
		}
	}
	if err := transport.Wait(ctx, nil, reqs...); err != nil {
		return err
	}
	s, _ := c.Isend(transport.Tag{Comm: 9}, nil)
	return transport.Wait(ctx, nil, s)
}
