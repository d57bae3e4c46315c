package bootstrap

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Launcher names that Info.Launcher takes.
const (
	LauncherBraid    = "braid"    // braid run, or BRAID_RANK set by hand
	LauncherOpenMPI  = "openmpi"  // Open MPI's mpirun (ORTE or PRRTE)
	LauncherPMI      = "pmi"      // a PMI launcher: MPICH's hydra (mpiexec), Intel MPI
	LauncherSlurm    = "slurm"    // srun
	LauncherTorchrun = "torchrun" // torchrun (torch.distributed.run)
	LauncherSingle   = "single"   // no launcher: one rank
)

// Environment variables that Braid reads, and that braid run sets.
const (
	EnvRank      = "BRAID_RANK"       // this process's rank in the job
	EnvSize      = "BRAID_WORLD_SIZE" // the number of ranks
	EnvLocalRank = "BRAID_LOCAL_RANK" // this process's rank among those on its host
	EnvLocalSize = "BRAID_LOCAL_SIZE" // the number of ranks on this host
	EnvStore     = "BRAID_STORE"      // the store: HOST:PORT or file:DIR
	EnvSecret    = "BRAID_SECRET"     // the job's secret, in hex
	EnvJob       = "BRAID_JOB"        // the job's id
	// EnvStoreExternal, set to 1, says that someone other than rank 0
	// serves the TCP store at BRAID_STORE (braid run sets it: it serves the
	// store itself). Without it, rank 0 serves a TCP BRAID_STORE.
	EnvStoreExternal = "BRAID_STORE_EXTERNAL"
)

// MinSecretLen is the shortest secret, in bytes, that BRAID_SECRET may hold.
const MinSecretLen = 16

// Info is what a rank learns from its launcher: its place in the job and
// where the job's store is. FromEnv fills it; tests and programs that start
// ranks themselves may fill it by hand.
type Info struct {
	Rank int // this process's rank, 0 ≤ Rank < Size
	Size int // the number of ranks in the job

	// LocalRank and LocalSize place the process among the ranks on its
	// host (LocalRank picks the GPU, as with NCCL). LocalSize is 0 when
	// the launcher does not say; LocalRank is then 0 too.
	LocalRank int
	LocalSize int

	// Store names the job's key-value store: "HOST:PORT" for a TCP store,
	// "file:DIR" for a file store in directory DIR, or "" for none (a
	// single rank; Open then makes an in-memory store).
	Store string

	// ServeStore says that this rank serves the TCP store named by Store,
	// listening on its port (rank 0, unless braid run serves it).
	ServeStore bool

	// RankZeroServes says, on every rank, that rank 0 serves the TCP store
	// named by Store (rather than braid run or a server of its own,
	// BRAID_STORE_EXTERNAL=1): a rank that loses the store can then name
	// rank 0.
	RankZeroServes bool

	// Secret is the job's secret, which every bootstrap and transport
	// connection must prove it knows. Empty means that Open derives it:
	// rank 0 writes a fresh one to a private file that the other ranks read.
	Secret []byte

	// JobID identifies the job among those that run at the same time,
	// as the launcher names it (e.g. "slurm-4242.0"); it names the job's
	// directory of a file store. It may be empty.
	JobID string

	// Launcher names what started the process: one of the Launcher constants.
	Launcher string
}

// SingleHost reports whether the launcher says that every rank runs on
// this host.
func (i Info) SingleHost() bool { return i.Size == 1 || (i.LocalSize > 0 && i.LocalSize == i.Size) }

// String describes the Info without its secret.
func (i Info) String() string {
	return fmt.Sprintf("rank %d of %d (local %d of %d), launcher %s, job %q, store %q",
		i.Rank, i.Size, i.LocalRank, i.LocalSize, i.Launcher, i.JobID, i.Store)
}

// FromEnv reads the process's place in the job from its environment. It
// recognises, in this order:
//
//   - Braid (braid run, or set by hand): BRAID_RANK, BRAID_WORLD_SIZE,
//     BRAID_LOCAL_RANK, BRAID_LOCAL_SIZE, BRAID_STORE, BRAID_SECRET, BRAID_JOB.
//   - Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE; the job id is
//     OMPI_MCA_ess_base_jobid (4.x), OMPI_MCA_orte_ess_jobid (older) or
//     PMIX_NAMESPACE (5.x).
//   - PMI (MPICH's hydra, Intel MPI): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
//     MPI_LOCALNRANKS; the job id is PMI_JOBID or PMI_KVSNAME where set,
//     else the hydra proxy's control port (see hydraJobID).
//   - Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the local
//     size from SLURM_STEP_TASKS_PER_NODE and SLURM_NODEID; the job id is
//     SLURM_JOB_ID.SLURM_STEP_ID. A batch script outside srun (no
//     SLURM_STEP_ID) is not a launcher: its program is a single rank.
//   - torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//     MASTER_PORT, TORCHELASTIC_RUN_ID. Without LOCAL_WORLD_SIZE (torchrun
//     sets it, a hand-written torchrun-like environment may not), the job
//     is on this host when GROUP_WORLD_SIZE is 1 or, GROUP_WORLD_SIZE
//     unset, when MASTER_ADDR is a loopback address, which no other host
//     could reach.
//   - Nothing of these: a single rank (Size 1).
//
// BRAID_STORE, BRAID_SECRET and BRAID_JOB override what any launcher
// implies. Without BRAID_STORE:
//
//   - Under Open MPI, PMI and Slurm the store is a file store in
//     $TMPDIR/braid-UID/JOB, which only ranks on one host share. A job that
//     spans hosts must set BRAID_STORE: file:DIR with DIR on a file system
//     that every host mounts (the store then lives in DIR/JOB), or
//     HOST:PORT with HOST rank 0's host (rank 0 serves it; set BRAID_SECRET
//     too). FromEnv returns an error when the launcher says the job spans
//     hosts and BRAID_STORE is not set, rather than letting it hang.
//   - Under torchrun the store is a TCP store that rank 0 serves at
//     MASTER_ADDR:MASTER_PORT+1, since torchrun's own store already
//     listens on MASTER_PORT. Across hosts, set BRAID_SECRET.
//
// Errors name the variable and its value, and the rank when it is known.
// With an error, the Info returned holds the rank and size if they could
// be read (Size is 0 otherwise), so that the caller can name the rank.
func FromEnv() (Info, error) { return FromLookup(os.LookupEnv) }

// FromLookup is FromEnv with the environment read through lookup.
func FromLookup(lookup func(string) (string, bool)) (Info, error) {
	e := env{lookup}
	var (
		info Info
		err  error
	)
	switch {
	case e.has(EnvRank) || e.has(EnvSize):
		info, err = e.braid()
	case e.has("OMPI_COMM_WORLD_RANK"):
		info, err = e.openMPI()
	case e.has("PMI_RANK"):
		info, err = e.pmi()
	case e.has("SLURM_PROCID") && (e.has("SLURM_STEP_ID") || e.has("SLURM_STEPID")):
		info, err = e.slurm()
	case e.has("RANK") && e.has("WORLD_SIZE"):
		info, err = e.torchrun()
	default:
		info = Info{Size: 1, LocalSize: 1, Launcher: LauncherSingle}
	}
	if err != nil {
		return Info{}, err
	}
	if err := info.check(); err != nil {
		return Info{}, err
	}
	if err := e.overrides(&info); err != nil {
		return Info{Rank: info.Rank, Size: info.Size, LocalRank: info.LocalRank, LocalSize: info.LocalSize, Launcher: info.Launcher}, err
	}
	return info, nil
}

// env reads variables and turns malformed ones into errors that name them.
type env struct{ lookup func(string) (string, bool) }

func (e env) get(name string) string { v, _ := e.lookup(name); return v }

func (e env) has(name string) bool { v, ok := e.lookup(name); return ok && v != "" }

// first returns the value of the first of names that is set.
func (e env) first(names ...string) string {
	for _, n := range names {
		if v := e.get(n); v != "" {
			return v
		}
	}
	return ""
}

// int parses a required non-negative integer variable.
func (e env) int(name string) (int, error) {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return 0, fmt.Errorf("bootstrap: %s is not set", name)
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bootstrap: %s=%q is not a non-negative integer", name, v)
	}
	return n, nil
}

// optInt parses an optional non-negative integer variable; def if unset.
func (e env) optInt(name string, def int) (int, error) {
	if name == "" || !e.has(name) { // "": the launcher has no such variable
		return def, nil
	}
	return e.int(name)
}

// place reads rank, size, local rank and local size from four variables;
// the local ones are optional.
func (e env) place(launcher, rank, size, localRank, localSize string) (Info, error) {
	info := Info{Launcher: launcher}
	var err error
	if info.Rank, err = e.int(rank); err != nil {
		return info, err
	}
	if info.Size, err = e.int(size); err != nil {
		return info, err
	}
	if info.Size == 0 {
		return info, fmt.Errorf("bootstrap: %s=0: a job has at least one rank", size)
	}
	if info.Rank >= info.Size {
		return info, fmt.Errorf("bootstrap: %s=%d is not less than %s=%d", rank, info.Rank, size, info.Size)
	}
	if info.LocalSize, err = e.optInt(localSize, 0); err != nil {
		return info, err
	}
	if info.LocalRank, err = e.optInt(localRank, 0); err != nil {
		return info, err
	}
	if info.LocalSize > info.Size {
		return info, fmt.Errorf("bootstrap: %s=%d is more than %s=%d", localSize, info.LocalSize, size, info.Size)
	}
	if info.LocalSize > 0 && info.LocalRank >= info.LocalSize {
		return info, fmt.Errorf("bootstrap: %s=%d is not less than %s=%d", localRank, info.LocalRank, localSize, info.LocalSize)
	}
	if info.LocalSize == 0 && e.has(localRank) && info.LocalRank >= info.Size {
		return info, fmt.Errorf("bootstrap: %s=%d is not less than %s=%d", localRank, info.LocalRank, size, info.Size)
	}
	return info, nil
}

func (e env) braid() (Info, error) {
	info, err := e.place(LauncherBraid, EnvRank, EnvSize, EnvLocalRank, EnvLocalSize)
	if err != nil {
		return info, err
	}
	if info.Size > 1 && !e.has(EnvStore) {
		return info, fmt.Errorf("bootstrap: %s=%d but %s is not set", EnvSize, info.Size, EnvStore)
	}
	return info, nil
}

// Open MPI 4.1.4's mpirun sets, besides the four OMPI_COMM_WORLD_*
// variables: OMPI_COMM_WORLD_NODE_RANK, OMPI_UNIVERSE_SIZE,
// OMPI_MCA_ess_base_jobid=2027749377 and OMPI_MCA_ess_base_vpid,
// OMPI_MCA_orte_hnp_uri, OMPI_MCA_orte_jobfam_session_dir
// (/tmp/ompi.HOST.UID/pid.MPIRUNPID), and PMIX_NAMESPACE=2027749377,
// PMIX_RANK, PMIX_ID=2027749377.0, PMIX_SERVER_URI*, PMIX_VERSION=4.2.2rc2
// (observed with `mpirun --allow-run-as-root -n 2 env`, Debian 12).
// The job id is the same on every host of one mpirun.
func (e env) openMPI() (Info, error) {
	info, err := e.place(LauncherOpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
		"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
	if err != nil {
		return info, err
	}
	if id := e.first("OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE"); id != "" {
		info.JobID = "ompi-" + id
	} else {
		info.JobID = fmt.Sprintf("ompi-ppid-%d", os.Getppid())
	}
	return info, nil
}

// MPICH 4.0.2's hydra (mpiexec.hydra, mpirun.mpich) sets only PMI_RANK,
// PMI_SIZE, PMI_FD (a socket to the hydra_pmi_proxy), MPI_LOCALRANKID,
// MPI_LOCALNRANKS, HYDI_CONTROL_FD, MPIR_CVAR_CH3_INTERFACE_HOSTNAME and
// GFORTRAN_UNBUFFERED_PRECONNECTED (observed with `mpirun.mpich -n 2 env`,
// Debian 12): no job id, no PMI_KVSNAME. The ranks' parent (or an
// ancestor, when the program runs under a shell) is hydra_pmi_proxy, one
// per host and run, whose command line carries mpiexec's
// --control-port HOST:PORT and --pgid: hydraJobID uses those. Slurm's PMI2
// plugin sets PMI_JOBID, which is preferred where present.
func (e env) pmi() (Info, error) {
	info, err := e.place(LauncherPMI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
	if err != nil {
		return info, err
	}
	if info.LocalSize == 0 && e.has("SLURM_STEP_ID") {
		// srun --mpi=pmi2 sets PMI_RANK and PMI_JOBID but not the local
		// variables; take Slurm's.
		if sl, err := e.slurm(); err == nil && sl.Size == info.Size {
			info.LocalRank, info.LocalSize = sl.LocalRank, sl.LocalSize
		}
	}
	switch {
	case e.has("PMI_JOBID"):
		info.JobID = "pmi-" + e.get("PMI_JOBID")
	case e.has("PMI_KVSNAME"):
		info.JobID = "pmi-" + e.get("PMI_KVSNAME")
	default:
		info.JobID = hydraJobID()
	}
	return info, nil
}

func (e env) slurm() (Info, error) {
	size := "SLURM_NTASKS"
	if !e.has(size) {
		size = "SLURM_STEP_NUM_TASKS"
	}
	info, err := e.place(LauncherSlurm, "SLURM_PROCID", size, "SLURM_LOCALID", "")
	if err != nil {
		return info, err
	}
	step := e.first("SLURM_STEP_ID", "SLURM_STEPID")
	info.JobID = "slurm-" + e.first("SLURM_JOB_ID", "SLURM_JOBID") + "." + step
	// The local size: SLURM_STEP_TASKS_PER_NODE lists the tasks of each
	// node of the step ("2(x3),1"), SLURM_NODEID is this node's index.
	name := "SLURM_STEP_TASKS_PER_NODE"
	if !e.has(name) {
		name = "SLURM_TASKS_PER_NODE"
	}
	if e.has(name) && e.has("SLURM_NODEID") {
		counts, err := parseTasksPerNode(e.get(name))
		if err != nil {
			return info, fmt.Errorf("bootstrap: %s=%q: %v", name, e.get(name), err)
		}
		node, err := e.int("SLURM_NODEID")
		if err != nil {
			return info, err
		}
		if node >= len(counts) {
			return info, fmt.Errorf("bootstrap: SLURM_NODEID=%d is beyond %s=%q", node, name, e.get(name))
		}
		info.LocalSize = counts[node]
		if info.LocalRank >= info.LocalSize || info.LocalSize > info.Size {
			return info, fmt.Errorf("bootstrap: SLURM_LOCALID=%d does not fit %s=%q (node %d) with %s=%d",
				info.LocalRank, name, e.get(name), node, size, info.Size)
		}
	}
	return info, nil
}

// parseTasksPerNode expands Slurm's compressed task counts: "2(x3),1" is
// [2 2 2 1].
func parseTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		count, rep := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			count, rep = part[:i], part[i+2:len(part)-1]
		}
		n, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || n < 1 || r < 1 || len(out)+r > 1<<20 {
			return nil, fmt.Errorf("malformed task count %q", part)
		}
		for ; r > 0; r-- {
			out = append(out, n)
		}
	}
	return out, nil
}

func (e env) torchrun() (Info, error) {
	info, err := e.place(LauncherTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
	if err != nil {
		return info, err
	}
	addr, port := e.get("MASTER_ADDR"), e.get("MASTER_PORT")
	if info.LocalSize == 0 {
		// torchrun sets GROUP_WORLD_SIZE, the number of hosts (its
		// "nodes"), beside LOCAL_WORLD_SIZE; a loopback MASTER_ADDR is
		// reachable from this host only.
		groups, err := e.optInt("GROUP_WORLD_SIZE", 0)
		if err != nil {
			return info, err
		}
		if groups == 1 || groups == 0 && isLoopback(addr) {
			info.LocalSize = info.Size
			if !e.has("LOCAL_RANK") {
				info.LocalRank = info.Rank
			}
		}
	}
	info.JobID = "torchrun-"
	if id := e.get("TORCHELASTIC_RUN_ID"); id != "" {
		info.JobID += id + "-"
	}
	info.JobID += addr + "-" + port
	if e.has(EnvStore) || info.Size == 1 {
		return info, nil
	}
	if addr == "" || port == "" {
		return info, fmt.Errorf("bootstrap: torchrun: WORLD_SIZE=%d but MASTER_ADDR=%q, MASTER_PORT=%q", info.Size, addr, port)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65534 {
		return info, fmt.Errorf("bootstrap: MASTER_PORT=%q is not a port below 65535", port)
	}
	info.Store = net.JoinHostPort(addr, strconv.Itoa(p+1))
	info.RankZeroServes = true
	info.ServeStore = info.Rank == 0
	return info, nil
}

// overrides applies BRAID_STORE, BRAID_SECRET and BRAID_JOB, and derives
// the default store.
func (e env) overrides(info *Info) error {
	if e.has(EnvSecret) {
		v := strings.TrimSpace(e.get(EnvSecret))
		s, err := hex.DecodeString(v)
		if err != nil {
			return fmt.Errorf("bootstrap: %s is not hex: %v", EnvSecret, err)
		}
		if len(s) < MinSecretLen {
			return fmt.Errorf("bootstrap: %s has %d bytes; it needs at least %d (%d hex digits)", EnvSecret, len(s), MinSecretLen, 2*MinSecretLen)
		}
		info.Secret = s
	}
	if e.has(EnvJob) {
		info.JobID = e.get(EnvJob)
	}
	info.JobID = sanitizeJobID(info.JobID)
	if e.has(EnvStore) {
		info.Store = e.get(EnvStore)
		info.ServeStore, info.RankZeroServes = false, false
		if isRedisStore(info.Store) {
			if len(info.Secret) == 0 {
				return fmt.Errorf("bootstrap: rank %d: the Redis store %s needs the job's secret: set %s to the same hex value on every rank",
					info.Rank, redactRedis(info.Store), EnvSecret)
			}
		} else if !isFileStore(info.Store) {
			host, port, err := net.SplitHostPort(info.Store)
			if p, perr := strconv.Atoi(port); err != nil || perr != nil || p < 1 || p > 65535 || host == "" {
				return fmt.Errorf("bootstrap: %s=%q: want HOST:PORT or file:DIR", EnvStore, info.Store)
			}
			info.RankZeroServes = e.get(EnvStoreExternal) != "1"
			info.ServeStore = info.Rank == 0 && info.RankZeroServes
		}
	} else if info.Store == "" && info.Size > 1 {
		// Open MPI, PMI or Slurm: a file store on this host.
		if !info.SingleHost() {
			return fmt.Errorf("bootstrap: rank %d: the %s job's ranks span hosts (%d ranks, %s) and %s is not set; "+
				"set %s=file:DIR with DIR on a shared file system, or %s=HOST:PORT of rank 0's host and %s",
				info.Rank, info.Launcher, info.Size, info.localDesc(), EnvStore, EnvStore, EnvStore, EnvSecret)
		}
		info.Store = "file:" + filepath.Join(privateTempDir(), info.JobID)
		return nil
	}
	if isFileStore(info.Store) && info.JobID != "" {
		info.Store = "file:" + filepath.Join(strings.TrimPrefix(info.Store, "file:"), info.JobID)
	}
	if info.Store != "" && !isFileStore(info.Store) && len(info.Secret) == 0 && !info.SingleHost() {
		return fmt.Errorf("bootstrap: rank %d: the %s job's ranks span hosts (%d ranks, %s) and use the TCP store %s: "+
			"set %s to the same hex value on every rank (e.g. from `openssl rand -hex 32`)",
			info.Rank, info.Launcher, info.Size, info.localDesc(), info.Store, EnvSecret)
	}
	return nil
}

// check validates an Info, whether it came from FromEnv or by hand.
func (i Info) check() error {
	switch {
	case i.Size < 1:
		return fmt.Errorf("bootstrap: size %d: a job has at least one rank", i.Size)
	case i.Rank < 0 || i.Rank >= i.Size:
		return fmt.Errorf("bootstrap: rank %d is not in [0, %d)", i.Rank, i.Size)
	case i.LocalSize < 0 || i.LocalSize > i.Size:
		return fmt.Errorf("bootstrap: local size %d is not in [0, %d]", i.LocalSize, i.Size)
	case i.LocalRank < 0 || (i.LocalSize > 0 && i.LocalRank >= i.LocalSize):
		return fmt.Errorf("bootstrap: local rank %d is not in [0, %d)", i.LocalRank, i.LocalSize)
	}
	return nil
}

// localDesc says how many ranks the launcher puts on this host.
func (i Info) localDesc() string {
	if i.LocalSize == 0 {
		return "the launcher does not say how many on this host"
	}
	return fmt.Sprintf("%d on this host", i.LocalSize)
}

func isFileStore(s string) bool { return strings.HasPrefix(s, "file:") }

// isLoopback reports whether host is "localhost" or a loopback address.
func isLoopback(host string) bool {
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
}

// sanitizeJobID makes a job id fit for a file name.
func sanitizeJobID(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 0 && b[0] == '.' {
		b[0] = '_'
	}
	if len(b) > 100 {
		b = b[:100]
	}
	return string(b)
}

// privateTempDir is the directory, private to this user, under which the
// file stores of single-host jobs live.
func privateTempDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("braid-%d", os.Getuid()))
}
