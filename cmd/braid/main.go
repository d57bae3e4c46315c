// Command braid is Braid's one binary: it launches local jobs (run) and
// benchmarks collectives (bench) and tunes the planner for this machine
// (tune).
//
//	braid run -n 4 -- braid bench allreduce --check
//	braid bench -n 4 allreduce --check      (the same: bench launches itself)
package main

import (
	"fmt"
	"os"
	"strings"
)

const usage = `braid: collective communication for distributed deep learning

usage:
  braid run -n N [--prefix] -- PROG [ARGS...]   start N local ranks of PROG
  braid bench [-n N] COLLECTIVE [flags]          benchmark a collective (see braid bench -h)
  braid tune [-n 2,4] [flags]                    measure every algorithm here and write a tuning table
  braid topo [--topo PRESET|FILE] [flags]        show a topology, or the spanning trees packed on it (--plan)
  braid sim --topo PRESET|FILE --coll C [flags]  simulate algorithms on a topology; --sweep: trees vs rings on a DGX-1
  braid version

Collectives: allreduce, reduce, bcast, allgather, reducescatter, gather,
scatter, alltoall, barrier.
Environment: BRAID_ALGO, BRAID_TRANSPORT, BRAID_TIMEOUT, BRAID_DEBUG=info|trace,
BRAID_TUNING (a table from braid tune; "none" ignores the cached one),
BRAID_MIAD=off (keep pipelined algorithms' segment fixed), BRAID_TOPO (a topology
file for braid topo and braid sim).
`

const version = "0.1.0"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(os.Args[2:])
	case "bench":
		err = benchCmd(os.Args[2:])
	case "tune":
		err = tuneCmd(os.Args[2:])
	case "topo":
		err = topoCmd(os.Args[2:])
	case "sim":
		err = simCmd(os.Args[2:])
	case "version", "--version", "-v":
		fmt.Println("braid", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "braid: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "braid:") {
			msg = "braid: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		if e, ok := err.(exitCoder); ok {
			os.Exit(e.ExitCode())
		}
		os.Exit(1)
	}
}

type exitCoder interface{ ExitCode() int }

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
func (e usageError) ExitCode() int { return 2 }
