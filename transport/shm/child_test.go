package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/transporttest"
)

// The test binary re-executes itself as a rank: TestMain sees envChild and
// runs runChild instead of the tests.
const (
	envChild = "BRAID_SHM_TEST_CHILD" // the role: exchange, kill, echo
	envDir   = "BRAID_SHM_TEST_DIR"   // the FileKV's directory
	envRank  = "BRAID_SHM_TEST_RANK"
	envWorld = "BRAID_SHM_TEST_WORLD"
	envSize  = "BRAID_SHM_TEST_SIZE" // echo: message size

	envBenchSpin = "BRAID_SHM_BENCH_SPIN" // benchmarks: spin on Test instead of transport.Wait
)

// connectRank connects rank of world through the transporttest.FileKV in dir.
func connectRank(ctx context.Context, tr transport.Transport, dir string, rank, world int, lost func(peer int, err error)) (transport.Mesh, error) {
	cfg := transport.Config{
		Self:   transport.Endpoint{Rank: rank, Host: "test", PID: os.Getpid()},
		World:  world,
		Store:  transporttest.FileKV{Dir: dir},
		Prefix: "job/",
		Secret: []byte("secret"),
		Lost:   lost,
	}
	for p := range world {
		if p != rank {
			cfg.Peers = append(cfg.Peers, transport.Endpoint{Rank: p, Host: "test"})
		}
	}
	return tr.Connect(ctx, cfg)
}

func envInt(name string) int {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	return v
}

// runChild runs the role of a child process and returns its exit code.
func runChild(role string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, rank, world := os.Getenv(envDir), envInt(envRank), envInt(envWorld)
	lost := make(chan error, world)
	m, err := connectRank(ctx, New(), dir, rank, world, func(peer int, err error) {
		if peer == victim {
			lost <- err
		}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch role {
	case "exchange":
		err = allToAll(ctx, m, rank, world, roundsFor(world))
		if cerr := m.Close(); err == nil {
			err = cerr
		}
	case "kill":
		var at time.Time
		at, err = exchangeWithVictim(ctx, m, rank, world, lost, nil)
		if err == nil {
			fmt.Printf("LOST %d\n", at.UnixNano())
		}
	case "echo":
		err = echo(ctx, m.Conn(0), envInt(envSize))
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", rank, err)
		return 1
	}
	return 0
}

// noise is a table that messages are windows of; its length is prime.
var noise = func() []byte {
	const n = 65521
	b := make([]byte, 2*n)
	x := uint32(1)
	for i := range n {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	copy(b[n:], b[:n])
	return b
}()

// pattern fills a message deterministically from its source, destination
// and sequence number.
func pattern(b []byte, from, to int, seq uint32) {
	n := len(noise) / 2
	off := (from*7919 + to*104729 + int(seq)*31) % n
	for i := 0; i < len(b); {
		i += copy(b[i:], noise[off:off+n])
	}
}

// roundsFor returns how many rounds of allToAll a world of processes runs:
// fewer when there are many more processes than cores.
func roundsFor(world int) int {
	if world > 4 {
		return 1
	}
	return 3
}

var exchangeSizes = []int{0, 8, 20000, 1<<20 + 3, 3 << 20}

// allToAll exchanges messages of every size in exchangeSizes between rank
// and every other rank, rounds times, and checks them.
func allToAll(ctx context.Context, m transport.Mesh, rank, world, rounds int) error {
	for round := range rounds {
		var reqs []transport.Request
		type recv struct {
			buf  []byte
			from int
			seq  uint32
		}
		var recvs []recv
		for i, size := range exchangeSizes {
			seq := uint32(round*len(exchangeSizes) + i)
			tag := transport.Tag{Comm: 1, Seq: seq, Sig: uint32(size)}
			for p := range world {
				if p == rank {
					continue
				}
				data := make([]byte, size)
				pattern(data, rank, p, seq)
				s, err := m.Conn(p).Isend(tag, data)
				if err != nil {
					return err
				}
				buf := make([]byte, size)
				r, err := m.Conn(p).Irecv(tag, buf)
				if err != nil {
					return err
				}
				reqs = append(reqs, s, r)
				recvs = append(recvs, recv{buf, p, seq})
			}
		}
		if err := transport.Wait(ctx, nil, reqs...); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		for _, r := range recvs {
			want := make([]byte, len(r.buf))
			pattern(want, r.from, rank, r.seq)
			if !bytes.Equal(r.buf, want) {
				return fmt.Errorf("round %d: message %d of %d bytes from rank %d is wrong", round, r.seq, len(r.buf), r.from)
			}
		}
	}
	return nil
}

// victim is the rank that TestPeerKilled kills.
const victim = 1

// exchangeWithVictim exchanges 4 MiB messages with the victim (or, on the
// victim, with everyone) until that fails, calling round after each round.
// A survivor then checks that the error and its Lost callback name the
// victim, and returns when it learned of the death.
func exchangeWithVictim(ctx context.Context, m transport.Mesh, rank, world int, lost chan error, round func(seq uint32)) (time.Time, error) {
	var peers []int
	for p := range world {
		if p != rank && (rank == victim || p == victim) {
			peers = append(peers, p)
		}
	}
	data, buf := make([]byte, 4<<20), make([][]byte, world)
	for seq := uint32(0); ; seq++ {
		var reqs []transport.Request
		for _, p := range peers {
			if buf[p] == nil {
				buf[p] = make([]byte, len(data))
			}
			s, err := m.Conn(p).Isend(transport.Tag{Seq: seq}, data)
			if err == nil {
				reqs = append(reqs, s)
				var r transport.Request
				r, err = m.Conn(p).Irecv(transport.Tag{Seq: seq}, buf[p])
				reqs = append(reqs, r)
			}
			if err != nil {
				return checkLoss(err, lost)
			}
		}
		if err := transport.Wait(ctx, nil, reqs...); err != nil {
			return checkLoss(err, lost)
		}
		if round != nil {
			round(seq)
		}
	}
}

func checkLoss(err error, lost chan error) (time.Time, error) {
	now := time.Now()
	if !errors.Is(err, transport.ErrPeerLost) {
		return now, fmt.Errorf("request failed with %v, want ErrPeerLost", err)
	}
	select {
	case lerr := <-lost:
		if !errors.Is(lerr, transport.ErrPeerLost) {
			return now, fmt.Errorf("Lost(%d, %v), want ErrPeerLost", victim, lerr)
		}
	case <-time.After(2 * time.Second):
		return now, fmt.Errorf("Lost not called for rank %d", victim)
	}
	return now, nil
}

// echo receives messages of size bytes from conn and sends each back, until
// that fails.
func echo(ctx context.Context, c transport.Conn, size int) error {
	buf := make([]byte, size)
	for seq := uint32(0); ; seq++ {
		tag := transport.Tag{Seq: seq}
		r, err := c.Irecv(tag, buf)
		if err == nil {
			err = wait(ctx, r)
		}
		if err != nil {
			return ignoreLoss(err)
		}
		s, err := c.Isend(tag, buf)
		if err == nil {
			err = wait(ctx, s)
		}
		if err != nil {
			return ignoreLoss(err)
		}
	}
}

func wait(ctx context.Context, r transport.Request) error {
	if os.Getenv(envBenchSpin) == "" {
		return transport.Wait(ctx, nil, r)
	}
	for {
		done, err := r.Test()
		if done || err != nil {
			return err
		}
	}
}

func ignoreLoss(err error) error {
	if errors.Is(err, transport.ErrPeerLost) || errors.Is(err, transport.ErrClosed) {
		return nil
	}
	return err
}

// child is a running child process.
type child struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
}

// spawn starts the test binary as rank of world in role.
func spawn(t testing.TB, role, dir string, rank, world int, env ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(os.Environ(), envChild+"="+role, envDir+"="+dir,
		envRank+"="+strconv.Itoa(rank), envWorld+"="+strconv.Itoa(world))
	c.cmd.Env = append(c.cmd.Env, env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	return c
}

// wait waits for the child to exit and reports a failure.
func (c *child) wait(t testing.TB, rank int) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("rank %d: %v\nstderr: %s", rank, err, c.stderr.String())
		}
	case <-time.After(40 * time.Second):
		c.cmd.Process.Kill()
		<-done
		t.Errorf("rank %d did not exit\nstderr: %s", rank, c.stderr.String())
	}
}
