// Command braid is Braid's one binary: it launches local jobs (run),
// benchmarks collectives (bench), tunes the planner for this machine
// (tune), shows topologies and the trees packed on them (topo),
// simulates algorithms on them (sim), and merges the ranks' profiles that
// BRAID_PROFILE writes (prof). braid help lists the environment variables.
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
  braid prof FILE... [flags]                     merge the ranks' profiles (BRAID_PROFILE=FILE): tables, plots, one trace
  braid agg [--listen ADDR] [flags]              run an aggregation daemon for jobs' allreduces (see braid agg -h)
  braid version

Collectives: allreduce, reduce, bcast, allgather, reducescatter, gather,
scatter, alltoall, barrier.

Environment (read when a communicator is created; a bad value is an error
that names the variable):
  BRAID_ALGO       force algorithms: ring (wherever a collective has it), or per
                   collective: allreduce=recdouble,bcast=chain:seg=256K,reduce=knomial:k=4
  BRAID_TUNING     a tuning table from braid tune (default: the one braid tune
                   caches in ~/.cache/braid/tuning.txt, if any); none ignores it
  BRAID_TOPO       the machine's topology: a preset (dgx1-v100, 2xdgx1-v100; braid
                   topo --help lists them) or a JSON file (braid topo --dump); rank r
                   runs on its r-th GPU. Broadcast, reduce and allreduce then pack
                   spanning trees into its links (treepack). Also what braid topo and
                   braid sim show without --topo
  BRAID_MIAD       off: keep pipelined algorithms' segment as planned (default:
                   adapt it over the first calls)
  BRAID_ARRIVAL    off: keep the balanced choice whatever the ranks' arrival
                   spread (default: a reduce above 16 KiB or an allreduce above
                   2 KiB on one host switches to the arrival-aware pap when the
                   ranks arrive far apart, Ω/α > 4)
  BRAID_CLOCK_REFRESH  how often ranks of other hosts than rank 0's refresh
                   their clock offset (default 10s; off)
  BRAID_TRANSPORT  shm (default within a host) or tcp (everywhere)
  BRAID_TIMEOUT    deadline of a call without one in its context: a duration (30s,
                   5m) or seconds, positive (default 30s); a dead peer is reported at once
  BRAID_CHECK      strict: the ranks agree on every call's arguments before its
                   data move (a disagreement fails the call itself); default: a
                   disagreement fails by the next call
  BRAID_DEBUG      info: plans and their reasons; trace: also every call
  BRAID_PROFILE    FILE: every rank records its calls (counts, bytes, time share,
                   size histograms, overlap, partners, algorithms) and writes
                   FILE.RANK and the Chrome trace FILE.RANK.trace.json at Close;
                   braid prof FILE merges them and measures the arrival patterns
  BRAID_FLIGHT     where the flight recorder's dumps go (each rank's last 64
                   calls, dumped at its first failure or Abort and on SIGUSR1):
                   empty for standard error, a directory DIR for
                   DIR/braid-flight.RANK, off for none
  BRAID_HOST       host identity override (ranks with equal host use shared memory;
                   default: the host name and a hash of the boot id, namespaces
                   and /dev/shm's device)
  BRAID_SOCKET_IFNAME  the interface TCP listens on and advertises across hosts,
                   as NCCL_SOCKET_IFNAME: eth0, prefixes eth,ib, ^docker,lo to
                   exclude, =eth0 exact
  BRAID_ADVERTISE_ADDR  the address other hosts dial to reach this rank over TCP
  BRAID_BIND       pin ranks to CPUs like mpirun --bind-to: auto (the default:
                   where ranks take more than half the CPUs, a block of one
                   or two per rank, unless a launcher already bound them or
                   they outnumber the CPUs), none, share (the CPUs divided
                   among the ranks, or an error) or core (one CPU per rank)
  BRAID_SHM_CMA    0: copy through shared memory instead of single copy
                   (process_vm_readv); split: single copy, a message of
                   BRAID_COPY_MIN or more read by several of the rank's
                   threads at once
  BRAID_SHM_EAGER  largest message copied through the shm transport's ring
                   (default 64K); larger ones are one process_vm_readv copy
  BRAID_COPY_THREADS  most threads one rank splits a large copy or reduction
                   of the shm collectives across (default GOMAXPROCS, which
                   Braid lowers to the host's cores per local rank); 1 turns
                   the splitting off; the planner counts on it, so give
                   every rank of a host the same
  BRAID_COPY_MIN   least bytes of a copy or reduction that a rank splits
                   across its threads (default 512K in the shared area, 2M
                   in the executor's steps; from 64K to 1G, setting both);
                   give every rank of a host the same
  BRAID_STREAM_MIN least bytes of a shm collective's output that a rank writes
                   with non-temporal stores, past the caches (default: 3/4
                   of a CPU's share of the last-level cache, at least 1M);
                   off for never
  BRAID_SHM_SLOT   size of a data slot of the host's shared area (the shm
                   collectives; default 1M, less above 8 ranks); every rank
                   must use the same
  BRAID_AGG        aggregation daemons (braid agg) as host:port,...: allreduce
                   may then run through them (agg) across hosts, with the job's
                   secret; absent, full or lost daemons leave it on host
                   algorithms
  BRAID_GPU_HOST_SHARE  percentage of large device allreduces, broadcasts,
                   reduce-scatters and allgathers on 3+ GPUs (on 2 GPUs
                   broadcasts only) sent through host memory beside NVLink
                   (default by size, 8-11 % from 64 MiB; 0
                   turns it off, and a bad value is an error naming it); go doc
                   github.com/braid-ccl/braid DeviceOptions lists the
                   other BRAID_GPU_* knobs
  BRAID_GPU_TUNING  a device tuning table from braid tune --device cuda (default:
                   the one it caches in ~/.cache/braid/tuning-cuda.txt, if any);
                   none ignores it; one measured on other GPUs is refused
  BRAID_GPU_MULTIPATH  a multi-path table from braid tune --device cuda
                   --multipath: the fused kernels' host share by size
  BRAID_CUDA_LIB, BRAID_NVML_LIB  the CUDA driver and NVML libraries to load
                   (default: the loader's search path)
Launchers set BRAID_RANK, BRAID_WORLD_SIZE, BRAID_LOCAL_RANK, BRAID_LOCAL_SIZE,
BRAID_STORE, BRAID_SECRET and BRAID_JOB (braid run does; Open MPI, PMI, Slurm
and torchrun environments are read as they are).
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
	case "prof":
		err = profCmd(os.Args[2:])
	case "agg":
		err = aggCmd(os.Args[2:])
	case guardName:
		guardCmd()
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
