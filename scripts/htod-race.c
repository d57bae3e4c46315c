/*
 * htod-race.c: does a synchronous copy from pageable host memory to the
 * GPU (cuMemcpyHtoD, on the legacy default stream) still land after it has
 * returned, so that a copy queued at once on a non-blocking stream reads
 * the buffer's old contents? CUDA's "API synchronization behavior" says
 * it may ("the DMA to final destination may not have completed"). This is
 * what capi/testdata/device.c did before session 11 in its blocking
 * calls: its staging buffer written that way, then copied to the send
 * buffer on its own non-blocking stream; the reduce that followed read a
 * peer's input of the round before from element ~3,900 of 12,345 on.
 *
 *   cc -O1 -o /tmp/htod-race scripts/htod-race.c -ldl
 *   /tmp/htod-race [COUNT] [ROUNDS]   # float32 elements (12345), rounds (2000)
 *
 * Run two at once on one GPU to share it as the C test's two ranks did.
 * For each of three ways to write the staging buffer it prints how many
 * rounds read a stale element in the copy on the non-blocking stream, and
 * the lowest first stale index seen:
 *   legacy-sync    cuMemcpyHtoD, then the copy on the stream (the old test)
 *   legacy-ctxsync cuMemcpyHtoD, cuCtxSynchronize, then the copy (control)
 *   stream-async   cuMemcpyHtoDAsync on the stream, then the copy (control)
 * The controls must read 0; the first may read more than 0 (it is a
 * race: 0 in one run does not prove it cannot happen).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
static CUresult (*cuCtxSetCurrent)(void *);
static CUresult (*cuCtxSynchronize)(void);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamSynchronize)(CUstream);

#define CU(call)                                                                                                       \
    do {                                                                                                               \
        CUresult r_ = (call);                                                                                          \
        if (r_) {                                                                                                      \
            fprintf(stderr, "%s -> CUresult %d\n", #call, r_);                                                       \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "libcuda.so.1 has no %s\n", name);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], 0, 10) : 12345;
    int rounds = argc > 2 ? atoi(argv[2]) : 2000;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "no CUDA driver: %s\n", dlerror());
        return 1;
    }
    *(void **)&cuInit = sym(lib, "cuInit");
    *(void **)&cuDeviceGet = sym(lib, "cuDeviceGet");
    *(void **)&cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
    *(void **)&cuCtxSynchronize = sym(lib, "cuCtxSynchronize");
    *(void **)&cuMemAlloc = sym(lib, "cuMemAlloc_v2");
    *(void **)&cuMemcpyHtoD = sym(lib, "cuMemcpyHtoD_v2");
    *(void **)&cuMemcpyHtoDAsync = sym(lib, "cuMemcpyHtoDAsync_v2");
    *(void **)&cuMemcpyDtoH = sym(lib, "cuMemcpyDtoH_v2");
    *(void **)&cuMemcpyDtoDAsync = sym(lib, "cuMemcpyDtoDAsync_v2");
    *(void **)&cuStreamCreate = sym(lib, "cuStreamCreate");
    *(void **)&cuStreamSynchronize = sym(lib, "cuStreamSynchronize");
    CU(cuInit(0));
    int dev;
    void *ctx;
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CUstream s;
    CU(cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */));
    CUdeviceptr stage, dst;
    size_t bytes = n * sizeof(float);
    CU(cuMemAlloc(&stage, bytes));
    CU(cuMemAlloc(&dst, bytes));
    float *in = malloc(bytes), *out = malloc(bytes);
    const char *names[3] = {"legacy-sync", "legacy-ctxsync", "stream-async"};
    int k = 0;
    for (int way = 0; way < 3; way++) {
        int stale = 0;
        size_t lowest = n;
        for (int r = 0; r < rounds; r++, k++) {
            for (size_t j = 0; j < n; j++) in[j] = (float)k;
            if (way == 2) {
                CU(cuMemcpyHtoDAsync(stage, in, bytes, s));
            } else {
                CU(cuMemcpyHtoD(stage, in, bytes));
                if (way == 1) CU(cuCtxSynchronize());
            }
            CU(cuMemcpyDtoDAsync(dst, stage, bytes, s));
            CU(cuStreamSynchronize(s));
            CU(cuMemcpyDtoH(out, dst, bytes));
            for (size_t j = 0; j < n; j++) {
                if (out[j] != (float)k) {
                    stale++;
                    if (j < lowest) lowest = j;
                    break;
                }
            }
        }
        printf("%-14s %d of %d rounds read a stale element (%zu float32); lowest first stale index %zd\n", names[way],
               stale, rounds, n, stale ? (ssize_t)lowest : (ssize_t)-1);
    }
    return 0;
}
