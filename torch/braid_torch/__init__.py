"""Braid's backend for torch.distributed.

Importing braid_torch registers the process-group backend "braid", whose
collectives run on Braid (through its C API, libbraid.so, which the
extension links). Then, under braid run, torchrun or any launcher that
sets torch.distributed's env:// variables:

    import braid_torch  # registers "braid"
    import torch.distributed as dist
    dist.init_process_group("braid")

Tensors are CPU tensors; the group's timeout is Braid's (a call that makes
no progress within it fails on every rank) unless BRAID_TIMEOUT is set.
"""

import torch  # loads libtorch before the extension
import torch.distributed as dist

from . import _C

if not hasattr(dist.Backend, "BRAID"):
    dist.Backend.register_backend("braid", _C.create)

create = _C.create
