/*
 * smoke.c: Braid's C API from C, under `braid run -n N -- ./smoke [MODE]`.
 *
 * MODE "all" (the default) runs every collective, blocking and not, on
 * several dtypes and ops and checks every element; splits the
 * communicator; joins a second job through a unique id that rank 0 makes
 * and broadcasts; and checks the errors of bad arguments, last. MODE
 * "abort": the last rank aborts while the others wait in an allreduce,
 * which must fail on them with BRAID_ERR_ABORTED carrying the reason. Prints "ok" on rank 0 at the end;
 * exits 1 with the failed check otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"

static int rank, size;

#include "check.h"

/* Element i of rank r's input, small enough that sums are exact. */
static double val(int r, size_t i) { return (double)((r + 1) * 3 + (i % 7)); }

static void allreduce_types(braid_comm c, size_t n) {
    float *f = malloc(n * sizeof *f);
    double *d = malloc(n * sizeof *d);
    int64_t *l = malloc(n * sizeof *l);
    int32_t *w = malloc(n * sizeof *w);
    uint8_t *b = malloc(n + 1);
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        f[i] = (float)val(rank, i);
        d[i] = val(rank, i);
        l[i] = (int64_t)val(rank, i) * (rank % 2 ? -1 : 1);
        w[i] = 1 << (rank % 31);
        b[i] = (uint8_t)(rank * 10 + i % 5);
        h[i] = 0x3c00; /* 1.0 in binary16 */
    }
    OK(braid_allreduce(c, f, f, n, BRAID_FLOAT32, BRAID_SUM));
    OK(braid_allreduce(c, d, d, n, BRAID_FLOAT64, BRAID_MAX));
    OK(braid_allreduce(c, l, l, n, BRAID_INT64, BRAID_MIN));
    OK(braid_allreduce(c, w, w, n, BRAID_INT32, BRAID_BOR));
    OK(braid_allreduce(c, b, b, n, BRAID_UINT8, BRAID_MAX));
    OK(braid_allreduce(c, h, h, n, BRAID_FLOAT16, BRAID_SUM));
    for (size_t i = 0; i < n; i++) {
        double sum = 0, max = -1e300;
        int64_t min = INT64_MAX;
        int32_t or = 0;
        uint8_t bmax = 0;
        for (int r = 0; r < size; r++) {
            sum += val(r, i);
            max = val(r, i) > max ? val(r, i) : max;
            int64_t x = (int64_t)val(r, i) * (r % 2 ? -1 : 1);
            min = x < min ? x : min;
            or |= 1 << (r % 31);
            uint8_t y = (uint8_t)(r * 10 + i % 5);
            bmax = y > bmax ? y : bmax;
        }
        CHECK(f[i] == (float)sum, "float32 sum [%zu] = %g, want %g", i, f[i], sum);
        CHECK(d[i] == max, "float64 max [%zu] = %g, want %g", i, d[i], max);
        CHECK(l[i] == min, "int64 min [%zu] = %lld, want %lld", i, (long long)l[i], (long long)min);
        CHECK(w[i] == or, "int32 bor [%zu] = %d, want %d", i, w[i], or);
        CHECK(b[i] == bmax, "uint8 max [%zu] = %d, want %d", i, b[i], bmax);
    }
    /* size × 1.0 in binary16, for size ≤ 16: exponent 15 + log2. */
    if (n > 0 && size == 2)
        CHECK(h[0] == 0x4000, "float16 sum = %#x, want 0x4000 (2.0)", h[0]);
    if (n > 0 && size == 3)
        CHECK(h[0] == 0x4200, "float16 sum = %#x, want 0x4200 (3.0)", h[0]);
    free(f), free(d), free(l), free(w), free(b), free(h);
}

static void rooted(braid_comm c, size_t n) {
    int root = size - 1;
    float *buf = malloc((n + 1) * sizeof *buf);
    float *all = malloc((n * size + 1) * sizeof *all);
    float *mine = malloc((n + 1) * sizeof *mine);

    for (size_t i = 0; i < n; i++) buf[i] = rank == root ? (float)val(root, i) : -1;
    OK(braid_bcast(c, buf, n, BRAID_FLOAT32, root));
    for (size_t i = 0; i < n; i++) CHECK(buf[i] == (float)val(root, i), "bcast [%zu] = %g", i, buf[i]);

    for (size_t i = 0; i < n; i++) buf[i] = (float)val(rank, i);
    OK(braid_reduce(c, buf, rank == root ? mine : NULL, n, BRAID_FLOAT32, BRAID_SUM, root));
    if (rank == root)
        for (size_t i = 0; i < n; i++) {
            double sum = 0;
            for (int r = 0; r < size; r++) sum += val(r, i);
            CHECK(mine[i] == (float)sum, "reduce [%zu] = %g, want %g", i, mine[i], sum);
        }

    OK(braid_gather(c, buf, rank == root ? all : NULL, n, BRAID_FLOAT32, root));
    if (rank == root)
        for (int r = 0; r < size; r++)
            for (size_t i = 0; i < n; i++)
                CHECK(all[r * n + i] == (float)val(r, i), "gather [%d][%zu] = %g", r, i, all[r * n + i]);

    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < n; i++) all[r * n + i] = (float)val(r, i) * 2;
    OK(braid_scatter(c, rank == root ? all : NULL, mine, n, BRAID_FLOAT32, root));
    for (size_t i = 0; i < n; i++) CHECK(mine[i] == (float)val(rank, i) * 2, "scatter [%zu] = %g", i, mine[i]);
    free(buf), free(all), free(mine);
}

static void everyone(braid_comm c, size_t n) {
    int32_t *send = malloc((n * size + 1) * sizeof *send);
    int32_t *recv = malloc((n * size + 1) * sizeof *recv);

    for (size_t i = 0; i < n; i++) send[i] = rank * 1000 + (int32_t)i;
    OK(braid_allgather(c, send, recv, n, BRAID_INT32));
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < n; i++)
            CHECK(recv[r * n + i] == r * 1000 + (int32_t)i, "allgather [%d][%zu] = %d", r, i, recv[r * n + i]);

    for (int b = 0; b < size; b++)
        for (size_t i = 0; i < n; i++) send[b * n + i] = rank + b * 100 + (int32_t)i;
    OK(braid_reduce_scatter(c, send, recv, n, BRAID_INT32, BRAID_SUM));
    for (size_t i = 0; i < n; i++) {
        int32_t want = 0;
        for (int r = 0; r < size; r++) want += r + rank * 100 + (int32_t)i;
        CHECK(recv[i] == want, "reduce_scatter [%zu] = %d, want %d", i, recv[i], want);
    }

    for (int b = 0; b < size; b++)
        for (size_t i = 0; i < n; i++) send[b * n + i] = rank * 100 + b * 10 + (int32_t)i;
    OK(braid_alltoall(c, send, recv, n, BRAID_INT32));
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < n; i++)
            CHECK(recv[r * n + i] == r * 100 + rank * 10 + (int32_t)i, "alltoall [%d][%zu] = %d", r, i, recv[r * n + i]);
    OK(braid_barrier(c));
    free(send), free(recv);
}

static void nonblocking(braid_comm c) {
    enum { N = 1 << 16 };
    static float a[N], b[N];
    static int64_t ring_out, ring_in;
    for (int i = 0; i < N; i++) a[i] = (float)val(rank, i), b[i] = rank == 0 ? 7 : 0;
    braid_request ra, rb, rs, rr, rbar;
    OK(braid_iallreduce(c, a, a, N, BRAID_FLOAT32, BRAID_SUM, &ra));
    CHECK(ra != 0, "iallreduce gave request 0");
    OK(braid_ibcast(c, b, N, BRAID_FLOAT32, 0, &rb));
    ring_out = rank;
    OK(braid_irecv(c, &ring_in, 1, BRAID_INT64, (rank + size - 1) % size, 5, &rr));
    OK(braid_isend(c, &ring_out, 1, BRAID_INT64, (rank + 1) % size, 5, &rs));
    int done = 0;
    while (!done) OK(braid_test(ra, &done));
    CHECK(braid_test(ra, &done) == BRAID_ERR_INVALID_ARGUMENT, "a released request tested again");
    OK(braid_wait(rb));
    OK(braid_wait(rs));
    OK(braid_wait(rr));
    OK(braid_ibarrier(c, &rbar));
    OK(braid_wait(rbar));
    for (int i = 0; i < N; i++) {
        double sum = 0;
        for (int r = 0; r < size; r++) sum += val(r, i);
        CHECK(a[i] == (float)sum, "iallreduce [%d] = %g, want %g", i, a[i], sum);
        CHECK(b[i] == 7, "ibcast [%d] = %g", i, b[i]);
    }
    CHECK(ring_in == (rank + size - 1) % size, "irecv got %lld", (long long)ring_in);
}

static void errors(braid_comm c) {
    float x[4] = {0};
    int rc = braid_allreduce(c, x, x, 4, (braid_dtype)99, BRAID_SUM);
    const braid_error *e = braid_last_error();
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && e->kind == rc, "bad dtype -> %d", rc);
    CHECK(e->rank == rank && strstr(e->message, "dtype 99") && strcmp(e->call, "allreduce") == 0,
          "bad dtype's error: rank %d call %s: %s", e->rank, e->call, e->message);
    rc = braid_allreduce(c, NULL, x, 4, BRAID_FLOAT32, BRAID_SUM);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && strstr(braid_last_error()->message, "NULL"), "NULL send -> %d: %s", rc,
          braid_last_error()->message);
    rc = braid_barrier(12345);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && strstr(braid_last_error()->message, "handle"), "bad handle -> %d: %s", rc,
          braid_last_error()->message);
    braid_comm none;
    braid_config neg = {.timeout_seconds = -1};
    rc = braid_init_config(&none, &neg);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && none == 0 && strstr(braid_last_error()->message, "timeout"),
          "negative timeout -> %d: %s", rc, braid_last_error()->message);
    rc = braid_iallreduce(c, x, x, 4, BRAID_FLOAT32, BRAID_SUM, NULL);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT, "NULL request -> %d", rc);
    CHECK(strcmp(braid_error_string(BRAID_ERR_PEER_LOST), "peer lost") == 0, "%s", braid_error_string(3));
    /* The errors above are the C API's; those below Braid's own, after
     * which the communicator has failed. */
    rc = braid_allreduce(c, x, x, 4, BRAID_INT32, BRAID_AVG);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && strstr(braid_last_error()->message, "avg"), "avg of int32 -> %d: %s", rc,
          braid_last_error()->message);
    rc = braid_barrier(c);
    CHECK(rc != BRAID_OK, "a barrier after a failure succeeded");
}

static void split(braid_comm c) {
    braid_comm half;
    OK(braid_comm_split(c, rank % 2, -rank, &half));
    int hr, hs;
    OK(braid_comm_rank(half, &hr));
    OK(braid_comm_size(half, &hs));
    CHECK(hs == (size + 1 - rank % 2) / 2, "split size %d", hs);
    int64_t v = rank, sum = 0;
    OK(braid_allreduce(half, &v, &v, 1, BRAID_INT64, BRAID_SUM));
    for (int r = rank % 2; r < size; r += 2) sum += r;
    CHECK(v == sum, "allreduce on the split: %lld, want %lld", (long long)v, (long long)sum);
    OK(braid_comm_destroy(half));
}

static void unique_id(braid_comm c) {
    braid_unique_id id;
    memset(&id, 0, sizeof id);
    if (rank == 0) OK(braid_get_unique_id(&id));
    OK(braid_bcast(c, &id, sizeof id, BRAID_UINT8, 0));
    braid_comm job2;
    int r2 = size - 1 - rank; /* reversed ranks in the second job */
    braid_config cfg = {.timeout_seconds = 20};
    OK(braid_init_rank_config(&job2, size, &id, r2, &cfg));
    int got;
    OK(braid_comm_rank(job2, &got));
    CHECK(got == r2, "rank %d in the id's job, want %d", got, r2);
    double v = r2, want = 0;
    OK(braid_allreduce(job2, &v, &v, 1, BRAID_FLOAT64, BRAID_SUM));
    for (int r = 0; r < size; r++) want += r;
    CHECK(v == want, "allreduce in the id's job: %g, want %g", v, want);
    OK(braid_comm_destroy(job2));

    braid_unique_id bad;
    memset(&bad, 'x', sizeof bad);
    int rc = braid_init_rank(&job2, size, &bad, rank);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT && job2 == 0, "init from a bad id -> %d", rc);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    braid_comm c;
    OK(braid_init(&c));
    OK(braid_comm_rank(c, &rank));
    OK(braid_comm_size(c, &size));
    if (strcmp(mode, "abort") == 0) {
        if (rank == size - 1) {
            OK(braid_abort(c, "smoke test gives up"));
            braid_comm_destroy(c);
            return 0;
        }
        float x[16] = {0};
        int rc = braid_allreduce(c, x, x, 16, BRAID_FLOAT32, BRAID_SUM);
        const braid_error *e = braid_last_error();
        CHECK(rc == BRAID_ERR_ABORTED, "allreduce during an abort -> %d: %s", rc, e->message);
        CHECK(strstr(e->message, "smoke test gives up") != NULL, "the error does not carry the reason: %s", e->message);
        printf("rank %d: %s (peer %d)\n", rank, e->message, e->peer);
        braid_comm_destroy(c);
        return 0;
    }
    size_t counts[] = {0, 1, 7, 1000, 100000};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        allreduce_types(c, counts[k]);
        rooted(c, counts[k]);
        everyone(c, counts[k]);
    }
    nonblocking(c);
    split(c);
    unique_id(c);
    errors(c); /* last: an error that Braid finds fails the communicator */
    int rc = braid_comm_destroy(c);
    CHECK(rc == BRAID_ERR_INVALID_ARGUMENT || rc == BRAID_ERR_ABORTED, "destroy after the bad arguments -> %d: %s", rc,
          braid_last_error()->message);
    if (rank == 0) printf("ok: %d ranks\n", size);
    return 0;
}
