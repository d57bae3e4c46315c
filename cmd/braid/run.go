package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/braid-ccl/braid/internal/launch"
)

func runCmd(args []string) error {
	fs := flag.NewFlagSet("braid run", flag.ContinueOnError)
	n := fs.Int("n", 0, "number of ranks to start on this host")
	prefix := fs.Bool("prefix", false, "prefix every output line with [rank]")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: braid run -n N [--prefix] -- PROG [ARGS...]")
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
	return launchLocal(*n, *prefix, resolveProg(rest[0]), rest[1:])
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

// launchLocal starts n ranks of prog; launch.Run forwards SIGINT and
// SIGTERM to them itself.
func launchLocal(n int, prefix bool, prog string, args []string) error {
	return launch.Run(context.Background(), launch.Config{N: n, Prog: prog, Args: args, Prefix: prefix, Stdout: os.Stdout, Stderr: os.Stderr})
}
