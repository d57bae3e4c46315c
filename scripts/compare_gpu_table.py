#!/usr/bin/env python3
"""The table of scripts/compare-gpu.sh: reads DIR/braid.r*.*.jsonl and DIR/nccl.r*.jsonl, writes the table.

Usage: compare_gpu_table.py DIR [NOTE...]   (prints the table; NOTE lines are printed under its title)

Each cell (collective, GPUs, size, mode) gets, per configuration, the median over the rounds and the
spread (min-max). Configurations: Braid's default ("braid") and Braid with no data through host memory
("braid-nvl", --host-share never), and Braid's allreduce on the resident kernel ("braid-res", per-call
latency only); NCCL's PROTO/REG pairs, whose fastest median per cell is "nccl best"
(named), and NCCL's out-of-the-box pair "default/none". A configuration whose result was wrong in
any round is left out of "best" and listed as WRONG above the tables. Standard library only.
"""
import glob
import json
import os
import re
import statistics
import sys

MODES = {"ordered": "b2b", "sync": "lat", "b2b": "b2b", "lat": "lat", "graph": "graph"}
ORDER = {"allreduce": 0, "bcast": 1, "allgather": 2, "reducescatter": 3}


def size(b):
    for s, u in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if b >= s and b % s == 0:
            return "%d%s" % (b // s, u)
    return str(b)


def load(d):
    """cells[(op, n, bytes, mode)][config] = list of records; plus the wrong and failed records."""
    cells, wrong, failed, rounds = {}, [], [], set()
    files = sorted(glob.glob(os.path.join(d, "braid.r*.jsonl")) + glob.glob(os.path.join(d, "nccl.r*.jsonl")))
    for f in files:
        m = re.match(r"(braid|nccl)\.r(\d+)(?:\.([\w-]+))?\.jsonl$", os.path.basename(f))
        if not m:
            continue
        side, rnd, variant = m.group(1), int(m.group(2)), m.group(3)
        rounds.add(rnd)
        for line in open(f):
            if not line.startswith("{"):
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            mode = MODES.get(r.get("mode"))
            if mode is None:
                continue
            if side == "braid":
                cfg = "braid" if variant in (None, "default") else "braid-" + variant
            else:
                cfg = r.get("config", "%s/%s" % (r.get("proto", "default"), r.get("reg", "none")))
            key = (r["op"], r["n"], r["bytes"], mode)
            if "error" in r:
                failed.append((key, cfg, rnd, r["error"]))
                continue
            r["_round"] = rnd
            cells.setdefault(key, {}).setdefault(cfg, []).append(r)
            if r.get("correct") is False:
                wrong.append((key, cfg, rnd))
    return cells, wrong, failed, sorted(rounds)


NT_OPS = {"all_reduce": "allreduce", "broadcast": "bcast", "all_gather": "allgather", "reduce_scatter": "reducescatter"}


def load_nccl_tests(d):
    """nt[(op, n, bytes)][variant] = (oop time us, oop busbw, oop wrong, in-place time, in-place busbw, in-place wrong),
    from scripts/nccl-tests.sh's DIR/nccl-tests.TEST.VARIANT.txt; and the files' problems."""
    nt, problems = {}, []
    for f in sorted(glob.glob(os.path.join(d, "nccl-tests.*.*.txt"))):
        m = re.match(r"nccl-tests\.(\w+)\.(\w+)\.txt$", os.path.basename(f))
        if not m or m.group(1) not in NT_OPS:
            continue
        op, variant = NT_OPS[m.group(1)], m.group(2)
        n, rows, text = 0, 0, open(f, errors="replace").read()
        for line in text.splitlines():
            if re.match(r"#\s+Rank\s+\d+", line):
                n += 1
                continue
            t = line.split()
            if len(t) < 13 or not t[0].isdigit():
                continue
            try:
                row = (float(t[5]), float(t[7]), t[8], float(t[9]), float(t[11]), t[12])
            except ValueError:
                continue
            nt.setdefault((op, n, int(t[0])), {})[variant] = row
            rows += 1
            if row[2] not in ("0", "N/A") or row[5] not in ("0", "N/A"):
                problems.append("%s %s n=%d %s: #wrong %s (out of place), %s (in place)" % (m.group(1), variant, n, size(int(t[0])), row[2], row[5]))
        if rows == 0:
            problems.append("%s: no results (%s)" % (os.path.basename(f), " ".join(text.split()[-12:])))
    return nt, problems


def stat(recs, field="time_us"):
    v = [r[field] for r in recs if field in r]
    if not v:
        return None
    return statistics.median(v), min(v), max(v), len(v)


def fmt_t(s):
    if s is None:
        return "-"
    med, lo, hi, k = s
    if k == 1:
        return "%.2f" % med
    return "%.2f [%.2f-%.2f]" % (med, lo, hi)


def fmt_bw(s):
    if s is None:
        return "-"
    return "%.1f" % s[0] if s[0] >= 10 else "%.3f" % s[0]


def best(cfgs, bad):
    """The NCCL configuration of lowest median time, not wrong anywhere."""
    top = None
    for cfg, recs in cfgs.items():
        if cfg.startswith("braid") or (cfg in bad):
            continue
        s = stat(recs)
        if s and (top is None or s[0] < top[1][0]):
            top = (cfg, s)
    return top


def checked(cfgs):
    v = [r.get("correct") for recs in cfgs.values() for r in recs]
    if any(x is False for x in v):
        return "WRONG"
    if v and all(x is True for x in v):
        return "ok"
    return "-"


def main():
    d = sys.argv[1]
    notes = sys.argv[2:]
    cells, wrong, failed, rounds = load(d)
    out = []
    p = out.append
    p("# Braid against NCCL on the same GPUs: %d round(s) (%s), each Braid then NCCL; every figure is the median over the rounds, [min-max] where more than one"
      % (len(rounds), ",".join(map(str, rounds)) or "none"))
    for n in notes:
        p("# " + n)
    p("# time: us per call, the slowest rank's; busbw: GB/s as nccl-tests; ratios: Braid / NCCL best (time: below 1 Braid is faster; busbw: above 1 Braid is faster)")
    p("# braid: Braid's defaults (the planner's choice, algo named); braid-nvl: --host-share never (no data through host memory and PCIe; on 2 GPUs run for the broadcast only, the one collective whose default sends some there)")
    if any(k[3] == "lat" and "braid-res" in c for k, c in cells.items()):
        p("# braid-res: Braid's synchronous allreduces on the resident kernel (RESIDENT: BRAID_GPU_RESIDENT; no launch per call; it holds one SM); res x: braid-res / nccl best")
    p("# nccl best: the fastest NCCL_PROTO/registration per cell (default|LL|LL128|Simple / none|sym; sym = ncclMemAlloc + ncclCommWindowRegister symmetric), named; nccl dflt: default/none")
    p("# check: ok = the last result of every timed loop of the cell was compared and right on every rank, on both sides; WRONG = some was not (see above)")
    if wrong:
        p("#")
        p("# WRONG RESULTS (%d timed loops):" % len(wrong))
        for (op, n, b, mode), cfg, rnd in sorted(set(wrong)):
            p("#   %s n=%d %s %s %s round %d" % (op, n, size(b), mode, cfg, rnd))
    if failed:
        p("#")
        p("# configurations that failed (left out; %d cells):" % len(failed))
        seen = set()
        for (op, n, b, mode), cfg, rnd, err in failed:
            k = (op, cfg, mode, err[:80])
            if k in seen:
                continue
            seen.add(k)
            p("#   %s %s %s (from %s): %s" % (cfg, op, mode, size(b), err[:200]))
    bad = {}
    for key, cfg, _ in wrong:
        bad.setdefault(key, set()).add(cfg)
    keys = sorted(cells, key=lambda k: (k[1], ORDER.get(k[0], 9), k[0], k[2]))

    def section(mode, title, bw):
        rows = [k for k in keys if k[3] == mode]
        if not rows:
            return
        p("")
        p("## " + title)
        hdr = "%-13s %2s %5s %-20s %-24s %-24s %-24s %-30s %-14s %7s" % ("collective", "n", "size", "braid algo", "braid", "braid-nvl", "nccl dflt",
                                                                         "nccl best", "(best config)", "time x")
        res = any("braid-res" in cells[k] for k in rows)
        if res:
            hdr += " %-24s %6s" % ("braid-res", "res x")
        if bw:
            hdr += " %9s %9s %6s" % ("braid bw", "nccl bw", "bw x")
        hdr += " %6s" % "check"
        p(hdr)
        for k in rows:
            cfgs = cells[k]
            b = cfgs.get("braid")
            bs = stat(b) if b else None
            nv = stat(cfgs["braid-nvl"]) if "braid-nvl" in cfgs else None
            dflt = stat(cfgs["default/none"]) if "default/none" in cfgs else None
            top = best(cfgs, bad.get(k, set()))
            algo = b[-1].get("algo", "") if b else ""
            line = "%-13s %2d %5s %-20s %-24s %-24s %-24s %-30s %-14s %7s" % (
                k[0], k[1], size(k[2]), algo[:20], fmt_t(bs), fmt_t(nv), fmt_t(dflt), fmt_t(top[1]) if top else "-", top[0] if top else "-",
                "%.2f" % (bs[0] / top[1][0]) if bs and top else "-")
            if res:
                rs = stat(cfgs["braid-res"]) if "braid-res" in cfgs else None
                line += " %-24s %6s" % (fmt_t(rs), "%.2f" % (rs[0] / top[1][0]) if rs and top else "-")
            if bw:
                bb = stat(b, "busbw_GBps") if b else None
                nb = stat(cfgs[top[0]], "busbw_GBps") if top else None
                line += " %9s %9s %6s" % (fmt_bw(bb), fmt_bw(nb),
                                          "%.2f" % (bb[0] / nb[0]) if bb and nb and nb[0] > 0 else "-")
            line += " %6s" % checked(cfgs)
            p(line)

    section("lat", "per-call latency: every call waited for before the next (Braid: synchronous calls, braid bench --modes sync; NCCL: stream synchronised after every call)", False)
    section("b2b", "back to back: a loop of calls queued, one synchronisation at the end (Braid: stream-ordered calls; NCCL: its usual loop); time per call", True)
    section("graph", "CUDA graph: GRAPH_CALLS calls captured in one graph, replayed back to back, one synchronisation at the end; time per call "
            "(Braid: braid bench --modes graph, DeviceComm.Capture, fused kernels only: a size Braid runs as a schedule is listed above as "
            "not capturable; NCCL: torch.cuda.CUDAGraph on the calls' stream)", False)
    nt, problems = load_nccl_tests(d)
    if nt or problems:
        p("")
        p("## cross-check: NVIDIA's nccl-tests (scripts/nccl-tests.sh: C, one process driving the GPUs, no Python), out-of-place time in us per call")
        p("## base: default buffers; sym: -R 2 (symmetric registration); graph: -G (its loop captured in a CUDA graph). ctypes: this script's NCCL,")
        p("## b2b default/none, b2b default/sym, graph default/none; ctypes/nt = ctypes default/none b2b over nccl-tests base (Python's share)")
        p("## braid / nt best = Braid's b2b time over the fastest of nccl-tests' three (below 1 Braid is faster); bw = the busbw of each")
        for q in problems:
            p("## PROBLEM: " + q)
        p("%-13s %2s %5s %9s %9s %9s | %9s %9s %9s %10s | %9s %14s %9s %9s" % ("collective", "n", "size", "nt base", "nt sym", "nt graph", "ctypes", "c sym",
                                                                               "c graph", "ctypes/nt", "braid", "braid / nt best", "braid bw", "nt bw"))

        def med(key, cfg):
            recs = cells.get(key, {}).get(cfg)
            s = stat(recs) if recs else None
            return s[0] if s else None

        def f2(x):
            return "-" if x is None else "%.2f" % x
        for op, n, b in sorted(nt, key=lambda k: (k[1], ORDER.get(k[0], 9), k[2])):
            v = nt[(op, n, b)]
            base, sym, graph = (v[x][0] if x in v else None for x in ("base", "sym", "graph"))
            c = med((op, n, b, "b2b"), "default/none")
            cs = med((op, n, b, "b2b"), "default/sym")
            cg = med((op, n, b, "graph"), "default/none")
            br = med((op, n, b, "b2b"), "braid")
            bests = [(x[0], x[1]) for x in v.values()]
            top = min(bests) if bests else None
            bb = stat(cells[(op, n, b, "b2b")]["braid"], "busbw_GBps") if br is not None else None
            p("%-13s %2d %5s %9s %9s %9s | %9s %9s %9s %10s | %9s %14s %9s %9s" % (
                op, n, size(b), f2(base), f2(sym), f2(graph), f2(c), f2(cs), f2(cg), f2(c / base) if c and base else "-",
                f2(br), f2(br / top[0]) if br and top else "-", fmt_bw(bb), fmt_bw((top[1],)) if top else "-"))
    print("\n".join(out))
    return 1 if wrong or problems else 0


if __name__ == "__main__":
    sys.exit(main())
