package braid_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/agg"
)

func init() { childRoles["aggstore"] = aggStoreChild }

// aggStoreChild is a rank of TestAggThroughStore: it runs three 1 MiB
// allreduces in place (agg forced) and prints the algorithm the planner
// runs them with and the first element (12 on two ranks).
func aggStoreChild() int {
	ctx := context.Background()
	c, err := braid.Init(ctx, nil)
	if err != nil {
		fmt.Printf("RESULT %d %d %s\n", braid.KindOf(err), -1, strings.ReplaceAll(err.Error(), "\n", " "))
		return 0
	}
	defer c.Close()
	buf := make([]float32, 1<<18)
	for i := range buf {
		buf[i] = float32(c.Rank() + 1)
	}
	for range 3 {
		if err := c.Allreduce(ctx, buf, buf, braid.Sum); err != nil {
			fmt.Printf("RESULT %d %d %s\n", braid.KindOf(err), -1, err)
			return 0
		}
	}
	algo, _, err := c.Explain("allreduce", 1<<20, braid.Float32, 0)
	fmt.Printf("ALGO %s %v %v\n", algo, buf[0], err)
	return 0
}

// TestAggThroughStore: the job's aggregation daemons are rank 0's
// BRAID_AGG, which reaches the other ranks through the store, so that a
// launcher that sets it for rank 0 alone is enough (issue 19: "jobs find
// it through the bootstrap store or BRAID_AGG"); a rank that names other
// daemons fails Init with InvalidArgument naming BRAID_AGG.
func TestAggThroughStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	s := agg.NewServer(agg.Config{Secrets: [][]byte{secret}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	daemon := l.Addr().String()
	run := func(name string, agg1 string) []string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		store := ln.Addr().String()
		ln.Close()
		var env []string
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "BRAID_") {
				env = append(env, e)
			}
		}
		env = append(env, "BRAID_TEST_CHILD=aggstore", "BRAID_WORLD_SIZE=2", "BRAID_STORE="+store,
			"BRAID_SECRET="+hex.EncodeToString(secret), "BRAID_JOB=aggstore-"+name, "BRAID_TIMEOUT=20s", "BRAID_ALGO=allreduce=agg")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		outs := make([]lockedBuffer, 2)
		cmds := make([]*exec.Cmd, 2)
		for r := range 2 {
			cmds[r] = exec.CommandContext(ctx, os.Args[0])
			// Two emulated hosts, so that the allreduce spans hosts.
			cmds[r].Env = append(env, fmt.Sprintf("BRAID_RANK=%d", r), fmt.Sprintf("BRAID_HOST=h%d", r))
			if r == 0 {
				cmds[r].Env = append(cmds[r].Env, "BRAID_AGG="+daemon)
			} else if agg1 != "" {
				cmds[r].Env = append(cmds[r].Env, "BRAID_AGG="+agg1)
			}
			cmds[r].Stdout, cmds[r].Stderr = &outs[r], &outs[r]
			if err := cmds[r].Start(); err != nil {
				t.Fatal(err)
			}
		}
		res := make([]string, 2)
		for r, cmd := range cmds {
			cmd.Wait()
			res[r] = outs[r].String()
		}
		return res
	}
	before := s.Stats().Calls
	for r, out := range run("rank0", "") {
		if !strings.Contains(out, "ALGO agg 12 <nil>") {
			t.Errorf("rank %d with BRAID_AGG on rank 0 alone: want the allreduce through the daemon, got:\n%s", r, out)
		}
	}
	if s.Stats().Calls == before {
		t.Errorf("no call went through the daemon")
	}
	out := run("differ", "127.0.0.1:1")
	if !strings.Contains(out[1], fmt.Sprintf("RESULT %d ", braid.InvalidArgument)) || !strings.Contains(out[1], "BRAID_AGG") {
		t.Errorf("rank 1 naming other daemons than rank 0: want InvalidArgument naming BRAID_AGG, got:\n%s", out[1])
	}
	if !strings.Contains(out[0], "RESULT ") {
		t.Errorf("rank 0 of a job whose rank 1 named other daemons: want an error, got:\n%s", out[0])
	}
}
