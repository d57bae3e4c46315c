package bootstrap

import (
	"strings"
	"testing"
)

// launcherVars are the variables FromLookup reads.
var launcherVars = strings.Fields(`BRAID_JOB BRAID_LOCAL_RANK BRAID_LOCAL_SIZE BRAID_RANK BRAID_SECRET
	BRAID_STORE BRAID_STORE_EXTERNAL BRAID_WORLD_SIZE GROUP_WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
	MASTER_ADDR MASTER_PORT MPI_LOCALNRANKS MPI_LOCALRANKID OMPI_COMM_WORLD_LOCAL_RANK
	OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE
	SLURM_LOCALID SLURM_NODEID SLURM_NTASKS SLURM_PROCID SLURM_STEP_NUM_TASKS
	SLURM_STEP_TASKS_PER_NODE SLURM_TASKS_PER_NODE RANK WORLD_SIZE`)

// FuzzFromLookup reads launcher environments, given as "NAME=value"
// lines: FromLookup must never panic, must place the rank within the job
// when it accepts one, and must name a variable (the one it
// refuses, or the one missing) when it refuses.
func FuzzFromLookup(f *testing.F) {
	for _, s := range []string{
		"",
		"BRAID_RANK=1\nBRAID_WORLD_SIZE=4\nBRAID_STORE=file:/nonexistent/job\nBRAID_JOB=j",
		"BRAID_RANK=4\nBRAID_WORLD_SIZE=4",
		"BRAID_RANK=-1\nBRAID_WORLD_SIZE=2\nBRAID_LOCAL_RANK=0\nBRAID_LOCAL_SIZE=9",
		"OMPI_COMM_WORLD_RANK=1\nOMPI_COMM_WORLD_SIZE=2\nOMPI_COMM_WORLD_LOCAL_RANK=1\nOMPI_COMM_WORLD_LOCAL_SIZE=2\nPMIX_NAMESPACE=prterun-h-1@1",
		"PMI_RANK=0\nPMI_SIZE=3\nPMI_KVSNAME=kvs_1\nMPI_LOCALRANKID=0\nMPI_LOCALNRANKS=3",
		"SLURM_PROCID=5\nSLURM_NTASKS=8\nSLURM_STEP_ID=0\nSLURM_LOCALID=1\nSLURM_NODEID=1\nSLURM_STEP_TASKS_PER_NODE=4(x2)\nSLURM_JOB_ID=77",
		"SLURM_PROCID=2\nSLURM_NTASKS=5\nSLURM_STEPID=1\nSLURM_TASKS_PER_NODE=2,3\nSLURM_NODEID=1\nSLURM_LOCALID=0",
		"SLURM_PROCID=0\nSLURM_NTASKS=2\nSLURM_STEP_ID=0\nSLURM_STEP_TASKS_PER_NODE=99999999999(x99999999999)",
		"RANK=3\nWORLD_SIZE=4\nLOCAL_RANK=1\nLOCAL_WORLD_SIZE=2\nMASTER_ADDR=10.0.0.1\nMASTER_PORT=29500\nGROUP_WORLD_SIZE=2\nTORCHELASTIC_RUN_ID=r",
		"RANK=1\nWORLD_SIZE=2\nMASTER_ADDR=127.0.0.1\nMASTER_PORT=65535",
		"RANK=1\nWORLD_SIZE=2\nMASTER_ADDR=[::1]\nMASTER_PORT=0\nBRAID_SECRET=zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		env := map[string]string{}
		for _, line := range strings.Split(s, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		info, err := FromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			named := false
			for _, k := range launcherVars {
				named = named || strings.Contains(err.Error(), k)
			}
			if !named {
				t.Fatalf("FromLookup(%q): %v names none of the variables", s, err)
			}
			return
		}
		if info.Size < 1 || info.Rank < 0 || info.Rank >= info.Size || info.LocalRank < 0 ||
			(info.LocalSize > 0 && (info.LocalRank >= info.LocalSize || info.LocalSize > info.Size)) {
			t.Fatalf("FromLookup(%q) = %+v", s, info)
		}
	})
}
