"""torch.distributed all_reduce on CUDA tensors: the "braid" backend against
"nccl", in one job (one process per GPU: NCCL refuses two on one GPU), size
by size, the two alternating within each size so that both see the same
machine.

    python3 -m torch.distributed.run --standalone --nproc_per_node NGPUS \\
        torch/bench/cuda_allreduce.py [--min 8] [--max 64M] [--rounds 6]

For every size (float32, sum, in place, bytes doubling from --min to
--max) each backend runs rounds of C calls on the default stream, each
round after a barrier, two ways:
  - per call ("lat"): the host waits for every call (torch.cuda.synchronize
    after each), which is what a caller that needs the result waits;
  - back to back ("b2b"): C calls queued, one synchronisation at the end
    (throughput: the GPU's time per call once the host issues ahead).
A round's figure is its time over C, the slowest rank's (a max over ranks
through a Gloo group); the table has the median over rounds, for each
backend, and braid's time over NCCL's (below 1: braid is faster). Every
rank's tensor starts at 1, so after C calls it holds n**C: each round
checks it (a power of 2 for 2, 4 and 8 GPUs, exact in float32) and a
wrong value stops the run. busbw = 2(n-1)/n x bytes / time (nccl-tests).
NCCL runs with its defaults (whatever NCCL_* variables the caller set).
"""

import argparse
import math
import os
import statistics
import time

import braid_torch  # noqa: F401  registers "braid"
import torch
import torch.distributed as dist


def size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def human(b):
    for unit, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= f and b % f == 0:
            return f"{b // f}{unit}"
    return str(b)


def one_round(group, cpu, x, calls, per_call, n):
    x.fill_(1.0)
    torch.cuda.synchronize()
    dist.barrier(group=cpu)
    t0 = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(x, group=group)
        if per_call:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    t = torch.tensor([(time.perf_counter() - t0) / calls], dtype=torch.float64)
    want = float(n) ** calls
    got = x[0].item(), x[-1].item()
    if any(abs(g - want) > 1e-6 * want for g in got):
        raise SystemExit(f"rank {dist.get_rank()}: wrong result after {calls} all_reduces of {x.numel()} floats: "
                         f"{got}, want {want}")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=cpu)
    return t.item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min", default="8")
    p.add_argument("--max", default="64M")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--budget", type=float, default=0.05, help="seconds per round, about")
    a = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl")
    r, n = dist.get_rank(), dist.get_world_size()
    groups = {"nccl": dist.group.WORLD, "braid": dist.new_group(backend="braid")}
    cpu = dist.new_group(backend="gloo")
    # n**calls must stay finite in float32 (below 2**127).
    max_calls = max(1, int(120 / math.log2(n))) if n > 1 else 1000
    if r == 0:
        print(f"# torch {torch.__version__}, all_reduce float32 sum in place on CUDA tensors, {n} ranks on "
              f"{torch.cuda.get_device_name(dev)}; time in us: median over {a.rounds} rounds of the per-call "
              f"mean (max over ranks); lat = synchronised after every call, b2b = back to back")
        print(f"{'bytes':>6} {'nccl lat':>9} {'braid lat':>9} {'ratio':>6} {'nccl b2b':>9} {'braid b2b':>9} "
              f"{'ratio':>6} {'nccl busbw':>10} {'braid busbw':>11}", flush=True)
    b = size(a.min)
    while b <= size(a.max):
        x = torch.ones(max(1, b // 4), device=dev)
        for g in groups.values():  # warm up: connections, kernels, plans
            for _ in range(3):
                dist.all_reduce(x, group=g)
        torch.cuda.synchronize()
        one = one_round(groups["nccl"], cpu, x, 3, True, n)
        calls = max(3, min(max_calls, int(a.budget / max(one, 1e-6))))
        res = {}
        for rnd in range(a.rounds):
            for name in (("nccl", "braid") if rnd % 2 == 0 else ("braid", "nccl")):
                for per_call in (True, False):
                    res.setdefault((name, per_call), []).append(one_round(groups[name], cpu, x, calls, per_call, n))
        if r == 0:
            m = {k: statistics.median(v) * 1e6 for k, v in res.items()}
            bw = lambda us: 2 * (n - 1) / n * x.numel() * 4 / us / 1e3  # noqa: E731  GB/s
            print(f"{human(x.numel() * 4):>6} {m['nccl', True]:>9.2f} {m['braid', True]:>9.2f} "
                  f"{m['braid', True] / m['nccl', True]:>6.2f} {m['nccl', False]:>9.2f} {m['braid', False]:>9.2f} "
                  f"{m['braid', False] / m['nccl', False]:>6.2f} {bw(m['nccl', False]):>8.2f}GB "
                  f"{bw(m['braid', False]):>9.2f}GB", flush=True)
        b *= 2
    dist.destroy_process_group(groups["braid"])
    dist.destroy_process_group(cpu)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
