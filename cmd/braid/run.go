package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/launch"
	"github.com/braid-ccl/braid/transport/shm"
	"github.com/braid-ccl/braid/transport/shmcoll"
	"github.com/braid-ccl/braid/transport/shmreg"
)

func runCmd(args []string) error {
	fs := flag.NewFlagSet("braid run", flag.ContinueOnError)
	n := fs.Int("n", 0, "number of ranks to start on this host")
	prefix := fs.Bool("prefix", false, "prefix every output line with [rank]")
	bind := fs.String("bind", "", "how the ranks pin themselves to CPUs (sets BRAID_BIND): auto (the ranks' default: where they take more than half the CPUs, a block of one or two each, unless already bound or outnumbered), none, share or core")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: braid run -n N [--prefix] [--bind MODE] -- PROG [ARGS...]")
		fs.PrintDefaults()
	}
	if done, err := parseFlags(fs, args); done {
		return err
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if !given(fs)["n"] {
		return usageError{"run: -n N (N ≥ 1) is required"}
	}
	if *n < 1 {
		return usageError{fmt.Sprintf("run: -n %d: want N ≥ 1 ranks to start", *n)}
	}
	if len(rest) == 0 {
		return usageError{"run: no program given (braid run -n N -- PROG ARGS)"}
	}
	return launchLocal(*n, *prefix, *bind, resolveProg(rest[0]), rest[1:])
}

// bindEnv returns the variables that pass --bind to the ranks
// (BRAID_BIND): none if the flag is not given, so that the ranks keep the
// environment's BRAID_BIND or braid.Options.Bind's default (auto).
func bindEnv(flag string) ([]string, error) {
	switch flag {
	case "":
		return nil, nil
	case braid.BindAuto, braid.BindNone, braid.BindShare, braid.BindCore:
		return []string{"BRAID_BIND=" + flag}, nil
	}
	return nil, usageError{fmt.Sprintf("run: --bind %q: want auto, none, share or core", flag)}
}

// resolveProg lets "braid" name this very binary, so that
// `braid run -n 4 -- braid bench ...` works without braid on PATH.
func resolveProg(p string) string {
	if p == "braid" {
		if self, err := os.Executable(); err == nil {
			return self
		}
	}
	return p
}

// launchLocal starts n ranks of prog, bound to CPUs as bind says (see
// bindEnv; "" leaves it to the ranks); launch.Run forwards SIGINT and SIGTERM to
// them itself. A guardian (braid __guard, guardCmd) removes the
// shared-memory files of ranks that braid run's death killed.
func launchLocal(n int, prefix bool, bind string, prog string, args []string) error {
	env, err := bindEnv(bind)
	if err != nil {
		return err
	}
	cfg := launch.Config{N: n, Prog: prog, Args: args, Env: env, Prefix: prefix, Stdout: os.Stdout, Stderr: os.Stderr}
	if self, err := os.Executable(); err == nil {
		cfg.Guard = []string{self, guardName}
	}
	return launch.Run(context.Background(), cfg)
}

// guardName is the hidden command of braid run's guardian.
const guardName = "__guard"

// guardLimit bounds how long the guardian waits for the ranks to be gone
// once braid run has ended or died.
const guardLimit = 10 * time.Second

// guardCmd is braid run's guardian (launch.Config.Guard): it reads the
// ranks' pids on standard input until braid run ends or dies, waits for
// the ranks to be gone, and removes the shared-memory files that dead
// processes left in /dev/shm: the shm transport's segments, the
// registered pools and the shared areas, each judged by the maker's pid
// and PID namespace in its name (internal/shmfile). Terminal signals are
// not its business: braid run handles them.
func guardCmd() {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM)
	launch.Guard(os.Stdin, guardLimit, func([]int) {
		// The files of ranks still alive are theirs to remove, and
		// ReapStale leaves them alone.
		shm.ReapStale(shm.DefaultDir)
		shmreg.ReapStale(shm.DefaultDir)
		shmcoll.ReapStale(shm.DefaultDir)
	})
}
