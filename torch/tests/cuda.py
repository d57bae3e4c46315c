"""The "braid" backend's collectives on CUDA tensors, checked element by
element (PyTorch 2.x, the extension built with CUDA: setup.py,
scripts/torch-gpu.sh):

    python3 -m torch.distributed.run --standalone --nproc_per_node 2 torch/tests/cuda.py

Rank r works on GPU (LOCAL_RANK mod the GPUs visible), so that ranks share
a GPU where they outnumber them. Every call is ordered on the current
stream: the default (legacy) stream, and a side stream whose input is
written behind tens of milliseconds of GPU sleep, so that a call that did
not wait for its stream reads stale input. Prints "ok" on rank 0.
"""

import os

import braid_torch
import torch
import torch.distributed as dist


def check(got, want, what):
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        i = bad[0].tolist() if len(bad) else []
        raise AssertionError(f"rank {dist.get_rank()}: {what}: {len(bad)} elements differ, first at {i}: "
                             f"{got[tuple(i)].item() if i else got} != {want[tuple(i)].item() if i else want}")


def main():
    assert braid_torch._C.cuda, "braid_torch was built without CUDA"
    dist.init_process_group("braid")
    r, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", r)) % torch.cuda.device_count())
    torch.cuda.set_device(dev)

    def base(count, dtype=torch.float32):
        return (torch.arange(count, device=dev) % 7).to(dtype)

    # allreduce: dtypes, counts, in place.
    for count in (1, 1000, 12345, 1 << 20):
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                      torch.uint8):
            x = base(count, dtype) + 3 * r
            dist.all_reduce(x)
            check(x, base(count, dtype) * n + 3 * n * (n - 1) // 2, f"all_reduce sum {dtype} of {count}")
    for op, want in ((dist.ReduceOp.MAX, 3 * (n - 1)), (dist.ReduceOp.MIN, 0), (dist.ReduceOp.AVG, 1.5 * (n - 1))):
        x = base(12345) + 3 * r
        dist.all_reduce(x, op=op)
        check(x, base(12345) + want, f"all_reduce {op}")
    b = torch.tensor([r == 0, False, True], device=dev)
    dist.all_reduce(b)  # booleans: any
    check(b, torch.tensor([True, False, True], device=dev), "all_reduce of booleans")

    # On a side stream, behind a GPU sleep: the call waits for the stream,
    # and the work queued after it on the stream sees the result.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.empty(1 << 18, device=dev)
        torch.cuda._sleep(50_000_000)
        x.fill_(r + 1.0)
        dist.all_reduce(x)
        y = x * 2
    torch.cuda.current_stream().wait_stream(s)
    check(y, torch.full_like(y, n * (n + 1.0)), "all_reduce on a side stream after a sleep")

    # A chain of in-place calls, one synchronisation.
    x = torch.ones(1 << 16, device=dev)
    for _ in range(20):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    check(x, torch.full_like(x, float(n) ** 20), "a chain of 20 all_reduces")

    # Async work and futures.
    x = torch.ones(4096, device=dev)
    w = dist.all_reduce(x, async_op=True)
    w.wait()
    check(x, torch.full_like(x, float(n)), "async all_reduce")
    f = dist.all_reduce(torch.ones(3, device=dev), async_op=True).get_future()
    check(f.wait()[0], torch.full((3,), float(n), device=dev), "the future of an all_reduce")

    for count in (1, 12345, 1 << 20):
        x = base(count) + r if r == n - 1 else torch.full((count,), -1.0, device=dev)
        dist.broadcast(x, src=n - 1)
        check(x, base(count) + n - 1, f"broadcast of {count}")

        x = base(count) + 3 * r
        dist.reduce(x, dst=0, op=dist.ReduceOp.MAX)
        if r == 0:
            check(x, base(count) + 3 * (n - 1), f"reduce (max) of {count}")

        outs = [torch.empty(count, device=dev) for _ in range(n)]
        dist.all_gather(outs, base(count) + 10 * r)
        for q in range(n):
            check(outs[q], base(count) + 10 * q, f"all_gather of {count}, block {q}")
        big = torch.empty(n * count, device=dev)
        dist.all_gather_into_tensor(big, base(count) + 10 * r)
        check(big, torch.cat([base(count) + 10 * q for q in range(n)]), f"all_gather_into_tensor of {count}")

        out = torch.empty(count, device=dev)
        dist.reduce_scatter(out, [base(count) + r + 10 * q for q in range(n)])
        check(out, base(count) * n + n * (n - 1) // 2 + 10 * r * n, f"reduce_scatter of {count}")
        out = torch.empty(count, device=dev)
        dist.reduce_scatter_tensor(out, torch.cat([base(count) + r + 10 * q for q in range(n)]))
        check(out, base(count) * n + n * (n - 1) // 2 + 10 * r * n, f"reduce_scatter_tensor of {count}")

        gl = [torch.empty(count, device=dev) for _ in range(n)] if r == 1 % n else None
        dist.gather(base(count) + r, gl, dst=1 % n)
        if gl is not None:
            for q in range(n):
                check(gl[q], base(count) + q, f"gather of {count}, block {q}")
        got = torch.empty(count, device=dev)
        dist.scatter(got, [base(count) + 7 * q for q in range(n)] if r == 0 else None, src=0)
        check(got, base(count) + 7 * r, f"scatter of {count}")

        send = torch.cat([base(count) + 100 * r + q for q in range(n)])
        recv = torch.empty(n * count, device=dev)
        dist.all_to_all_single(recv, send)
        check(recv, torch.cat([base(count) + 100 * q + r for q in range(n)]), f"all_to_all_single of {count}")
        outs = [torch.empty(count, device=dev) for _ in range(n)]
        dist.all_to_all(outs, [base(count) + 100 * r + q for q in range(n)])
        for q in range(n):
            check(outs[q], base(count) + 100 * q + r, f"all_to_all of {count}, block {q}")

    # 64 MiB.
    x = torch.full((16 << 20,), float(r), device=dev)
    dist.all_reduce(x)
    check(x, torch.full_like(x, n * (n - 1) / 2.0), "all_reduce of 64 MiB")

    # Refused: point-to-point on CUDA tensors; the group goes on working.
    try:
        dist.send(torch.ones(1, device=dev), (r + 1) % n)
        raise AssertionError("send of a CUDA tensor succeeded")
    except RuntimeError as e:
        assert "point-to-point" in str(e), e
    x = torch.ones(10, device=dev)
    dist.all_reduce(x)
    check(x, torch.full_like(x, float(n)), "all_reduce after a refused send")

    torch.cuda.synchronize()
    dist.barrier()
    if r == 0:
        print(f"ok: braid on CUDA tensors, {n} ranks on {torch.cuda.device_count()} GPU(s) "
              f"({torch.cuda.get_device_name(dev)}), torch {torch.__version__}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
