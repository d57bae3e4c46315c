"""The "braid" backend's collectives on CUDA tensors, checked element by
element (PyTorch 2.x, the extension built with CUDA: setup.py,
scripts/torch-gpu.sh):

    python3 -m torch.distributed.run --standalone --nproc_per_node 2 torch/tests/cuda.py

Rank r works on GPU (LOCAL_RANK mod the GPUs visible), so that ranks share
a GPU where they outnumber them. Every call is ordered on the current
stream: the default (legacy) stream, and a side stream whose input is
written behind tens of milliseconds of GPU sleep, so that a call that did
not wait for its stream reads stale input. Then point-to-point calls on
CUDA tensors (send/recv, isend/irecv, a ring) and all-to-alls of uneven
blocks. Prints "ok" on rank 0.
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

    # Point-to-point on CUDA tensors: a ping-pong between ranks 0 and 1 over
    # dtypes and counts (the receive on the current stream, read after
    # it), isend/irecv with their Work, and on a side stream behind a
    # sleep; every rank then meets in an all_reduce.
    for count in (1, 7, 12345, 1 << 20):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8):
            mine = base(count, dtype) + (r + 1) % 5
            if r == 0:
                dist.send(mine, 1, tag=count % 100)
                got = torch.full_like(mine, 9)
                dist.recv(got, 1, tag=count % 100)
                check(got, base(count, dtype) + 2, f"recv of {dtype} × {count} from rank 1")
            elif r == 1:
                got = torch.full_like(mine, 9)
                dist.recv(got, 0, tag=count % 100)
                check(got, base(count, dtype) + 1, f"recv of {dtype} × {count} from rank 0")
                dist.send(mine, 0, tag=count % 100)
    x = torch.ones(10, device=dev)
    dist.all_reduce(x)
    check(x, torch.full_like(x, float(n)), "all_reduce after the ping-pong")
    if r < 2:
        got = torch.zeros(4099, device=dev)
        if r == 0:
            w = dist.isend(base(4099) + 5, 1, tag=3)
        else:
            w = dist.irecv(got, 0, tag=3)
        w.wait()
        if r == 1:
            check(got, base(4099) + 5, "irecv")
        with torch.cuda.stream(s):
            y = torch.empty(1 << 18, device=dev)
            if r == 0:
                torch.cuda._sleep(50_000_000)
                y.fill_(4.0)
                dist.send(y, 1, tag=4)
            else:
                y.fill_(-1.0)
                dist.recv(y, 0, tag=4)
                z = y * 2
        torch.cuda.current_stream().wait_stream(s)
        if r == 1:
            check(z, torch.full_like(z, 8.0), "recv on a side stream from a send behind a sleep")
    # A ring of exchanges, in two phases so that no two ranks both send
    # first (a send completes once its receiver has posted, as NCCL's).
    right, left = (r + 1) % n, (r - 1) % n
    got = torch.zeros(3000, device=dev)
    if r % 2 == 0:
        dist.send(base(3000) + r, right)
        if n % 2 == 0 or r != 0:
            dist.recv(got, left)
    else:
        dist.recv(got, left)
        dist.send(base(3000) + r, right)
    if n % 2 == 1 and r == 0:
        dist.recv(got, left)
    check(got, base(3000) + left, "a ring of sends")

    # All-to-all of uneven blocks: rank r sends q + r + 1 rows to rank q.
    cols = 3
    in_splits = [q + r + 1 for q in range(n)]
    out_splits = [r + q + 1 for q in range(n)]
    send = torch.cat([torch.full((q + r + 1, cols), 100.0 * r + q, device=dev) for q in range(n)])
    recv = torch.full((sum(out_splits), cols), -1.0, device=dev)
    dist.all_to_all_single(recv, send, out_splits, in_splits)
    check(recv, torch.cat([torch.full((r + q + 1, cols), 100.0 * q + r, device=dev) for q in range(n)]),
          "all_to_all_single of uneven splits")
    outs = [torch.full((r + q + 1,), -1, dtype=torch.int64, device=dev) for q in range(n)]
    dist.all_to_all(outs, [torch.full((q + r + 1,), 10 * r + q, dtype=torch.int64, device=dev) for q in range(n)])
    for q in range(n):
        check(outs[q], torch.full((r + q + 1,), 10 * q + r, dtype=torch.int64, device=dev),
              f"all_to_all of uneven blocks, block {q}")
    x = torch.ones(10, device=dev)
    dist.all_reduce(x)
    check(x, torch.full_like(x, float(n)), "all_reduce after the point-to-point calls")

    torch.cuda.synchronize()
    dist.barrier()
    if r == 0:
        print(f"ok: braid on CUDA tensors, {n} ranks on {torch.cuda.device_count()} GPU(s) "
              f"({torch.cuda.get_device_name(dev)}), torch {torch.__version__}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
