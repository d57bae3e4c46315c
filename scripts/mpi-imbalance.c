/*
 * mpi-imbalance.c: MPI_Allreduce and MPI_Reduce under injected arrival
 * imbalance, drawn exactly as `braid bench --imbalance MIF` draws it, so
 * that an MPI library meets the same arrival patterns as Braid's
 * algorithms (scripts/compare-imbalance.sh runs both).
 *
 * As "Efficient Process Arrival Pattern Aware Collective Communication for
 * Deep Learning" (EuroMPI/USA 2022) §6.1 induces it, and as braid bench
 * does (internal/bench, meter.imbalanced): before each call every rank
 * computes (spins) for a time drawn uniformly from [0, MIF × α]; each call
 * is then timed alone, the compute left out, so that a rank's latency
 * includes its wait for the ranks that arrive after it. The draws come
 * from Go's math/rand/v2 PCG (PCG-DXSM, 128-bit state) seeded (seed,
 * rank), as braid bench seeds its generator, and turned into [0, 1) as
 * Go's Rand.Float64 does: the same distribution and the same seed.
 *
 * α is the paper's (§2.2, "the time it takes to communicate a message
 * (equal to the size of the message in the collective)"), measured as
 * braid bench measures it (meter.messageTime): after each size's balanced
 * phase, ranks 0 and 1 bounce one message of the size (MPI_Send and
 * MPI_Recv of MPI_BYTE; 3 round trips untimed, then 11 timed one by one),
 * α is half the median round trip, and rank 0 broadcasts it so that every
 * rank draws with the same α (the pingpong_us column). -A collective takes
 * the balanced mean latency of the collective instead (braid bench
 * --imbalance-alpha collective). With -a FILE the bound uses the α braid
 * bench used at each size (lines "bytes alpha_us", written by
 * compare-imbalance.sh from braid's CSV), so that both meet the same
 * delays; the ping-pong is still measured and reported beside it.
 *
 * Iterations: as braid bench, from a budget (-b seconds, default 0.25):
 * balanced, as many as fit after the warm-up (50 calls up to 64 KiB, 5 up
 * to 4 MiB, 2 above), at least 5, at most 20000; imbalanced, budget over
 * (the slowest rank's balanced mean + half the bound), at least 5, at most
 * 20000, every rank computing the same count from agreed figures.
 *
 * Output, one line per size: "RES,label,test,np,bytes,iters,avg_us,min_us,
 * max_us,mif,balanced_us,alpha_us,pingpong_us": avg, min and max over the
 * ranks of each rank's mean time in the call under imbalance, balanced_us
 * the ranks' average balanced mean (as braid bench's columns), alpha_us
 * the α the delays were drawn with, pingpong_us this MPI's one-way time of
 * one message of the size.
 *
 *   mpirun -np 8 ./mpi-imbalance -t allreduce -f 10 -n 8 -m 16777216
 *   mpirun -np 8 ./mpi-imbalance -t reduce -f 50 -a alpha.txt
 *   mpirun -np 8 ./mpi-imbalance -t allreduce -f 10 -A collective
 *
 * Data: float32, MPI_SUM; reduce to root 0.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Go's math/rand/v2 PCG. */
typedef struct { uint64_t hi, lo; } pcg;

static uint64_t pcg_uint64(pcg *p) {
    const unsigned __int128 mul = ((unsigned __int128)2549297995355413924ULL << 64) | 4865540595714422341ULL;
    const unsigned __int128 inc = ((unsigned __int128)6364136223846793005ULL << 64) | 1442695040888963407ULL;
    unsigned __int128 s = ((unsigned __int128)p->hi << 64) | p->lo;
    s = s * mul + inc;
    p->hi = (uint64_t)(s >> 64);
    p->lo = (uint64_t)s;
    uint64_t hi = p->hi, lo = p->lo;
    const uint64_t cheap = 0xda942042e4dd58b5ULL;
    hi ^= hi >> 32;
    hi *= cheap;
    hi ^= hi >> 48;
    hi *= (lo | 1);
    return hi;
}

static double pcg_float64(pcg *p) { return (double)(pcg_uint64(p) << 11 >> 11) / 9007199254740992.0; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile double sink;

/* busy spins for s seconds, standing in for compute (as braid bench's busy). */
static void busy(double s) {
    double end = now() + s, x = 0;
    while (now() < end)
        for (int i = 0; i < 100; i++) x += (double)i * 0.5;
    sink = x;
}

static int is_reduce;
static int call(void *in, void *out, int count) {
    if (is_reduce) return MPI_Reduce(in, out, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    return MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* pingpong returns the one-way time of one message of bytes bytes between
 * ranks 0 and 1 (half the median of 11 timed round trips after 3 untimed),
 * s, rank 0's on every rank. The other ranks wait in the broadcast. */
enum { PP_WARM = 3, PP_TRIPS = 11, PP_TAG = 0x61 };
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double pingpong(size_t bytes, int rank) {
    double alpha = 0, trips[PP_TRIPS];
    if (rank <= 1) {
        size_t n = bytes > 0 ? bytes : 1;
        char *buf = calloc(n, 1);
        for (int i = -PP_WARM; i < PP_TRIPS; i++) {
            double t0 = now();
            if (rank == 0) {
                MPI_Send(buf, (int)n, MPI_BYTE, 1, PP_TAG, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)n, MPI_BYTE, 1, PP_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, (int)n, MPI_BYTE, 0, PP_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, (int)n, MPI_BYTE, 0, PP_TAG, MPI_COMM_WORLD);
            }
            if (i >= 0) trips[i] = now() - t0;
        }
        free(buf);
        qsort(trips, PP_TRIPS, sizeof trips[0], cmpd);
        alpha = trips[PP_TRIPS / 2] / 2;
    }
    MPI_Bcast(&alpha, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return alpha;
}

static int clampi(double v) { return v < 5 ? 5 : v > 20000 ? 20000 : (int)v; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const char *label = "mpi", *test = "allreduce", *alphaf = NULL, *alphadef = "p2p";
    double mif = 10, budget = 0.25;
    uint64_t seed = 1;
    size_t minb = 8, maxb = 16 << 20;
    int opt;
    while ((opt = getopt(argc, argv, "l:t:f:s:a:A:b:n:m:h")) != -1) {
        switch (opt) {
        case 'l': label = optarg; break;
        case 't': test = optarg; break;
        case 'f': mif = atof(optarg); break;
        case 's': seed = strtoull(optarg, 0, 0); break;
        case 'a': alphaf = optarg; break;
        case 'A': alphadef = optarg; break;
        case 'b': budget = atof(optarg); break;
        case 'n': minb = strtoull(optarg, 0, 0); break;
        case 'm': maxb = strtoull(optarg, 0, 0); break;
        default:
            if (rank == 0)
                fprintf(stderr, "usage: mpi-imbalance [-l label] [-t allreduce|reduce] [-f MIF] [-s seed] [-a alphafile] [-A p2p|collective] [-b budget_s] [-n minbytes] [-m maxbytes]\n");
            MPI_Finalize();
            return 1;
        }
    }
    int collective_alpha = strcmp(alphadef, "collective") == 0;
    if (!collective_alpha && strcmp(alphadef, "p2p") != 0) {
        if (rank == 0) fprintf(stderr, "mpi-imbalance: -A %s: want p2p or collective\n", alphadef);
        MPI_Finalize();
        return 1;
    }
    if (np < 2) {
        if (rank == 0) fprintf(stderr, "mpi-imbalance: α is one message between ranks 0 and 1: run 2 ranks or more\n");
        MPI_Finalize();
        return 1;
    }
    if (strcmp(test, "reduce") == 0) is_reduce = 1;
    else if (strcmp(test, "allreduce") != 0) {
        if (rank == 0) fprintf(stderr, "mpi-imbalance: -t %s: want allreduce or reduce\n", test);
        MPI_Finalize();
        return 1;
    }
    /* Sizes: powers of two from minb to maxb, or those of the α file. */
    size_t sizes[64];
    double alphas[64];
    int ns = 0;
    if (alphaf) {
        FILE *f = fopen(alphaf, "r");
        if (!f) {
            if (rank == 0) perror(alphaf);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        unsigned long long b;
        double a;
        while (ns < 64 && fscanf(f, "%llu %lf", &b, &a) == 2) {
            if (b >= minb && b <= maxb) { sizes[ns] = b; alphas[ns] = a; ns++; }
        }
        fclose(f);
    } else {
        for (size_t b = minb; b <= maxb && ns < 64; b *= 2) { sizes[ns] = b; alphas[ns] = -1; ns++; }
    }
    pcg rng = {seed == 0 ? 1 : seed, (uint64_t)rank};
    if (rank == 0) printf("# RES,label,test,np,bytes,iters,avg_us,min_us,max_us,mif,balanced_us,alpha_us,pingpong_us\n");
    for (int k = 0; k < ns; k++) {
        size_t bytes = sizes[k];
        int count = (int)(bytes / 4);
        float *in = malloc(bytes + 64), *out = malloc(bytes + 64);
        for (int i = 0; i < count; i++) in[i] = (float)(rank + i % 7);
        memset(out, 0, bytes);
        int warm = bytes <= 64 << 10 ? 50 : bytes <= 4 << 20 ? 5 : 2;
        double t0 = now();
        for (int i = 0; i < warm; i++) call(in, out, count);
        double per = (now() - t0) / warm * 1e9, perMax;
        MPI_Allreduce(&per, &perMax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        int iters = clampi(budget * 1e9 / (perMax > 1 ? perMax : 1));
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = now();
        for (int i = 0; i < iters; i++) call(in, out, count);
        double mean = (now() - t0) / iters * 1e6, sum, mx;
        MPI_Allreduce(&mean, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&mean, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double balanced = sum / np;
        double pp = pingpong(bytes, rank) * 1e6;
        double alpha = alphas[k] > 0 ? alphas[k] : collective_alpha ? balanced : pp;
        double bound = mif * alpha * 1e3; /* ns */
        double perCall = mx * 1e3 + bound / 2;
        iters = clampi(budget * 1e9 / (perCall > 1 ? perCall : 1));
        MPI_Barrier(MPI_COMM_WORLD);
        double in_calls = 0;
        for (int i = 0; i < iters; i++) {
            busy(pcg_float64(&rng) * bound * 1e-9);
            double c0 = now();
            call(in, out, count);
            in_calls += now() - c0;
        }
        mean = in_calls / iters * 1e6;
        double mn;
        MPI_Allreduce(&mean, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&mean, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&mean, &mn, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        if (rank == 0)
            printf("RES,%s,%s,%d,%zu,%d,%.3f,%.3f,%.3f,%g,%.3f,%.3f,%.3f\n", label, test, np, bytes, iters,
                   sum / np, mn, mx, mif, balanced, alpha, pp);
        fflush(stdout);
        free(in);
        free(out);
    }
    MPI_Finalize();
    return 0;
}
