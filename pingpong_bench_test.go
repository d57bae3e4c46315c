package braid_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/launch"
)

func init() { childRoles["pingpong"] = pingPongChild }

// BenchmarkPingPongProcs times Comm.Send and Comm.Recv between two ranks
// that are processes of one host (so over the shm transport), as
// braid bench --imbalance times α and an MPI ping-pong times MPI_Send
// and MPI_Recv: rank 0 sends BRAID_TEST_BYTES (default 8) to rank 1,
// which sends as many back, b.N times after 1000 untimed round trips.
// ns/op is one round trip and us/oneway half of it, as rank 0 timed them
// (the processes' start is not counted). With BRAID_TEST_CPUPROFILE=F
// each rank writes a CPU profile of its timed trips to F.<rank>.
//
// Each rank sends from a buffer of its own and receives into another, as
// OSU's osu_latency and the anchors' mpibench do. With
// BRAID_TEST_PINGPONG=echo a rank sends back the buffer it has just
// received into (session 18's figures), whose bytes are then in the other
// core's cache, just written: on this 2-core VM (session 19) a 256 KiB
// message took 30 µs one way so and 11.6 from its own buffer (Open MPI's
// mpibench 12.5), 1 MiB 107 and 43 (Open MPI 66).
func BenchmarkPingPongProcs(b *testing.B) {
	size := os.Getenv("BRAID_TEST_BYTES")
	if size == "" {
		size = "8"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := launch.Run(ctx, launch.Config{N: 2, Prog: os.Args[0], Stdout: &out, Stderr: &errOut,
		Env: []string{"BRAID_TEST_CHILD=pingpong", "BRAID_TEST_BYTES=" + size, fmt.Sprintf("BRAID_TEST_TRIPS=%d", b.N),
			"BRAID_TEST_PINGPONG=" + os.Getenv("BRAID_TEST_PINGPONG"), "BRAID_TEST_CPUPROFILE=" + os.Getenv("BRAID_TEST_CPUPROFILE")}})
	if err != nil {
		b.Fatalf("ping-pong: %v\n%s", err, errOut.String())
	}
	_, rest, ok := strings.Cut(out.String(), "pingpong ns/trip ")
	ns, perr := strconv.ParseFloat(strings.TrimSpace(rest), 64)
	if !ok || perr != nil {
		b.Fatalf("ping-pong printed no time:\n%s\n%s", out.String(), errOut.String())
	}
	b.ReportMetric(ns, "ns/op")
	b.ReportMetric(ns/2e3, "us/oneway")
}

// pingPongChild is one rank of BenchmarkPingPongProcs.
func pingPongChild() int {
	size, err1 := strconv.Atoi(os.Getenv("BRAID_TEST_BYTES"))
	trips, err2 := strconv.Atoi(os.Getenv("BRAID_TEST_TRIPS"))
	if err1 != nil || err2 != nil || size < 0 || trips < 1 {
		fmt.Fprintln(os.Stderr, "pingpong: BRAID_TEST_BYTES and BRAID_TEST_TRIPS must be counts")
		return 2
	}
	ctx := context.Background()
	c, err := braid.Init(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	buf, out := make([]byte, size), make([]byte, size)
	if os.Getenv("BRAID_TEST_PINGPONG") == "echo" {
		out = buf
	}
	peer := 1 - c.Rank()
	trip := func() error {
		if c.Rank() == 0 {
			if err := c.Send(ctx, out, peer, 1); err != nil {
				return err
			}
			return c.Recv(ctx, buf, peer, 1)
		}
		if err := c.Recv(ctx, buf, peer, 1); err != nil {
			return err
		}
		return c.Send(ctx, out, peer, 1)
	}
	for range 1000 {
		if err := trip(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if pf := os.Getenv("BRAID_TEST_CPUPROFILE"); pf != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", pf, c.Rank()))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	for range trips {
		if err := trip(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if c.Rank() == 0 {
		fmt.Printf("pingpong ns/trip %.1f\n", float64(time.Since(start).Nanoseconds())/float64(trips))
	}
	return 0
}
