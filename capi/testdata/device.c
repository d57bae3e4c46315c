/*
 * device.c: the device calls of Braid's C API (braid_device_*) from C,
 * under `braid run -n N -- ./device [MODE]` or any launcher braid_init
 * knows (torchrun's variables will do).
 *
 * MODE "gpu" (the default) needs a CUDA driver and a GPU: rank r works
 * on GPU (local rank mod the GPUs visible), so that ranks share GPUs
 * where they outnumber them. It runs every device collective on float32
 * (allreduce also on float64, int64 and bfloat16), blocking (stream NULL)
 * and ordered on a stream of its own, on counts from 1 to a few MiB, and
 * checks every element. On the stream the inputs are written by a copy
 * queued behind a millisecond of memsets, and the outputs cleared just
 * before the call and read back by a copy queued after it, so that a call
 * that did not wait for the stream, or that the stream did not wait for,
 * reads or leaves stale values. Blocking calls are made right after the
 * synchronous copy that writes their input from pageable memory, on the
 * legacy default stream, which returns before the data has landed: the
 * call must follow that stream. The stream of the test is non-blocking:
 * it does not wait for the legacy default stream, so every copy that
 * feeds work on it is queued on it (session 10's blocking reduce, which
 * read a peer's input of the round before from element ~3,900 on, was the
 * test's own: its synchronous copy into the staging buffer was still
 * landing when a copy on this stream read the buffer). Then a chain of in-place allreduces
 * queued on the stream with one synchronisation at the end, on the legacy
 * default stream too, and the errors of bad pointers and streams, after
 * which the communicator still works; then the point-to-point calls
 * (p2p below). It reaches the driver through
 * dlopen("libcuda.so.1"), so it builds without CUDA's headers.
 *
 * MODE "nodriver" is for a process without a driver (BRAID_CUDA_LIB set
 * to a library that does not exist will do): every device call must fail
 * with BRAID_ERR_UNSUPPORTED and say why, a call with count 0 succeeds,
 * bad arguments are BRAID_ERR_INVALID_ARGUMENT, and host calls go on
 * working.
 *
 * Prints "ok" on rank 0 at the end; exits 1 with the failed check
 * otherwise.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"

static int rank, size;
static braid_comm comm_;

#include "check.h"

/* The driver's functions this test calls, from libcuda.so.1. */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGetCount)(int *);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDeviceGetName)(char *, int, int);
static CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
static CUresult (*cuCtxSetCurrent)(void *);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemFree)(CUdeviceptr);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuStreamDestroy)(CUstream);
static CUresult (*cuCtxSynchronize)(void);

#define CU(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        CHECK(r_ == 0, "%s -> CUresult %d", #call, r_);                        \
    } while (0)

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    CHECK(p != NULL, "libcuda.so.1 has no %s", name);
    return p;
}

static void load_driver(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) lib = dlopen("/usr/local/nvidia/lib64/libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    CHECK(lib != NULL, "no CUDA driver: %s", dlerror());
    *(void **)&cuInit = sym(lib, "cuInit");
    *(void **)&cuDeviceGetCount = sym(lib, "cuDeviceGetCount");
    *(void **)&cuDeviceGet = sym(lib, "cuDeviceGet");
    *(void **)&cuDeviceGetName = sym(lib, "cuDeviceGetName");
    *(void **)&cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
    *(void **)&cuMemAlloc = sym(lib, "cuMemAlloc_v2");
    *(void **)&cuMemFree = sym(lib, "cuMemFree_v2");
    *(void **)&cuMemcpyHtoD = sym(lib, "cuMemcpyHtoD_v2");
    *(void **)&cuMemcpyHtoDAsync = sym(lib, "cuMemcpyHtoDAsync_v2");
    *(void **)&cuMemcpyDtoH = sym(lib, "cuMemcpyDtoH_v2");
    *(void **)&cuMemcpyDtoHAsync = sym(lib, "cuMemcpyDtoHAsync_v2");
    *(void **)&cuMemcpyDtoDAsync = sym(lib, "cuMemcpyDtoDAsync_v2");
    *(void **)&cuMemsetD8Async = sym(lib, "cuMemsetD8Async");
    *(void **)&cuStreamCreate = sym(lib, "cuStreamCreate");
    *(void **)&cuStreamSynchronize = sym(lib, "cuStreamSynchronize");
    *(void **)&cuStreamDestroy = sym(lib, "cuStreamDestroy_v2");
    *(void **)&cuCtxSynchronize = sym(lib, "cuCtxSynchronize");
}

/* Element j of rank r's input in round k: small integers, exact in
 * float32 sums, different in every round. */
static float val(int r, size_t j, int k) { return (float)((r + 1) * 3 + (int)(j % 7) + (k % 5) * 11); }

enum { ALLREDUCE, BCAST, REDUCE, ALLGATHER, REDUCE_SCATTER, GATHER, SCATTER, ALLTOALL, NCOLL };
static const char *names[NCOLL] = {"allreduce", "bcast",  "reduce",  "allgather",
                                   "reduce_scatter", "gather", "scatter", "alltoall"};

/* The roots of the rooted calls. */
#define BCAST_ROOT (size - 1)
#define REDUCE_ROOT 0
#define SCATTER_ROOT (1 % size)

/* The elements of this rank's send and recv for collective c on count n
 * (0: the rank has no such buffer and passes NULL). */
static size_t send_len(int c, size_t n) {
    switch (c) {
    case REDUCE_SCATTER: case ALLTOALL: return n * size;
    case SCATTER: return rank == SCATTER_ROOT ? n * size : 0;
    case BCAST: return 0; /* in place on recv */
    }
    return n;
}
static size_t recv_len(int c, size_t n) {
    switch (c) {
    case ALLGATHER: case ALLTOALL: return n * size;
    case GATHER: return rank == REDUCE_ROOT ? n * size : 0;
    case REDUCE: return rank == REDUCE_ROOT ? n : 0;
    }
    return n;
}

/* want returns element i of this rank's result of collective c. */
static float want(int c, size_t n, size_t i, int k) {
    float x = 0;
    switch (c) {
    case ALLREDUCE:
        for (int r = 0; r < size; r++) x += val(r, i, k);
        return x;
    case BCAST: return val(BCAST_ROOT, i, k);
    case REDUCE: /* max */
        for (int r = 0; r < size; r++) x = val(r, i, k) > x ? val(r, i, k) : x;
        return x;
    case ALLGATHER: case GATHER: return val((int)(i / n), i % n, k);
    case REDUCE_SCATTER:
        for (int r = 0; r < size; r++) x += val(r, rank * n + i, k);
        return x;
    case SCATTER: return val(SCATTER_ROOT, rank * n + i, k);
    case ALLTOALL: return val((int)(i / n), rank * n + i % n, k);
    }
    return 0;
}

static int call(int c, CUdeviceptr s, CUdeviceptr r, size_t n, void *stream) {
    void *sp = (void *)(uintptr_t)s, *rp = (void *)(uintptr_t)r;
    switch (c) {
    case ALLREDUCE: return braid_device_allreduce(comm_, sp, rp, n, BRAID_FLOAT32, BRAID_SUM, stream);
    case BCAST: return braid_device_bcast(comm_, rp, n, BRAID_FLOAT32, BCAST_ROOT, stream);
    case REDUCE: return braid_device_reduce(comm_, sp, rp, n, BRAID_FLOAT32, BRAID_MAX, REDUCE_ROOT, stream);
    case ALLGATHER: return braid_device_allgather(comm_, sp, rp, n, BRAID_FLOAT32, stream);
    case REDUCE_SCATTER: return braid_device_reduce_scatter(comm_, sp, rp, n, BRAID_FLOAT32, BRAID_SUM, stream);
    case GATHER: return braid_device_gather(comm_, sp, rp, n, BRAID_FLOAT32, REDUCE_ROOT, stream);
    case SCATTER: return braid_device_scatter(comm_, sp, rp, n, BRAID_FLOAT32, SCATTER_ROOT, stream);
    }
    return braid_device_alltoall(comm_, sp, rp, n, BRAID_FLOAT32, stream);
}

/* The device memory of the test. */
static CUstream stream;
static CUdeviceptr dsend, drecv, dstage, ddelay;
#define DELAY_BYTES ((size_t)256 << 20)
static float *hin, *hout;

/* delay queues about 2 GiB of memsets on s, a millisecond or more of
 * work that a call ordered after it must wait for. */
static void delay(CUstream s) {
    for (int i = 0; i < 8; i++) CU(cuMemsetD8Async(ddelay, (unsigned char)i, DELAY_BYTES, s));
}

/* run_one runs collective c on count n in round k, on the test's stream
 * (ordered) or blocking, and checks every element of the result. */
static void run_one(int c, size_t n, int k, int ordered) {
    size_t sl = send_len(c, n), rl = recv_len(c, n);
    /* The input: send's, or for bcast the root's buf. */
    size_t il = c == BCAST ? (rank == BCAST_ROOT ? n : 0) : sl;
    CUdeviceptr in = c == BCAST ? drecv : dsend;
    for (size_t j = 0; j < il; j++) hin[j] = val(rank, j, k);
    CUstream s = stream;
    /* Output first (0xff: NaN), then input, so that bcast's root keeps its
     * input in recv. */
    if (ordered) {
        /* All on the test's stream: staged, behind the delay. */
        if (il) CU(cuMemcpyHtoDAsync(dstage, hin, il * sizeof(float), s));
        delay(s);
        if (rl) CU(cuMemsetD8Async(drecv, 0xff, rl * sizeof(float), s));
        if (il) CU(cuMemcpyDtoDAsync(in, dstage, il * sizeof(float), s));
    } else {
        /* On the legacy default stream, as a program without streams
         * writes them, and no synchronisation: the call follows it. */
        if (rl) CU(cuMemsetD8Async(drecv, 0xff, rl * sizeof(float), NULL));
        if (il) CU(cuMemcpyHtoD(in, hin, il * sizeof(float)));
    }
    int rc = call(c, sl ? dsend : 0, rl ? drecv : 0, n, ordered ? (void *)s : NULL);
    CHECK(rc == BRAID_OK, "%s of %zu (%s) -> %d: %s", names[c], n, ordered ? "on a stream" : "blocking", rc,
          braid_last_error()->message);
    if (ordered) {
        if (rl) CU(cuMemcpyDtoHAsync(hout, drecv, rl * sizeof(float), s));
        CU(cuStreamSynchronize(s));
    } else if (rl) {
        CU(cuMemcpyDtoH(hout, drecv, rl * sizeof(float)));
    }
    for (size_t i = 0; i < rl; i++) {
        float w = want(c, n, i, k);
        CHECK(hout[i] == w, "%s of %zu (%s, round %d): [%zu] = %g, want %g", names[c], n,
              ordered ? "on a stream" : "blocking", k, i, hout[i], w);
    }
}

/* chain queues in-place allreduces on s and synchronises once. */
static void chain(CUstream s, void *bs, size_t n, int calls) {
    for (size_t i = 0; i < n; i++) hin[i] = val(rank, i, 0);
    CU(cuMemcpyHtoDAsync(dstage, hin, n * sizeof(float), s));
    delay(s);
    CU(cuMemcpyDtoDAsync(dsend, dstage, n * sizeof(float), s));
    for (int j = 0; j < calls; j++)
        OK(braid_device_allreduce(comm_, (void *)(uintptr_t)dsend, (void *)(uintptr_t)dsend, n, BRAID_FLOAT32,
                                  BRAID_SUM, bs));
    CU(cuMemcpyDtoHAsync(hout, dsend, n * sizeof(float), s));
    CU(cuStreamSynchronize(s));
    OK(braid_device_synchronize(comm_));
    float scale = 1;
    for (int j = 1; j < calls; j++) scale *= (float)size;
    for (size_t i = 0; i < n; i++) {
        float w = want(ALLREDUCE, n, i, 0) * scale;
        CHECK(hout[i] == w, "chain of %d allreduces of %zu on stream %p: [%zu] = %g, want %g", calls, n, bs, i,
              hout[i], w);
    }
}

/* dtypes runs blocking allreduces of float64 (max) and int64 (sum), right
 * after the synchronous copies of their inputs, and one of bfloat16 (sum)
 * on the test's stream. */
static void dtypes(size_t n) {
    double *d = (double *)hin;
    for (size_t i = 0; i < n; i++) d[i] = val(rank, i, 3) * (rank % 2 ? -1 : 1);
    CU(cuMemcpyHtoD(dsend, d, n * sizeof *d));
    OK(braid_device_allreduce(comm_, (void *)(uintptr_t)dsend, (void *)(uintptr_t)drecv, n, BRAID_FLOAT64, BRAID_MAX,
                              NULL));
    double *dout = (double *)hout;
    CU(cuMemcpyDtoH(dout, drecv, n * sizeof *dout));
    for (size_t i = 0; i < n; i++) {
        double w = -1e300;
        for (int r = 0; r < size; r++) {
            double x = val(r, i, 3) * (r % 2 ? -1 : 1);
            w = x > w ? x : w;
        }
        CHECK(dout[i] == w, "float64 max [%zu] = %g, want %g", i, dout[i], w);
    }
    int64_t *l = (int64_t *)hin;
    for (size_t i = 0; i < n; i++) l[i] = (int64_t)1 << (rank + i % 20);
    CU(cuMemcpyHtoD(dsend, l, n * sizeof *l));
    OK(braid_device_allreduce(comm_, (void *)(uintptr_t)dsend, (void *)(uintptr_t)dsend, n, BRAID_INT64, BRAID_SUM,
                              NULL));
    int64_t *lout = (int64_t *)hout;
    CU(cuMemcpyDtoH(lout, dsend, n * sizeof *lout));
    for (size_t i = 0; i < n; i++) {
        int64_t w = 0;
        for (int r = 0; r < size; r++) w += (int64_t)1 << (r + i % 20);
        CHECK(lout[i] == w, "int64 sum [%zu] = %lld, want %lld", i, (long long)lout[i], (long long)w);
    }
    uint16_t *b = (uint16_t *)hin;
    for (size_t i = 0; i < n; i++) {
        float f = val(rank, i, 0);
        uint32_t u;
        memcpy(&u, &f, 4);
        b[i] = (uint16_t)(u >> 16); /* exact: small integers */
    }
    CU(cuMemcpyHtoDAsync(dsend, b, n * sizeof *b, stream));
    OK(braid_device_allreduce(comm_, (void *)(uintptr_t)dsend, (void *)(uintptr_t)drecv, n, BRAID_BFLOAT16, BRAID_SUM,
                              stream));
    uint16_t *bout = (uint16_t *)hout;
    CU(cuMemcpyDtoHAsync(bout, drecv, n * sizeof *bout, stream));
    CU(cuStreamSynchronize(stream));
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)bout[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        float w = want(ALLREDUCE, n, i, 0);
        CHECK(f == w, "bfloat16 sum [%zu] = %g, want %g", i, f, w);
    }
}

/* errors checks the device calls' errors of bad arguments, which every
 * rank finds before any communication: the communicator goes on working. */
static void errors(void) {
    float h[16] = {0};
    int rc = braid_device_allreduce(comm_, h, h, 16, BRAID_FLOAT32, BRAID_SUM, NULL);
    const braid_error *e = braid_last_error();
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && e->kind == rc && strstr(e->message, "not memory of a GPU") &&
              strcmp(e->call, "allreduce") == 0 && e->rank == rank,
          "host memory -> %d: call %s rank %d: %s", rc, e->call, e->rank, e->message);
    void *d = (void *)(uintptr_t)dsend;
    rc = braid_device_allreduce(comm_, d, d, 16, BRAID_FLOAT32, BRAID_SUM, (void *)0x2);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && strstr(braid_last_error()->message, "per-thread"),
          "cudaStreamPerThread -> %d: %s", rc, braid_last_error()->message);
    rc = braid_device_bcast(comm_, d, 16, BRAID_FLOAT32, size, NULL);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && strstr(braid_last_error()->message, "root"), "root %d -> %d: %s", size,
          rc, braid_last_error()->message);
    rc = braid_device_allgather(comm_, d, (void *)(uintptr_t)drecv, 16, (braid_dtype)99, stream);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && strstr(braid_last_error()->message, "dtype 99"), "dtype 99 -> %d: %s",
          rc, braid_last_error()->message);
    rc = braid_device_reduce(comm_, NULL, NULL, 16, BRAID_FLOAT32, BRAID_SUM, 0, NULL);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && strstr(braid_last_error()->message, "NULL"), "NULL buffers -> %d: %s",
          rc, braid_last_error()->message);
    OK(braid_device_synchronize(comm_));
    run_one(ALLREDUCE, 100, 4, 1); /* still works */
}

/* p2p runs device point-to-point calls between ranks 0 and 1 (a
 * ping-pong, blocking and on the stream, on counts from 1 to 4 MiB, every
 * element checked), a ring of braid_device_sendrecv on every rank, and
 * the errors: a bad peer or tag (INVALID_ARGUMENT naming it), and ends of
 * different counts (MISMATCH on both ends, after which the next message
 * arrives). */
static void p2p(void) {
    size_t counts[] = {1, 1000, 12345, (size_t)1 << 20};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        size_t n = counts[ci];
        for (int ordered = 0; ordered < 2; ordered++) {
            int k = (int)ci * 2 + ordered + 40;
            void *st = ordered ? (void *)stream : NULL;
            void *ds = (void *)(uintptr_t)dsend, *dr = (void *)(uintptr_t)drecv;
            if (rank > 1) continue;
            int peer = 1 - rank;
            for (size_t i = 0; i < n; i++) hin[i] = val(rank, i, k);
            if (rank == 0) {
                CU(cuMemcpyHtoDAsync(dsend, hin, n * sizeof *hin, stream));
                CU(cuStreamSynchronize(stream));
                OK(braid_device_send(comm_, ds, n, BRAID_FLOAT32, peer, k, st));
                CU(cuMemsetD8Async(drecv, 0xff, n * sizeof *hin, stream));
                if (!ordered) CU(cuStreamSynchronize(stream));
                OK(braid_device_recv(comm_, dr, n, BRAID_FLOAT32, peer, k, st));
            } else {
                CU(cuMemsetD8Async(drecv, 0xff, n * sizeof *hin, stream));
                if (!ordered) CU(cuStreamSynchronize(stream));
                OK(braid_device_recv(comm_, dr, n, BRAID_FLOAT32, peer, k, st));
                /* the reply: this rank's own values */
                CU(cuMemcpyHtoDAsync(dsend, hin, n * sizeof *hin, stream));
                if (!ordered) CU(cuStreamSynchronize(stream));
                OK(braid_device_send(comm_, ds, n, BRAID_FLOAT32, peer, k, st));
            }
            CU(cuMemcpyDtoHAsync(hout, drecv, n * sizeof *hout, stream));
            CU(cuStreamSynchronize(stream));
            for (size_t i = 0; i < n; i++)
                CHECK(hout[i] == val(peer, i, k), "ping-pong of %zu (%s): [%zu] = %g, want %g", n,
                      ordered ? "stream" : "blocking", i, hout[i], val(peer, i, k));
        }
    }
    OK(braid_device_synchronize(comm_));

    /* a ring: to the right, from the left, at once */
    size_t n = 54321;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (size_t i = 0; i < n; i++) hin[i] = val(rank, i, 60);
    CU(cuMemcpyHtoDAsync(dsend, hin, n * sizeof *hin, stream));
    CU(cuMemsetD8Async(drecv, 0xff, n * sizeof *hin, stream));
    OK(braid_device_sendrecv(comm_, (void *)(uintptr_t)dsend, n, right, (void *)(uintptr_t)drecv, n, left,
                             BRAID_FLOAT32, 60, stream));
    CU(cuMemcpyDtoHAsync(hout, drecv, n * sizeof *hout, stream));
    CU(cuStreamSynchronize(stream));
    for (size_t i = 0; i < n; i++)
        CHECK(hout[i] == val(left, i, 60), "ring: [%zu] = %g from rank %d, want %g", i, hout[i], left, val(left, i, 60));

    void *d = (void *)(uintptr_t)dsend;
    int rc = braid_device_send(comm_, d, 16, BRAID_FLOAT32, rank, 0, NULL);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && strstr(braid_last_error()->message, "peer") &&
              strcmp(braid_last_error()->call, "send") == 0,
          "send to itself -> %d (%s): %s", rc, braid_last_error()->call, braid_last_error()->message);
    rc = braid_device_recv(comm_, d, 16, BRAID_FLOAT32, (rank + 1) % size, -1, NULL);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && strstr(braid_last_error()->message, "tag -1"), "tag -1 -> %d: %s", rc,
          braid_last_error()->message);
    if (rank < 2) {
        /* the ends differ: both refuse, naming the other */
        if (rank == 0)
            rc = braid_device_send(comm_, d, 10, BRAID_FLOAT32, 1, 3, NULL);
        else
            rc = braid_device_recv(comm_, (void *)(uintptr_t)drecv, 12, BRAID_FLOAT32, 0, 3, NULL);
        const braid_error *e = braid_last_error();
        CHECK(rc == BRAID_ERR_MISMATCH && e->peer == 1 - rank && strstr(e->message, "10 float32 elements"),
              "10 elements sent into 12 -> %d (peer %d): %s", rc, e->peer, e->message);
        for (size_t i = 0; i < 10; i++) hin[i] = val(0, i, 61);
        if (rank == 0) {
            CU(cuMemcpyHtoD(dsend, hin, 10 * sizeof *hin));
            OK(braid_device_send(comm_, d, 10, BRAID_FLOAT32, 1, 3, NULL));
        } else {
            OK(braid_device_recv(comm_, (void *)(uintptr_t)drecv, 10, BRAID_FLOAT32, 0, 3, NULL));
            CU(cuMemcpyDtoH(hout, drecv, 10 * sizeof *hout));
            for (size_t i = 0; i < 10; i++)
                CHECK(hout[i] == val(0, i, 61), "after a refused message: [%zu] = %g", i, hout[i]);
        }
    }
    OK(braid_device_synchronize(comm_));
    run_one(ALLREDUCE, 1000, 62, 1); /* the collectives are still in step */
}

static void gpu(void) {
    load_driver();
    CU(cuInit(0));
    int ngpus, local, dev;
    CU(cuDeviceGetCount(&ngpus));
    CHECK(ngpus > 0, "no GPU");
    OK(braid_comm_local_rank(comm_, &local));
    CU(cuDeviceGet(&dev, local % ngpus));
    void *ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */));
    size_t counts[] = {1, 1000, 12345, (size_t)1 << 20};
    size_t maxn = counts[sizeof counts / sizeof counts[0] - 1] * size;
    CU(cuMemAlloc(&dsend, maxn * sizeof(float)));
    CU(cuMemAlloc(&drecv, maxn * sizeof(float)));
    CU(cuMemAlloc(&dstage, maxn * sizeof(float)));
    CU(cuMemAlloc(&ddelay, DELAY_BYTES));
    hin = malloc(maxn * sizeof(double));
    hout = malloc(maxn * sizeof(double));
    CHECK(hin && hout, "malloc");

    /* count 0 before the first call that moves data: nothing happens */
    OK(braid_device_allreduce(comm_, NULL, NULL, 0, BRAID_FLOAT32, BRAID_SUM, stream));
    int k = 0;
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        for (int c = 0; c < NCOLL; c++)
            for (int ordered = 1; ordered >= 0; ordered--) run_one(c, counts[i], k++, ordered);
    dtypes(4096);
    chain(stream, stream, (size_t)1 << 18, 6);
    chain(NULL, BRAID_STREAM_LEGACY, 3000, 5);
    errors();
    p2p();
    CU(cuCtxSynchronize());
    OK(braid_comm_destroy(comm_));
    if (rank == 0) {
        char name[128] = "";
        cuDeviceGetName(name, sizeof name, dev);
        printf("ok: device calls on %d ranks, %d GPU(s) visible (%s)\n", size, ngpus, name);
    }
    cuMemFree(dsend), cuMemFree(drecv), cuMemFree(dstage), cuMemFree(ddelay);
    cuStreamDestroy(stream);
}

static void nodriver(void) {
    float h[64] = {0}, g[64 * 8] = {0};
    void *streams[] = {NULL, (void *)0x1234};
    for (int si = 0; si < 2; si++) {
        for (int c = 0; c < NCOLL; c++) {
            int rc = call(c, (CUdeviceptr)(uintptr_t)h, (CUdeviceptr)(uintptr_t)g, 8, streams[si]);
            const braid_error *e = braid_last_error();
            CHECK(rc == BRAID_ERR_UNSUPPORTED && e->kind == rc && e->rank == rank && strstr(e->message, "CUDA driver"),
                  "%s without a driver -> %d (rank %d, call %s): %s", names[c], rc, e->rank, e->call, e->message);
            if (rank == 0 && si == 0 && c == 0) printf("%s\n", e->message);
        }
    }
    CHECK(strcmp(braid_last_error()->call, "alltoall") == 0, "the error names call %s", braid_last_error()->call);
    int prc = braid_device_send(comm_, h, 8, BRAID_FLOAT32, (rank + 1) % size, 0, NULL);
    CHECK(prc == BRAID_ERR_UNSUPPORTED && strstr(braid_last_error()->message, "CUDA driver"), "send without a driver -> %d: %s",
          prc, braid_last_error()->message);
    OK(braid_device_allreduce(comm_, NULL, NULL, 0, BRAID_FLOAT32, BRAID_SUM, NULL));
    int rc = braid_device_allreduce(comm_, h, h, 8, (braid_dtype)0, BRAID_SUM, NULL);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT, "dtype 0 without a driver -> %d: %s", rc, braid_last_error()->message);
    rc = braid_device_synchronize(12345);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT, "synchronize on a bad handle -> %d", rc);
    OK(braid_device_synchronize(comm_));
    /* host calls go on */
    double v = rank, w = 0;
    OK(braid_allreduce(comm_, &v, &v, 1, BRAID_FLOAT64, BRAID_SUM));
    for (int r = 0; r < size; r++) w += r;
    CHECK(v == w, "host allreduce after the device calls: %g, want %g", v, w);
    OK(braid_comm_destroy(comm_));
    if (rank == 0) printf("ok: device calls without a driver on %d ranks: %s\n", size, braid_error_string(BRAID_ERR_UNSUPPORTED));
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "gpu";
    OK(braid_init(&comm_));
    OK(braid_comm_rank(comm_, &rank));
    OK(braid_comm_size(comm_, &size));
    CHECK(size <= 8, "at most 8 ranks");
    if (strcmp(mode, "nodriver") == 0)
        nodriver();
    else if (strcmp(mode, "gpu") == 0)
        gpu();
    else
        CHECK(0, "unknown mode %s", mode);
    return 0;
}
