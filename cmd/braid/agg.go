package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/braid-ccl/braid/agg"
	"github.com/braid-ccl/braid/internal/size"
)

const aggUsage = `usage: braid agg [--listen ADDR] [flags]
       braid agg --stats ADDR [--job NAME]

Runs an aggregation daemon: in-network reduction in software, after
"Designing In-network Computing Aware Reduction Collectives in MPI" (Ramesh
et al., HotI 2023), on a machine of its own as BytePS's summation servers
are (OSDI 2020). The ranks of a job that names it in BRAID_AGG=host:port,...
send it their part of each large allreduce once and receive the sum once,
instead of 2(n−1)/n times the vector through a ring: on a network of equal
links that is up to 2(n−1)/n times the ring's bandwidth, if the daemons'
links are wider than the hosts' (or there are several daemons: each call is
sharded over all of them). Small vectors take one round trip.

A job is admitted if it proves that it holds a secret the daemon holds:
BRAID_SECRET (hex, as the job's launcher sets it for the ranks) and the
lines of --secret-file, which is read again whenever it changes (a
launcher may add a job's secret to it while the daemon runs). Groups of a
job never meet another job's. Each group reserves its memory when it is
made; a join beyond --max-memory, --max-job-memory or --max-job-groups is
answered "no resources" and the job's allreduces run on host algorithms.
A job whose rank dies loses its groups at once (its other ranks fall back
or fail cleanly); other jobs go on. Refused connections, lost members and
ended groups are logged on standard error; --stats ADDR prints a running
daemon's statistics (as JSON), as the job --job with BRAID_SECRET.

examples:
  BRAID_SECRET=$S braid agg --listen 10.0.0.9:7470
  BRAID_AGG=10.0.0.9:7470 BRAID_SECRET=$S ... (every rank of the job)
  BRAID_SECRET=$S braid agg --stats 10.0.0.9:7470

flags:
`

func aggCmd(args []string) error {
	fs := flag.NewFlagSet("braid agg", flag.ContinueOnError)
	listen := fs.String("listen", ":7470", "address to listen on (host:port)")
	secretFile := fs.String("secret-file", "", "a file of more job secrets, one hex secret a line, read again when it changes")
	maxMem := fs.String("max-memory", "1G", "memory all groups may reserve")
	maxJobMem := fs.String("max-job-memory", "", "memory one job's groups may reserve (default half of --max-memory)")
	maxJobGroups := fs.Int("max-job-groups", 256, "groups one job may hold")
	ioTimeout := fs.Duration("io-timeout", 60*time.Second, "longest write to a client: one that stops reading loses its groups")
	joinTimeout := fs.Duration("join-timeout", 60*time.Second, "longest wait for a group's last member to join")
	stats := fs.String("stats", "", "print the statistics of the daemon at ADDR and exit")
	job := fs.String("job", "braid-agg-stats", "the job name --stats authenticates as")
	fs.Usage = func() { fmt.Fprint(os.Stderr, aggUsage); fs.PrintDefaults() }
	if done, err := parseFlags(fs, args); done {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("agg: unexpected argument %q (braid agg --help)", fs.Arg(0))}
	}
	var secrets [][]byte
	if s := os.Getenv("BRAID_SECRET"); s != "" {
		b, err := agg.ParseSecret(s)
		if err != nil {
			return fmt.Errorf("agg: BRAID_SECRET: %v", err)
		}
		secrets = append(secrets, b)
	}
	if *stats != "" {
		if len(secrets) == 0 {
			return usageError{"agg: --stats needs BRAID_SECRET, a secret the daemon holds"}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := agg.FetchStats(ctx, *stats, *job, secrets[0])
		if err != nil {
			return fmt.Errorf("agg: %v", err)
		}
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Println(string(b))
		return nil
	}
	if *secretFile != "" {
		if _, err := agg.ReadSecretFile(*secretFile); err != nil {
			return fmt.Errorf("agg: --secret-file: %v", err)
		}
	}
	if len(secrets) == 0 && *secretFile == "" {
		return usageError{"agg: no secret: set BRAID_SECRET (hex) or --secret-file, or every job would be refused"}
	}
	mm, err := size.Parse(*maxMem)
	if err != nil || mm <= 0 {
		return usageError{fmt.Sprintf("agg: --max-memory %q: want a size such as 512M or 4G", *maxMem)}
	}
	var mj int64
	if *maxJobMem != "" {
		if mj, err = size.Parse(*maxJobMem); err != nil || mj <= 0 {
			return usageError{fmt.Sprintf("agg: --max-job-memory %q: want a size such as 256M", *maxJobMem)}
		}
	}
	if *maxJobGroups < 1 || *ioTimeout <= 0 || *joinTimeout <= 0 {
		return usageError{"agg: --max-job-groups, --io-timeout and --join-timeout must be positive"}
	}
	// The reservations bound what groups hold; the runtime's limit keeps
	// garbage from piling up above them.
	debug.SetMemoryLimit(mm + mm/4 + 64<<20)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("agg: %v", err)
	}
	s := agg.NewServer(agg.Config{Secrets: secrets, SecretFile: *secretFile, MaxMemory: mm, MaxJobMemory: mj,
		MaxJobGroups: *maxJobGroups, IOTimeout: *ioTimeout, JoinTimeout: *joinTimeout})
	fmt.Fprintf(os.Stderr, "braid agg: listening on %s (%d secrets%s, up to %s of groups)\n", l.Addr(), len(secrets),
		map[bool]string{true: " and " + *secretFile, false: ""}[*secretFile != ""], size.Format(mm))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	go func() {
		for x := range sig {
			if x == syscall.SIGUSR1 {
				b, _ := json.Marshal(s.Stats())
				fmt.Fprintf(os.Stderr, "braid agg: stats %s\n", b)
				continue
			}
			s.Close()
			return
		}
	}()
	err = s.Serve(l)
	b, _ := json.Marshal(s.Stats())
	fmt.Fprintf(os.Stderr, "braid agg: stopped; stats %s\n", b)
	return err
}
