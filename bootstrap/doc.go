// Package bootstrap is how a rank finds its place in a job and meets its
// peers: it reads the launcher's environment (braid run, Open MPI, MPICH's
// hydra and other PMI launchers, Slurm, torchrun) into an Info, and opens
// the job's key-value store, through which the ranks exchange addresses
// before their transports connect.
//
// Stores implement transport.KV, plus an atomic Add and Close:
//
//   - the TCP store (ServeTCPStore, DialTCPStore): a server, hosted by
//     braid run or by rank 0, holds the keys in memory; a Get waits in the
//     server until its key is set. Every connection proves, in both
//     directions, that it knows the job's secret (HMAC-SHA256 over fresh
//     nonces); a client that does not is refused and logged (a few lines
//     per interval, then a summary). Connections still in the handshake
//     are capped per client address and in all (StoreLimits).
//   - the Redis store (DialRedisStore, BRAID_STORE=redis://[:PASSWORD@]HOST:PORT[/DB]):
//     the keys in a Redis server that the site runs, under a prefix that
//     hashes the job's secret and name; every value carries an HMAC of
//     the secret, so that a value planted by a client without it is
//     refused; the keys expire after RedisTTL and the job deletes them
//     when it closes.
//   - the file store (NewFileStore): one file per key in a directory that
//     the ranks share (on one host, or on a shared file system).
//   - the memory store (NewMemStore): for a single rank, or for ranks that
//     are goroutines of one process.
//
// Open picks and opens the store an Info names, serving it when the Info
// says this rank hosts it, and derives the job's secret when the launcher
// gave none. Settle removes what the job keeps on disk as soon as every
// rank has set up; Lost reports the death of the store's server (the
// launcher); LostRank reports a rank that died or left (Leave) during its
// set-up, which a TCP store sees, so that its peers need not wait for it
// until their timeout; ReportFailure tells the launcher which rank failed
// when.
// HostID tells apart hosts, containers and network namespaces that share
// a host name.
//
// Example, at the start of a rank:
//
//	info, err := bootstrap.FromEnv()
//	if err != nil {
//		log.Fatal(err)
//	}
//	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
//	defer cancel()
//	store, closeStore, err := bootstrap.Open(ctx, &info)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer closeStore()
//	store.Set(ctx, fmt.Sprintf("addr/%d", info.Rank), []byte(myAddr))
//	peer, err := store.Get(ctx, fmt.Sprintf("addr/%d", (info.Rank+1)%info.Size))
//	// info.Secret now authenticates the transports' connections.
package bootstrap
