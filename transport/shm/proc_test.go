package shm

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcesses runs ranks as processes: this one is rank 0, children the
// others (up to 8, on however few cores), and every rank exchanges messages
// of several sizes with every other.
func TestProcesses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		world int
		noCMA bool
	}{{"2", 2, false}, {"4", 4, false}, {"4-NoCMA", 4, true}, {"9", 9, false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var env []string
			if tc.noCMA {
				env = append(env, EnvCMA+"=0")
			}
			var children []*child
			for r := 1; r < tc.world; r++ {
				children = append(children, spawn(t, "exchange", dir, r, tc.world, env...))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m, err := connectRank(ctx, NewWithOptions(Options{NoCMA: tc.noCMA}), dir, 0, tc.world, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range m.(*mesh).list {
				if c.cma == tc.noCMA {
					t.Errorf("single copy to rank %d: %v, want %v", c.peer, c.cma, !tc.noCMA)
				}
			}
			if err := allToAll(ctx, m, 0, tc.world, roundsFor(tc.world)); err != nil {
				t.Error(err)
			}
			if err := m.Close(); err != nil {
				t.Error(err)
			}
			for i, c := range children {
				c.wait(t, i+1)
			}
		})
	}
}

// TestPeerKilled kills a rank in the middle of 4 MiB transfers and checks
// that the survivors, this process and two children, see ErrPeerLost and
// their Lost callback within 2 s. The killed child stays a zombie until the
// end, so that the check of /proc/PID/stat is what notices.
func TestPeerKilled(t *testing.T) {
	for _, noCMA := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoCMA=%v", noCMA), func(t *testing.T) {
			const world = 4
			dir := t.TempDir()
			var env []string
			if noCMA {
				env = append(env, EnvCMA+"=0")
			}
			children := make([]*child, world)
			for r := 1; r < world; r++ {
				children[r] = spawn(t, "kill", dir, r, world, env...)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lost := make(chan error, world)
			m, err := connectRank(ctx, NewWithOptions(Options{NoCMA: noCMA}), dir, 0, world, func(peer int, err error) {
				if peer == victim {
					lost <- err
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			var killed time.Time
			at, err := exchangeWithVictim(ctx, m, 0, world, lost, func(seq uint32) {
				if seq == 3 {
					killed = time.Now()
					children[victim].cmd.Process.Kill()
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			// Every segment file was unlinked at Connect: the killed rank
			// left nothing behind.
			h := fnv.New64a()
			h.Write([]byte("job/"))
			if files, _ := filepath.Glob(filepath.Join(DefaultDir, fmt.Sprintf("braid-%016x-*", h.Sum64()))); len(files) > 0 {
				t.Errorf("segment files left: %v", files)
			}
			if d := at.Sub(killed); d > 2*time.Second {
				t.Errorf("rank 0 learned of the death after %v", d)
			}
			t.Logf("rank 0 learned of the death after %v", at.Sub(killed))
			for r := 1; r < world; r++ {
				if r == victim {
					continue
				}
				c := children[r]
				c.wait(t, r)
				f := strings.Fields(c.stdout.String())
				if len(f) != 2 || f[0] != "LOST" {
					t.Errorf("rank %d: output %q", r, c.stdout.String())
					continue
				}
				ns, _ := strconv.ParseInt(f[1], 10, 64)
				d := time.Unix(0, ns).Sub(killed)
				if d > 2*time.Second || d < 0 {
					t.Errorf("rank %d learned of the death after %v", r, d)
				}
				t.Logf("rank %d learned of the death after %v", r, d)
			}
		})
	}
}
