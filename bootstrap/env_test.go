package bootstrap

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func tmpStore(job string) string { return "file:" + filepath.Join(privateTempDir(), job) }

// ompiEnv is what Open MPI 4.1.4's mpirun set for rank r of 2 (abridged).
func ompiEnv(r int) map[string]string {
	return map[string]string{
		"OMPI_COMM_WORLD_RANK":       fmt.Sprint(r),
		"OMPI_COMM_WORLD_SIZE":       "2",
		"OMPI_COMM_WORLD_LOCAL_RANK": fmt.Sprint(r),
		"OMPI_COMM_WORLD_LOCAL_SIZE": "2",
		"OMPI_COMM_WORLD_NODE_RANK":  fmt.Sprint(r),
		"OMPI_MCA_ess_base_jobid":    "2027749377",
		"PMIX_NAMESPACE":             "2027749377",
		"PMIX_RANK":                  fmt.Sprint(r),
	}
}

func TestFromLookup(t *testing.T) {
	secretHex := strings.Repeat("ab", 16)
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	slurm := map[string]string{
		"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
		"SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0",
	}
	torch := map[string]string{
		"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none",
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Info
	}{
		{"nothing", nil, Info{Size: 1, LocalSize: 1, Launcher: "single"}},
		{"braid run", map[string]string{
			"BRAID_RANK": "2", "BRAID_WORLD_SIZE": "4", "BRAID_LOCAL_RANK": "2", "BRAID_LOCAL_SIZE": "4",
			"BRAID_STORE": "127.0.0.1:5000", "BRAID_SECRET": secretHex, "BRAID_JOB": "run-1", "BRAID_STORE_EXTERNAL": "1",
		}, Info{Rank: 2, Size: 4, LocalRank: 2, LocalSize: 4, Store: "127.0.0.1:5000",
			Secret: []byte(strings.Repeat("\xab", 16)), JobID: "run-1", Launcher: "braid"}},
		{"braid by hand: rank 0 serves", map[string]string{
			"BRAID_RANK": "0", "BRAID_WORLD_SIZE": "2", "BRAID_STORE": "h0:5000", "BRAID_SECRET": secretHex,
		}, Info{Size: 2, Store: "h0:5000", ServeStore: true, RankZeroServes: true, Secret: []byte(strings.Repeat("\xab", 16)), Launcher: "braid"}},
		{"braid file store", map[string]string{
			"BRAID_RANK": "1", "BRAID_WORLD_SIZE": "2", "BRAID_STORE": "file:/shared/s", "BRAID_JOB": "j 1",
		}, Info{Rank: 1, Size: 2, Store: "file:/shared/s/j_1", JobID: "j_1", Launcher: "braid"}},
		{"open mpi", ompiEnv(1), Info{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2,
			Store: tmpStore("ompi-2027749377"), JobID: "ompi-2027749377", Launcher: "openmpi"}},
		{"open mpi 5", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "PMIX_NAMESPACE": "prterun-vm-77@1"},
			Info{Size: 1, JobID: "ompi-prterun-vm-77_1", Launcher: "openmpi"}},
		{"open mpi, TCP store", with(ompiEnv(0), "BRAID_STORE", "node0:7000"), Info{Size: 2, LocalSize: 2,
			Store: "node0:7000", ServeStore: true, RankZeroServes: true, JobID: "ompi-2027749377", Launcher: "openmpi"}},
		{"pmi with job id", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "3", "PMI_JOBID": "77.0", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "3"},
			Info{Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, Store: tmpStore("pmi-77.0"), JobID: "pmi-77.0", Launcher: "pmi"}},
		{"srun --mpi=pmi2", with(slurm, "PMI_RANK", "3", "PMI_SIZE", "4", "PMI_JOBID", "4242.0", "BRAID_STORE", "file:/gpfs/braid"),
			Info{Rank: 3, Size: 4, LocalRank: 1, LocalSize: 2, Store: "file:/gpfs/braid/pmi-4242.0", JobID: "pmi-4242.0", Launcher: "pmi"}},
		{"slurm", with(slurm, "BRAID_STORE", "file:/gpfs/braid"), Info{Rank: 3, Size: 4, LocalRank: 1, LocalSize: 2,
			Store: "file:/gpfs/braid/slurm-4242.0", JobID: "slurm-4242.0", Launcher: "slurm"}},
		{"slurm batch script is no launcher", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "1"},
			Info{Size: 1, LocalSize: 1, Launcher: "single"}},
		{"torchrun", torch, Info{Size: 2, LocalSize: 2, Store: "127.0.0.1:29501", ServeStore: true, RankZeroServes: true,
			JobID: "torchrun-none-127.0.0.1-29500", Launcher: "torchrun"}},
		{"torchrun, other rank, store set", with(torch, "RANK", "1", "LOCAL_RANK", "1", "BRAID_STORE", "127.0.0.1:6000"),
			Info{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Store: "127.0.0.1:6000", RankZeroServes: true, JobID: "torchrun-none-127.0.0.1-29500", Launcher: "torchrun"}},
		{"torchrun across hosts", with(torch, "LOCAL_WORLD_SIZE", "1", "BRAID_SECRET", secretHex, "MASTER_ADDR", "::1"),
			Info{Size: 2, LocalSize: 1, Store: "[::1]:29501", ServeStore: true, RankZeroServes: true, Secret: []byte(strings.Repeat("\xab", 16)),
				JobID: "torchrun-none-__1-29500", Launcher: "torchrun"}},
		// torchrun's documented variables without LOCAL_WORLD_SIZE: a
		// loopback MASTER_ADDR, or GROUP_WORLD_SIZE=1, puts every rank here.
		{"torchrun without LOCAL_WORLD_SIZE", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
			Info{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Store: "127.0.0.1:29501", RankZeroServes: true, JobID: "torchrun-127.0.0.1-29500", Launcher: "torchrun"}},
		{"torchrun with RANK and WORLD_SIZE only", map[string]string{"RANK": "1", "WORLD_SIZE": "3",
			"MASTER_ADDR": "localhost", "MASTER_PORT": "29500"},
			Info{Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, Store: "localhost:29501", RankZeroServes: true, JobID: "torchrun-localhost-29500", Launcher: "torchrun"}},
		{"torchrun, one group", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_RANK": "0",
			"GROUP_WORLD_SIZE": "1", "MASTER_ADDR": "node7", "MASTER_PORT": "29500"},
			Info{Size: 2, LocalSize: 2, Store: "node7:29501", ServeStore: true, RankZeroServes: true, JobID: "torchrun-node7-29500", Launcher: "torchrun"}},
		{"braid wins over others", with(ompiEnv(0), "BRAID_RANK", "0", "BRAID_WORLD_SIZE", "1"),
			Info{Size: 1, Store: "", JobID: "", Launcher: "braid"}},
	} {
		got, err := FromLookup(lookup(tc.env))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestFromLookupErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BRAID_RANK": "x", "BRAID_WORLD_SIZE": "2"}, `BRAID_RANK="x" is not a non-negative integer`},
		{map[string]string{"BRAID_RANK": "-1", "BRAID_WORLD_SIZE": "2"}, `BRAID_RANK="-1"`},
		{map[string]string{"BRAID_RANK": "0"}, "BRAID_WORLD_SIZE is not set"},
		{map[string]string{"BRAID_RANK": "4", "BRAID_WORLD_SIZE": "4", "BRAID_STORE": "h:1"}, "BRAID_RANK=4 is not less than BRAID_WORLD_SIZE=4"},
		{map[string]string{"BRAID_RANK": "0", "BRAID_WORLD_SIZE": "0"}, "BRAID_WORLD_SIZE=0"},
		{map[string]string{"BRAID_RANK": "0", "BRAID_WORLD_SIZE": "2"}, "BRAID_STORE is not set"},
		{map[string]string{"BRAID_RANK": "0", "BRAID_WORLD_SIZE": "2", "BRAID_STORE": "nohost"}, `BRAID_STORE="nohost": want HOST:PORT or file:DIR`},
		{map[string]string{"BRAID_RANK": "0", "BRAID_WORLD_SIZE": "2", "BRAID_STORE": "h:99999"}, `BRAID_STORE="h:99999"`},
		{map[string]string{"BRAID_RANK": "0", "BRAID_WORLD_SIZE": "1", "BRAID_SECRET": "xyz"}, "BRAID_SECRET is not hex"},
		{map[string]string{"BRAID_RANK": "0", "BRAID_WORLD_SIZE": "1", "BRAID_SECRET": "abcd"}, "BRAID_SECRET has 2 bytes"},
		{map[string]string{"BRAID_RANK": "1", "BRAID_WORLD_SIZE": "2", "BRAID_LOCAL_RANK": "2", "BRAID_LOCAL_SIZE": "2", "BRAID_STORE": "h:1"},
			"BRAID_LOCAL_RANK=2 is not less than BRAID_LOCAL_SIZE=2"},
		{map[string]string{"BRAID_RANK": "1", "BRAID_WORLD_SIZE": "2", "BRAID_STORE": "h:1"}, "set BRAID_SECRET"},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "one"}, `OMPI_COMM_WORLD_SIZE="one"`},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
			"ranks span hosts (4 ranks, 2 on this host) and BRAID_STORE is not set"},
		{map[string]string{"PMI_RANK": "2", "PMI_SIZE": "2"}, "PMI_RANK=2 is not less than PMI_SIZE=2"},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x"},
			`SLURM_STEP_TASKS_PER_NODE="2(x": malformed task count`},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"},
			"BRAID_STORE is not set"},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, `MASTER_PORT=""`},
		{map[string]string{"BRAID_RANK": "0", "BRAID_WORLD_SIZE": "2", "BRAID_STORE": "redis://:pw@h:6379"},
			"the Redis store redis://:xxxxx@h:6379 needs the job's secret"},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "65535"}, `MASTER_PORT="65535" is not a port below 65535`},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			"TCP store h:2: set BRAID_SECRET"},
		{map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			"rank 1: the torchrun job's ranks span hosts (2 ranks, the launcher does not say how many on this host)"},
		{map[string]string{"RANK": "1", "WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
			"rank 1: the torchrun job's ranks span hosts"},
		{map[string]string{"RANK": "1", "WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "x", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			`GROUP_WORLD_SIZE="x"`},
	} {
		_, err := FromLookup(lookup(tc.env))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v; want an error containing %q", tc.env, err, tc.want)
		}
	}
}

// TestFromLookupErrorRank: an error after the rank was read returns the
// rank, so that Init names it.
func TestFromLookupErrorRank(t *testing.T) {
	info, err := FromLookup(lookup(map[string]string{"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"}))
	if err == nil || info.Rank != 3 || info.Size != 4 {
		t.Fatalf("FromLookup = %+v, %v; want rank 3 of 4 and an error", info, err)
	}
}

func TestPMIJobIDWithoutHydra(t *testing.T) {
	info, err := FromLookup(lookup(map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("pmi-ppid-%d", os.Getppid()); info.JobID != want {
		t.Fatalf("JobID = %q; want %q", info.JobID, want)
	}
}

func TestParseTasksPerNode(t *testing.T) {
	for s, want := range map[string][]int{"1": {1}, "2(x3),1": {2, 2, 2, 1}, "4,4(x1)": {4, 4}} {
		got, err := parseTasksPerNode(s)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseTasksPerNode(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "x", "2(x0)", "2(x", "1,,1", "1(x99999999)"} {
		if _, err := parseTasksPerNode(s); err == nil {
			t.Errorf("parseTasksPerNode(%q) succeeded", s)
		}
	}
}

func TestProcStat(t *testing.T) {
	ppid, start, ok := procStat(os.Getpid())
	if !ok {
		t.Skip("no /proc")
	}
	if ppid != os.Getppid() || start == 0 {
		t.Fatalf("procStat = %d, %d; want ppid %d", ppid, start, os.Getppid())
	}
	if !procAlive(os.Getpid(), start) || procAlive(os.Getpid(), start+1) {
		t.Fatal("procAlive disagrees with procStat")
	}
}
