"""Braid's backend for torch.distributed.

Importing braid_torch registers the process-group backend "braid", whose
collectives run on Braid (through its C API, libbraid.so, which the
extension links). Then, under braid run, torchrun, mpirun (Open MPI) or any
launcher that sets torch.distributed's env:// variables:

    import braid_torch  # registers "braid"
    import torch.distributed as dist
    dist.init_process_group("braid")

Under Open MPI's mpirun, which sets none of torch's variables, the import
sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from Open MPI's, and
MASTER_ADDR (127.0.0.1 when every rank runs on this host) and MASTER_PORT
(from the job's id) where they are not set; a job over several hosts sets
MASTER_ADDR to rank 0's host (mpirun -x MASTER_ADDR=HOST).

Tensors are CPU tensors, and CUDA tensors where the extension was built
with CUDA (PyTorch 2.x with CUDA, see setup.py; braid_torch._C.cuda says):
those go through Braid's device calls on the tensor's current CUDA stream,
as NCCL's do, except point-to-point calls and all-to-alls of uneven blocks,
which are refused. The group's timeout is Braid's (a call that makes
no progress within it fails on every rank) unless BRAID_TIMEOUT is set.
"""

import inspect
import os
import zlib

import torch  # loads libtorch before the extension
import torch.distributed as dist

from . import _C


def _from_open_mpi(env=os.environ):
    """Sets torch's env:// variables from Open MPI's where RANK is not set
    and Open MPI's are, and returns whether it did."""
    if "RANK" in env or "OMPI_COMM_WORLD_RANK" not in env:
        return False
    size = env.get("OMPI_COMM_WORLD_SIZE", "")
    local_size = env.get("OMPI_COMM_WORLD_LOCAL_SIZE", "")
    env["RANK"] = env["OMPI_COMM_WORLD_RANK"]
    env["WORLD_SIZE"] = size
    env.setdefault("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    env.setdefault("LOCAL_WORLD_SIZE", local_size)
    if "MASTER_ADDR" not in env and local_size == size:
        env["MASTER_ADDR"] = "127.0.0.1"
    if "MASTER_PORT" not in env:
        job = next((env[k] for k in ("OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE")
                    if env.get(k)), "")
        # Below Linux's ephemeral ports (32768 on), so that no connection's
        # own port takes it; two jobs on a host collide 1 time in 10000.
        env["MASTER_PORT"] = str(20000 + zlib.crc32(job.encode()) % 10000)
    return True


_from_open_mpi()

if not hasattr(dist.Backend, "BRAID"):
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        # PyTorch 2.x asks which devices' tensors the backend takes; it
        # makes a backend (a Braid communicator) per device type.
        # BRAID_TORCH_CUDA=0 leaves CUDA tensors to another backend.
        cuda = getattr(_C, "cuda", False) and os.environ.get("BRAID_TORCH_CUDA") != "0"
        devices = ["cpu", "cuda"] if cuda else ["cpu"]
        dist.Backend.register_backend("braid", _C.create, devices=devices)
    else:
        dist.Backend.register_backend("braid", _C.create)

create = _C.create
