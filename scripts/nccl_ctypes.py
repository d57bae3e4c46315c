#!/usr/bin/env python3
"""NCCL called directly through ctypes, one process per GPU, for scripts/compare-gpu.sh.

Launch: python3 -m torch.distributed.run --standalone --nproc_per_node=N scripts/nccl_ctypes.py --out F

torch only allocates device memory, makes the stream, fills and compares buffers and captures CUDA
graphs; the bootstrap (NCCL's unique id, the max of the ranks' times, the agreement on a wrong
result) goes over gloo on the CPU, outside the timed loops. Every call is one ctypes call (about
0.5-1 us of host time that a C caller does not pay; scripts/nccl-tests.sh measures NCCL without
Python).

Conventions match `braid bench --device cuda --inputs K`: size = the largest buffer (all_gather: the
gathered output; reduce_scatter: the whole input), cut to a multiple of n elements for all_gather and
reduce_scatter; float32, sum; busbw as nccl-tests. The calls run out of place from K input buffers
in turn (broadcast: from the root's input buffer, in place there, into the other ranks' one output
buffer) whose values differ from each other and from one timed loop to the next; the output is
poisoned (NaN) before every timed loop and the last call's result compared with what it must hold
after it, on every rank: a wrong result prints WRONG RESULT, is recorded with "correct": false,
and makes the process exit with status 1 at the end.

Modes, each a timed loop of enough calls to fill --target-ms, the slowest rank's time per call:
  b2b    back to back: the loop's calls enqueued, one stream synchronisation at the end (NCCL's usual
         figure, a throughput);
  lat    per-call latency: the stream synchronised after every call (what a caller that needs the
         result waits); sizes up to --lat-max;
  graph  --graph-calls calls captured in one CUDA graph (torch.cuda.CUDAGraph on the calls' stream),
         the graph replayed back to back, one synchronisation; time per call; sizes to --graph-max.

Configurations, one communicator each, made in turn: NCCL_PROTO in --protos ("default" leaves it
unset), and each --envs entry (LABEL:VAR=VALUE+VAR=VALUE, ';' between entries: other settings read
when a communicator is made, such as NCCL_MIN_NCHANNELS), times --regs: "none" (buffers from
PyTorch's allocator, not registered) and "sym" (buffers from ncclMemAlloc, registered with
ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC), NCCL 2.27 and later; skipped with a line where
the library lacks it). A configuration is named LABEL/REG (LABEL: the protocol or the --envs label).
"""
import os

for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[k] = v

import argparse
import ctypes
import glob
import itertools
import json
import math
import site
import sys
import time

import torch
import torch.distributed as dist

VP, SZ, INT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
FLOAT, SUM = 7, 0  # ncclFloat32, ncclSum
WIN_COLL_SYMMETRIC = 1  # NCCL_WIN_COLL_SYMMETRIC


class UniqueID(ctypes.Structure):
    _fields_ = [("b", ctypes.c_byte * 128)]


def load_nccl():
    libs = []
    for sp in site.getsitepackages() + [site.getusersitepackages()]:
        libs += sorted(glob.glob(sp + "/nvidia/nccl/lib/libnccl.so*"))
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
    lib.ncclGetErrorString.argtypes = [INT]
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    sym = all(hasattr(lib, f) for f in ("ncclMemAlloc", "ncclMemFree", "ncclCommWindowRegister", "ncclCommWindowDeregister"))
    if sym:
        lib.ncclMemAlloc.argtypes = [ctypes.POINTER(VP), SZ]
        lib.ncclMemFree.argtypes = [VP]
        lib.ncclCommWindowRegister.argtypes = [VP, VP, SZ, ctypes.POINTER(VP), INT]
        lib.ncclCommWindowDeregister.argtypes = [VP, VP]
    return lib, sym, getattr(lib, "_name", "?")


def parse_size(s):
    s = s.strip().upper()
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)


def sizes(lo, hi):
    s, out = lo, []
    while s <= hi:
        out.append(s)
        s = s * 2 if s < (1 << 20) else s * 4
    return out


class DevArray:
    """A float32 device array at ptr that torch.as_tensor can wrap (ncclMemAlloc's memory)."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes // 4,), "typestr": "<f4", "data": (ptr, False), "version": 3, "strides": None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--colls", default="allreduce,bcast,allgather,reducescatter")
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--sizes", default="", help="comma-separated sizes (8,4K,1G) instead of --min-bytes to --max-bytes")
    ap.add_argument("--target-ms", type=float, default=50.0)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--modes", default="b2b,lat,graph")
    ap.add_argument("--lat-max", type=int, default=4 << 20)
    ap.add_argument("--graph-max", type=int, default=4 << 20)
    ap.add_argument("--graph-calls", type=int, default=20)
    ap.add_argument("--inputs", type=int, default=4)
    ap.add_argument("--protos", default="default,LL,LL128,Simple")
    ap.add_argument("--regs", default="none,sym")
    ap.add_argument("--envs", default="", help="more configurations: LABEL:VAR=VALUE+VAR=VALUE;LABEL2:...")
    ap.add_argument("--round", type=int, default=0)
    a = ap.parse_args()
    if a.inputs < 2 or a.graph_calls < 2:
        sys.exit("nccl_ctypes: --inputs and --graph-calls: want 2 or more")
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("gloo")
    n = dist.get_world_size()
    lib, has_sym, libname = load_nccl()
    colls = a.colls.split(",")
    modes = a.modes.split(",")
    size_list = [parse_size(s) for s in a.sizes.split(",")] if a.sizes else sizes(a.min_bytes, a.max_bytes)
    max_bytes = max(size_list)

    def ok(rc, what="NCCL"):
        if rc != 0:
            raise RuntimeError("%s: NCCL error %d (%s)" % (what, rc, lib.ncclGetErrorString(rc).decode()))

    ver = INT()
    ok(lib.ncclGetVersion(ctypes.byref(ver)))
    code = ver.value
    major, minor = (code // 10000, code % 10000 // 100) if code >= 10000 else (code // 1000, code % 1000 // 100)
    sym_ok = has_sym and (major, minor) >= (2, 27)
    regs = a.regs.split(",")
    if rank == 0:
        print("nccl_ctypes: NCCL %d.%d (code %d) from %s, %d ranks, torch %s" % (major, minor, code, libname, n, torch.__version__), flush=True)
        if "sym" in regs and not sym_ok:
            print("nccl_ctypes: SKIP symmetric registration: NCCL %d.%d %s (ncclMemAlloc + ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC need 2.27+)"
                  % (major, minor, "lacks the functions" if not has_sym else "is older than 2.27"), flush=True)
    if not sym_ok:
        regs = [r for r in regs if r != "sym"]
    out = open(a.out, "a") if rank == 0 else None
    bad_total = 0

    def write(rec):
        if rank == 0:
            rec.update({"api": "nccl", "n": n, "nccl_version": code, "round": a.round, "inputs": a.inputs})
            out.write(json.dumps(rec) + "\n")
            out.flush()

    def slowest(x):
        v = torch.tensor([float(x)], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        return v.item()

    slot_bytes = max_bytes + 4 * n
    stream = torch.cuda.Stream()
    sp = VP(stream.cuda_stream)

    def buffers(reg):
        """K input slots and one output, as float32 tensors, and their raw pointers (to free)."""
        if reg == "none":
            return [torch.empty(slot_bytes // 4, device=dev) for _ in range(a.inputs)], torch.empty(slot_bytes // 4, device=dev), []
        raw, ts = [], []
        for _ in range(a.inputs + 1):
            p = VP()
            ok(lib.ncclMemAlloc(ctypes.byref(p), slot_bytes), "ncclMemAlloc")
            raw.append(p.value)
            ts.append(torch.as_tensor(DevArray(p.value, slot_bytes), device=dev))
        return ts[:-1], ts[-1], raw

    def value(r, b, s, g):
        mod = 251
        while mod > 2 and n * n * n * (mod + 1) >= 1 << 24:
            mod -= 1
        return float(1 + r + n * b + n * n * ((g * a.inputs + s) % mod))

    def new_comm():
        uid = UniqueID()
        if rank == 0:
            ok(lib.ncclGetUniqueId(ctypes.byref(uid)))
        t = torch.tensor(list(bytes(uid)), dtype=torch.uint8)
        dist.broadcast(t, 0)
        ctypes.memmove(ctypes.addressof(uid), t.numpy().tobytes(), 128)
        comm = VP()
        ok(lib.ncclCommInitRank(ctypes.byref(comm), n, uid, rank), "ncclCommInitRank")
        return comm

    factor = {"allreduce": 2 * (n - 1) / n, "bcast": 1.0, "allgather": (n - 1) / n, "reducescatter": (n - 1) / n}
    root = 0
    # The configurations: (label, {variable: value or None to unset}).
    configs = [(p, {"NCCL_PROTO": None if p == "default" else p}) for p in a.protos.split(",") if p]
    for entry in a.envs.split(";"):
        if entry.strip():
            label, _, sets = entry.partition(":")
            env = {"NCCL_PROTO": None}
            for kv in sets.split("+"):
                k, _, v = kv.partition("=")
                env[k.strip()] = v.strip()
            configs.append((label.strip(), env))
    base_env = {k: os.environ.get(k) for _, env in configs for k in env}
    for reg in regs:
        slots, outb, raw = buffers(reg)
        for proto, env in configs:
            for k, v in base_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            for k, v in env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            cfg = "%s/%s" % (proto, reg)
            t0 = time.perf_counter()
            comm = new_comm()
            wins = []
            if reg == "sym":
                for t in slots + [outb]:
                    w = VP()
                    ok(lib.ncclCommWindowRegister(comm, VP(t.data_ptr()), slot_bytes, ctypes.byref(w), WIN_COLL_SYMMETRIC), "ncclCommWindowRegister")
                    wins.append(w)
            if rank == 0:
                print("nccl_ctypes: communicator %s made in %.1f s" % (cfg, time.perf_counter() - t0), flush=True)
            for coll in colls:
                for nbytes in size_list:
                    e = nbytes // 4
                    if coll in ("allgather", "reducescatter"):
                        e -= e % n
                        if e == 0:
                            continue
                        blk = e // n
                    if e == 0:
                        continue
                    nbytes = e * 4
                    # The calls of one rotation, one per slot; the words each rank's input and output hold.
                    if coll == "allreduce":
                        calls = [(lib.ncclAllReduce, (VP(s.data_ptr()), VP(outb.data_ptr()), e, FLOAT, SUM, comm, sp)) for s in slots]
                        in_blocks, in_words, out_words = 1, e, e
                    elif coll == "bcast":
                        calls = [(lib.ncclBroadcast, (VP(s.data_ptr()), VP(s.data_ptr() if rank == root else outb.data_ptr()), e, FLOAT, root, comm, sp)) for s in slots]
                        in_blocks, in_words, out_words = 1, e, e
                    elif coll == "allgather":
                        calls = [(lib.ncclAllGather, (VP(s.data_ptr()), VP(outb.data_ptr()), blk, FLOAT, comm, sp)) for s in slots]
                        in_blocks, in_words, out_words = 1, blk, e
                    else:
                        calls = [(lib.ncclReduceScatter, (VP(s.data_ptr()), VP(outb.data_ptr()), blk, FLOAT, SUM, comm, sp)) for s in slots]
                        in_blocks, in_words, out_words = n, e, blk
                    bw = in_words // in_blocks
                    state = {"next": 0, "gen": 0}

                    def fill():
                        state["gen"] += 1
                        g = state["gen"]
                        src = root if coll == "bcast" else rank
                        for s, t in enumerate(slots):
                            for b in range(in_blocks):
                                t[b * bw:(b + 1) * bw].fill_(value(src, b, s, g))
                        outb[:out_words].fill_(float("nan"))
                        torch.cuda.synchronize()

                    def want_blocks(s):
                        g = state["gen"]
                        if coll == "allreduce":
                            return [(0, out_words, sum(value(q, 0, s, g) for q in range(n)))]
                        if coll == "bcast":
                            return [(0, out_words, value(root, 0, s, g))]
                        if coll == "allgather":
                            return [(q * blk, (q + 1) * blk, value(q, 0, s, g)) for q in range(n)]
                        return [(0, out_words, sum(value(q, rank, s, g) for q in range(n)))]

                    def check(last):
                        res = slots[last] if coll == "bcast" and rank == root else outb
                        why = None
                        for lo, hi, v in want_blocks(last):
                            view = res[lo:hi]
                            badm = view != v
                            if bool(badm.any()):
                                j = int(badm.nonzero()[0].item())
                                why = "element %d is %r, want %r (input slot %d of %d, generation %d)" % (lo + j, view[j].item(), v, last, a.inputs, state["gen"])
                                break
                        worst = slowest(0 if why is None else rank + 1)
                        if why is not None:
                            print("nccl_ctypes: rank %d: WRONG RESULT: %s %s %d B %s: %s" % (rank, cfg, coll, nbytes, mode, why), file=sys.stderr, flush=True)
                        elif worst > 0:
                            why = "rank %d's result is wrong" % (int(worst) - 1)
                        return why is None

                    def run(k):
                        # k calls in rotation, enqueued back to back.
                        i = state["next"]
                        for f, args in itertools.islice(itertools.cycle(calls[i:] + calls[:i]), k):
                            rc = f(*args)
                            if rc:
                                ok(rc, coll)
                        state["next"] = (i + k) % len(calls)

                    def run_sync(k):
                        i = state["next"]
                        for f, args in itertools.islice(itertools.cycle(calls[i:] + calls[:i]), k):
                            rc = f(*args)
                            if rc:
                                ok(rc, coll)
                            stream.synchronize()
                        state["next"] = (i + k) % len(calls)

                    for mode in modes:
                        if mode == "lat" and nbytes > a.lat_max or mode == "graph" and nbytes > a.graph_max:
                            continue
                        rec = {"mode": mode, "op": coll, "bytes": nbytes, "proto": proto, "reg": reg, "config": cfg}
                        try:
                            graph = None
                            per = 1  # calls per step
                            if mode == "graph":
                                # Warm the calls outside the capture (connections, registrations), then capture.
                                state["next"] = 0
                                run(len(calls))
                                stream.synchronize()
                                graph = torch.cuda.CUDAGraph()
                                state["next"] = 0
                                with torch.cuda.graph(graph, stream=stream):
                                    run(a.graph_calls)
                                torch.cuda.synchronize()
                                per = a.graph_calls
                                last_of = lambda: (a.graph_calls - 1) % len(calls)

                                def step(k):
                                    for _ in range(k):
                                        graph.replay()
                                    stream.synchronize()
                            elif mode == "lat":
                                last_of = lambda: (state["next"] - 1) % len(calls)

                                def step(k):
                                    run_sync(k)
                            else:
                                last_of = lambda: (state["next"] - 1) % len(calls)

                                def step(k):
                                    run(k)
                                    stream.synchronize()
                            # The replays run on torch's current stream; the captured calls on theirs.
                            fill()
                            with torch.cuda.stream(stream):
                                step(max(1, 10 // per))
                                t0 = time.perf_counter()
                                step(max(1, 5 // per))
                                est = slowest((time.perf_counter() - t0) / (max(1, 5 // per) * per))
                                steps = int(min(50000 // per + 1, max(max(1, 20 // per), math.ceil(a.target_ms / 1e3 / max(est, 1e-7) / per))))
                                best, right = float("inf"), True
                                for _ in range(a.trials):
                                    fill()
                                    dist.barrier()
                                    t0 = time.perf_counter()
                                    step(steps)
                                    best = min(best, slowest((time.perf_counter() - t0) / (steps * per)))
                                    right = check(last_of()) and right
                            del graph
                        except Exception as ex:  # a configuration NCCL refuses (a protocol it cannot run, a capture)
                            try:
                                torch.cuda.synchronize()
                            except Exception as ex2:
                                ex = RuntimeError("%s; then %s" % (ex, ex2))
                            rec["error"] = str(ex)[:300]
                            write(rec)
                            if rank == 0:
                                print("nccl_ctypes: %-14s %-6s %-13s %11d B: FAILED: %s" % (cfg, mode, coll, nbytes, rec["error"]), flush=True)
                            continue
                        if not right:
                            bad_total += 1
                        algbw = nbytes / best / 1e9
                        rec.update({"time_us": best * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * factor[coll],
                                    "iters": steps * per, "correct": right, "graph_calls": a.graph_calls if mode == "graph" else None})
                        write(rec)
                        if rank == 0:
                            print("nccl %-14s %-5s %-13s %11d B %11.2f us busbw %8.2f GB/s%s" % (cfg, mode, coll, nbytes, best * 1e6, rec["busbw_GBps"],
                                  "" if right else "  WRONG RESULT"), flush=True)
            torch.cuda.synchronize()
            for w in wins:
                ok(lib.ncclCommWindowDeregister(comm, w), "ncclCommWindowDeregister")
            ok(lib.ncclCommDestroy(comm), "ncclCommDestroy")
        del slots, outb
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        for p in raw:
            ok(lib.ncclMemFree(VP(p)), "ncclMemFree")
    dist.destroy_process_group()
    if bad_total:
        print("nccl_ctypes: rank %d: %d timed loops gave WRONG RESULTS" % (rank, bad_total), file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
