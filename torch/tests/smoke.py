"""Every collective of the "braid" backend, checked element by element.

    braid run -n 2 -- python3 torch/tests/smoke.py [BACKEND]

(BACKEND "gloo" runs the same checks on Gloo, to tell the test's
expectations from Braid's behaviour.) Prints "ok" on rank 0.
"""

import sys

import braid_torch  # noqa: F401  registers "braid"
import torch
import torch.distributed as dist


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "braid"
    dist.init_process_group(backend)
    r, n = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == backend, dist.get_backend()

    dtypes = [torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.uint8, torch.int8]
    if backend != "gloo":  # Gloo 1.13: "Invalid scalar type"
        dtypes.append(torch.bfloat16)
    for dtype in dtypes:
        x = torch.arange(10, dtype=dtype) + r
        dist.all_reduce(x)
        want = (torch.arange(10, dtype=torch.float64) * n + n * (n - 1) / 2).to(dtype)
        assert torch.equal(x, want), (dtype, x, want)
    for op, f in ((dist.ReduceOp.MAX, max), (dist.ReduceOp.MIN, min)):
        x = torch.tensor([float(r), -float(r)])
        dist.all_reduce(x, op=op)
        assert x.tolist() == [f(range(n)), f(-q for q in range(n))], (op, x)
    x = torch.tensor([r + 1], dtype=torch.int64)
    dist.all_reduce(x, op=dist.ReduceOp.PRODUCT)
    assert x.item() == __import__("math").factorial(n), x
    if backend != "gloo":  # Gloo 1.13 has no booleans
        b = torch.tensor([r == 0, False, True])
        dist.all_reduce(b)  # sum of booleans: any
        assert b.tolist() == [True, False, True], b

    x = torch.full((5, 3), float(r))
    dist.broadcast(x, src=n - 1)
    assert torch.all(x == n - 1), x

    x = torch.ones(7) * (r + 1)
    dist.reduce(x, dst=0)
    if r == 0:
        assert torch.all(x == n * (n + 1) / 2), x

    outs = [torch.empty(4) for _ in range(n)]
    dist.all_gather(outs, torch.arange(4.0) + 10 * r)
    for q in range(n):
        assert torch.equal(outs[q], torch.arange(4.0) + 10 * q), outs

    if backend != "gloo":  # Gloo 1.13 has no _allgather_base
        big = torch.empty(n * 3, dtype=torch.int64)
        dist.all_gather_into_tensor(big, torch.full((3,), r, dtype=torch.int64))
        assert big.tolist() == [q for q in range(n) for _ in range(3)], big

    if backend != "gloo":  # Gloo 1.13 has no reduce_scatter
        out = torch.empty(6)
        dist.reduce_scatter(out, [torch.full((6,), float(r + 10 * q)) for q in range(n)])
        assert torch.all(out == sum(q + 10 * r for q in range(n))), out
        out = torch.empty(2, dtype=torch.int32)
        dist.reduce_scatter_tensor(out, torch.arange(2 * n, dtype=torch.int32) * (r + 1))
        assert out.tolist() == [(2 * r + k) * n * (n + 1) // 2 for k in range(2)], out

    gl = [torch.empty(2) for _ in range(n)] if r == 1 % n else None
    dist.gather(torch.tensor([r, r + 0.5]), gl, dst=1 % n)
    if gl is not None:
        assert [t.tolist() for t in gl] == [[q, q + 0.5] for q in range(n)], gl

    got = torch.empty(3)
    dist.scatter(got, [torch.full((3,), 7.0 * q) for q in range(n)] if r == 0 else None, src=0)
    assert torch.all(got == 7.0 * r), got

    send = torch.arange(n * 2, dtype=torch.float32) + 100 * r
    recv = torch.empty(n * 2)
    dist.all_to_all_single(recv, send)
    assert recv.tolist() == [float(2 * r + k + 100 * q) for q in range(n) for k in range(2)], recv

    # Uneven splits: rank q sends q+1 rows to every peer.
    send = torch.full((n * (r + 1), 2), float(r))
    recv = torch.empty(sum(q + 1 for q in range(n)), 2)
    dist.all_to_all_single(recv, send, output_split_sizes=[q + 1 for q in range(n)],
                           input_split_sizes=[r + 1] * n)
    assert recv[:, 0].tolist() == [float(q) for q in range(n) for _ in range(q + 1)], recv

    if backend != "gloo":  # Gloo 1.13 has no alltoall of tensor lists
        outs = [torch.empty(q + 1) for q in range(n)]
        dist.all_to_all(outs, [torch.full((r + 1,), float(r * 10 + q)) for q in range(n)])
        assert [t.tolist() for t in outs] == [[float(q * 10 + r)] * (q + 1) for q in range(n)], outs

    if n > 1:
        nxt, prv = (r + 1) % n, (r - 1) % n
        t = torch.tensor([float(r)])
        u = torch.empty(1)
        reqs = [dist.isend(t, nxt, tag=3), dist.irecv(u, prv, tag=3)]
        for q in reqs:
            q.wait()
        assert u.item() == prv, u
        if r == 0:
            dist.send(torch.tensor([42]), 1)
        elif r == 1:
            v = torch.empty(1, dtype=torch.int64)
            dist.recv(v, 0)
            assert v.item() == 42, v

    works = [dist.all_reduce(torch.ones(1000) * q, async_op=True) for q in range(4)]
    for q, w in enumerate(works):
        w.wait()
        assert w.is_completed()
    f = dist.all_reduce(torch.ones(3), async_op=True).get_future()
    assert torch.equal(f.wait()[0], torch.full((3,), float(n))), f.value()

    # Calls above BRAID_TORCH_EAGER_MAX (64 KiB: these are 512 KiB) run in
    # the background and complete on the thread that waits first. Odd
    # ranks wait last call first.
    big = 1 << 17
    xs = [torch.full((big,), float(r + q)) for q in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for w in (reversed(works) if r % 2 else works):
        w.wait()
    for q, x in enumerate(xs):
        assert torch.all(x == n * q + n * (n - 1) / 2), (q, x[:4])
    x = torch.ones(big)
    w = dist.all_reduce(x, async_op=True)
    while not w.is_completed():  # polls; nobody waits
        pass
    assert torch.all(x == n), x[:4]
    x = torch.ones(big)
    w = dist.all_reduce(x, async_op=True)
    w.wait(timeout=__import__("datetime").timedelta(seconds=60))  # the completion thread completes it
    assert torch.all(x == n), x[:4]
    x = torch.ones(big)
    f = dist.all_reduce(x, async_op=True).get_future().then(lambda f: f.value()[0].sum().item())
    assert f.wait() == n * big, f.value()
    outs = [torch.empty(big // 4) for _ in range(n)]
    w = dist.all_gather(outs, torch.full((big // 4,), float(r)), async_op=True)
    w.wait()  # the copy into the list follows the call
    assert all(torch.all(outs[q] == q) for q in range(n)), [o[:2] for o in outs]
    dist.all_reduce(torch.ones(big), async_op=True)  # dropped unwaited: the completion thread ends it

    dist.barrier()
    if r == 0:
        print(f"ok: {backend} on {n} ranks")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
