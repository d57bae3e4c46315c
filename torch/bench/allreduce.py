"""torch.distributed all_reduce on the "braid" backend against "gloo", in
the same job: one Gloo world group and one Braid group of the same ranks,
size by size, alternating backends within each size so that both see the
same load.

    braid run -n 4 -- python3 torch/bench/allreduce.py [--min 8] [--max 64M] [--budget 0.3]
    braid run -n 2 -- python3 torch/bench/allreduce.py --against blocking

With --against blocking the two groups are both Braid's: "blocking", whose
calls all run blocking on the caller's thread (BRAID_TORCH_EAGER_MAX
beyond any size), against "braid", whose calls all start non-blocking
(BRAID_TORCH_EAGER_MAX=0) and which all_reduce then waits for: what the
non-blocking path costs.

For every size (float32 elements, bytes doubling from --min to --max), each
backend runs rounds of back-to-back blocking all_reduce calls in place, each
round starting after a barrier; the time of a call is a round's time over
its calls, as the slowest rank saw it (a max over ranks), and the figure is
the median over rounds. busbw = 2(n-1)/n × bytes / time, as nccl-tests
defines it. Rank 0 prints one line per size.
"""

import argparse
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
    for unit, f in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= f:
            return f"{b // f}{unit}"
    return str(b)


def rounds_of(group, x, calls, rounds):
    out = []
    t = torch.zeros(1, dtype=torch.float64)
    for _ in range(rounds):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(x, group=group)
        t[0] = (time.perf_counter() - t0) / calls
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        out.append(t.item())
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min", default="8")
    p.add_argument("--max", default="64M")
    p.add_argument("--budget", type=float, default=0.3, help="seconds per size and backend, about")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--against", choices=["gloo", "blocking"], default="gloo")
    a = p.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    base = a.against
    if base == "gloo":
        groups = {"gloo": dist.group.WORLD, "braid": dist.new_group(backend="braid")}
    else:
        # The extension reads BRAID_TORCH_EAGER_MAX when it makes a group.
        eager = os.environ.get("BRAID_TORCH_EAGER_MAX")
        os.environ["BRAID_TORCH_EAGER_MAX"] = str(1 << 62)
        groups = {"blocking": dist.new_group(backend="braid")}
        os.environ["BRAID_TORCH_EAGER_MAX"] = "0"
        groups["braid"] = dist.new_group(backend="braid")
        if eager is None:
            del os.environ["BRAID_TORCH_EAGER_MAX"]
        else:
            os.environ["BRAID_TORCH_EAGER_MAX"] = eager
    r, n = dist.get_rank(), dist.get_world_size()
    if r == 0:
        print(f"# all_reduce float32 sum in place, {n} ranks, {os.cpu_count()} CPUs; time: median over "
              f"{a.rounds} rounds of the per-call mean (max over ranks)")
        print(f"{'bytes':>6} {base + ' us':>10} {'braid us':>10} {base + ' busbw':>11} {'braid busbw':>12} "
              f"{'speedup':>8}")
    b = size(a.min)
    while b <= size(a.max):
        x = torch.ones(max(1, b // 4))
        res = {}
        # Calibrate the calls per round on the baseline's speed.
        one = min(rounds_of(groups[base], x, 1, 3))
        calls = max(1, min(10000, int(a.budget / a.rounds / max(one, 1e-7))))
        for name in (base, "braid", base, "braid"):
            res.setdefault(name, []).extend(rounds_of(groups[name], x, calls, (a.rounds + 1) // 2))
        if r == 0:
            g, br = statistics.median(res[base]), statistics.median(res["braid"])
            bw = lambda t: 2 * (n - 1) / n * x.numel() * 4 / t / 1e9  # noqa: E731
            print(f"{human(x.numel() * 4):>6} {g * 1e6:>10.2f} {br * 1e6:>10.2f} {bw(g):>9.3f}GB {bw(br):>10.3f}GB "
                  f"{g / br:>7.2f}x", flush=True)
        b *= 2
    for name, g in groups.items():
        if name != "gloo":
            dist.destroy_process_group(g)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
