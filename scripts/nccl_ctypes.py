#!/usr/bin/env python3
"""NCCL called directly through ctypes, one process per GPU, for scripts/compare-gpu.sh.

Launch: python3 -m torch.distributed.run --standalone --nproc_per_node=N scripts/nccl_ctypes.py --out F
torch only allocates device memory, makes the stream and synchronises; the bootstrap (NCCL's
unique id, the max of the ranks' times) goes over gloo on the CPU, outside the timed loops.
Sizes and conventions match `braid bench --device cuda`: size = largest buffer, powers of two to
1 MiB then of four; all_reduce and broadcast in place, all_gather and reduce_scatter not; busbw
as nccl-tests; time = the slowest rank's, best of --trials loops of enough calls to fill
--target-ms. Two modes: "async" enqueues the whole loop and synchronises once (NCCL's usual
figure); "sync" synchronises the stream after every call, as Braid's synchronous API does
(sizes up to --sync-max only).
"""
import os

for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[k] = v

import argparse
import ctypes
import glob
import json
import math
import site
import time

import torch
import torch.distributed as dist

NAMES = {"allreduce": "all_reduce", "bcast": "broadcast", "allgather": "all_gather", "reducescatter": "reduce_scatter"}
VP, SZ, INT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int


class UniqueID(ctypes.Structure):
    _fields_ = [("b", ctypes.c_byte * 128)]


def nccl():
    libs = []
    for sp in site.getsitepackages():
        libs += glob.glob(sp + "/nvidia/nccl/lib/libnccl.so*")
    libs.append("libnccl.so.2")
    last = None
    for name in libs:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            last = e
    else:
        raise last
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueID)]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(VP), INT, UniqueID, INT]
    lib.ncclAllReduce.argtypes = [VP, VP, SZ, INT, INT, VP, VP]
    lib.ncclBroadcast.argtypes = [VP, VP, SZ, INT, INT, VP, VP]
    lib.ncclAllGather.argtypes = [VP, VP, SZ, INT, VP, VP]
    lib.ncclReduceScatter.argtypes = [VP, VP, SZ, INT, INT, VP, VP]
    lib.ncclGetVersion.argtypes = [ctypes.POINTER(INT)]
    lib.ncclCommDestroy.argtypes = [VP]
    return lib


def sizes(lo, hi):
    s, out = lo, []
    while s <= hi:
        out.append(s)
        s = s * 2 if s < (1 << 20) else s * 4
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--colls", default="allreduce,bcast,allgather,reducescatter")
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--target-ms", type=float, default=50.0)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--sync-max", type=int, default=1 << 20)
    a = ap.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("gloo")
    n = dist.get_world_size()
    lib = nccl()

    def ok(rc):
        if rc != 0:
            raise RuntimeError("NCCL error %d" % rc)

    ver = INT()
    ok(lib.ncclGetVersion(ctypes.byref(ver)))
    uid = UniqueID()
    if rank == 0:
        ok(lib.ncclGetUniqueId(ctypes.byref(uid)))
    t = torch.tensor(list(bytes(uid)), dtype=torch.uint8)
    dist.broadcast(t, 0)
    ctypes.memmove(ctypes.addressof(uid), t.numpy().tobytes(), 128)
    comm = VP()
    ok(lib.ncclCommInitRank(ctypes.byref(comm), n, uid, rank))
    stream = torch.cuda.Stream()
    sp = VP(stream.cuda_stream)
    A = torch.randn(a.max_bytes // 4 + n, device=dev)
    B = torch.randn(a.max_bytes // 4 + n, device=dev)
    pa, pb = VP(A.data_ptr()), VP(B.data_ptr())
    out = open(a.out, "a") if rank == 0 else None

    def slowest(x):
        v = torch.tensor([float(x)], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        return v.item()

    def call(coll, nbytes):
        e = nbytes // 4
        if coll == "allreduce":
            return lambda: ok(lib.ncclAllReduce(pa, pa, e, 7, 0, comm, sp))
        if coll == "bcast":
            return lambda: ok(lib.ncclBroadcast(pa, pa, e, 7, 0, comm, sp))
        if e < n:
            return None
        # A block per rank: sizes are cut down to a multiple of n elements
        # (moved(), as braid bench does), as nccl-tests does.
        e -= e % n
        if coll == "allgather":
            return lambda: ok(lib.ncclAllGather(pa, pb, e // n, 7, comm, sp))
        return lambda: ok(lib.ncclReduceScatter(pa, pb, e // n, 7, 0, comm, sp))

    def timeit(fn, sync):
        def loop(k):
            for _ in range(k):
                fn()
                if sync:
                    stream.synchronize()
            stream.synchronize()
        loop(10)
        t0 = time.perf_counter()
        loop(5)
        est = slowest((time.perf_counter() - t0) / 5)
        iters = int(min(50000, max(20, math.ceil(a.target_ms / 1e3 / max(est, 1e-7)))))
        best = float("inf")
        for _ in range(a.trials):
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            loop(iters)
            best = min(best, slowest((time.perf_counter() - t0) / iters))
        return best, iters

    def moved(coll, nbytes):
        if coll in ("allgather", "reducescatter"):
            return nbytes // 4 // n * n * 4
        return nbytes

    factor = {"allreduce": 2 * (n - 1) / n, "bcast": 1.0, "allgather": (n - 1) / n, "reducescatter": (n - 1) / n}
    for coll in a.colls.split(","):
        for nbytes in sizes(a.min_bytes, a.max_bytes):
            fn = call(coll, nbytes)
            if fn is None or nbytes < 4:
                continue
            nbytes = moved(coll, nbytes)
            for mode in ("async", "sync"):
                if mode == "sync" and nbytes > a.sync_max:
                    continue
                best, iters = timeit(fn, mode == "sync")
                if rank == 0:
                    algbw = nbytes / best / 1e9
                    rec = {"api": "nccl", "mode": mode, "op": coll, "n": n, "bytes": nbytes, "time_us": best * 1e6,
                           "algbw_GBps": algbw, "busbw_GBps": algbw * factor[coll], "iters": iters,
                           "nccl_version": ver.value}
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    print("nccl %-6s %-13s %11d B %11.2f us busbw %8.2f GB/s" % (mode, coll, nbytes, best * 1e6, rec["busbw_GBps"]), flush=True)
    torch.cuda.synchronize()
    ok(lib.ncclCommDestroy(comm))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
