// latency.c: the per-call time of braid_allreduce against
// braid_iallreduce + braid_wait on the same thread, and against
// braid_iallreduce handed to a second thread that waits (as a completion
// thread does), float32 sum in place, sizes doubling from 8 B to 4 MiB.
// Rank 0 prints the median over rounds of each round's mean.
//
//   go build -buildmode=c-shared -o bin/libbraid.so ./capi
//   cc -O2 -o bin/latency capi/testdata/latency.c -I capi -L bin -lbraid -Wl,-rpath,'$ORIGIN' -lpthread
//   braid run -n 2 -- bin/latency [MAXBYTES [BUDGET_S [GAP_US [MINBYTES]]]]
//
// PyTorch's all_reduce of a CPU tensor through the extension (torch/csrc)
// makes the calls of its blocking column up to 64 KiB and of its i+wait
// column above: in place, on one buffer of the C heap, back to back.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "braid.h"

static braid_comm comm;

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void check(int rc, const char *what) {
	if (rc != BRAID_OK) {
		fprintf(stderr, "%s: %s\n", what, braid_last_error()->message);
		exit(1);
	}
}

// A one-slot queue to the waiter thread.
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static braid_request slot;
static int full, doneFlag, stop;

static void *waiter(void *arg) {
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&mu);
		while (!full && !stop) pthread_cond_wait(&cv, &mu);
		if (stop) {
			pthread_mutex_unlock(&mu);
			return NULL;
		}
		braid_request r = slot;
		full = 0;
		pthread_mutex_unlock(&mu);
		check(braid_wait(r), "wait (thread)");
		pthread_mutex_lock(&mu);
		doneFlag = 1;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&mu);
	}
}

static double gap;  // seconds of busy work before each call, as a framework's own time per call

static void call(int mode, float *x, size_t n) {
	braid_request r;
	if (gap > 0) {
		double t = now();
		while (now() - t < gap) {
		}
	}
	switch (mode) {
	case 0:
		check(braid_allreduce(comm, x, x, n, BRAID_FLOAT32, BRAID_SUM), "allreduce");
		break;
	case 1:
		check(braid_iallreduce(comm, x, x, n, BRAID_FLOAT32, BRAID_SUM, &r), "iallreduce");
		check(braid_wait(r), "wait");
		break;
	case 2:
		check(braid_iallreduce(comm, x, x, n, BRAID_FLOAT32, BRAID_SUM, &r), "iallreduce");
		pthread_mutex_lock(&mu);
		slot = r;
		full = 1;
		doneFlag = 0;
		pthread_cond_broadcast(&cv);
		while (!doneFlag) pthread_cond_wait(&cv, &mu);
		pthread_mutex_unlock(&mu);
		break;
	}
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	size_t maxBytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 4 << 20;
	double budget = argc > 2 ? atof(argv[2]) : 0.05;
	gap = argc > 3 ? atof(argv[3]) * 1e-6 : 0;
	size_t minBytes = argc > 4 ? strtoull(argv[4], NULL, 10) : 8;
	enum { rounds = 7 };
	check(braid_init(&comm), "init");
	int rank;
	check(braid_comm_rank(comm, &rank), "rank");
	pthread_t th;
	pthread_create(&th, NULL, waiter, NULL);
	if (rank == 0) printf("%8s %12s %12s %12s   (us per call, median of %d rounds)\n", "bytes", "blocking", "i+wait", "i+thread", rounds);
	for (size_t b = minBytes < 4 ? 4 : minBytes; b <= maxBytes; b *= 2) {
		size_t n = b / 4 ? b / 4 : 1;
		float *x = calloc(n, sizeof *x);
		double res[3];
		// Calls per round from one blocking call's time.
		double t0 = now();
		call(0, x, n);
		double one = now() - t0;
		double tm = one;
		check(braid_allreduce(comm, &tm, &tm, 1, BRAID_FLOAT64, BRAID_MAX), "calibrate");
		int calls = (int)(budget / rounds / (tm > 1e-6 ? tm : 1e-6));
		if (calls < 1) calls = 1;
		if (calls > 20000) calls = 20000;
		for (int mode = 0; mode < 3; mode++) {
			double t[rounds];
			for (int k = 0; k < rounds; k++) {
				check(braid_barrier(comm), "barrier");
				t0 = now();
				for (int i = 0; i < calls; i++) call(mode, x, n);
				t[k] = (now() - t0) / calls;
				check(braid_allreduce(comm, &t[k], &t[k], 1, BRAID_FLOAT64, BRAID_MAX), "max");
			}
			qsort(t, rounds, sizeof t[0], cmp);
			res[mode] = t[rounds / 2];
		}
		if (rank == 0) printf("%8zu %12.2f %12.2f %12.2f\n", b, res[0] * 1e6, res[1] * 1e6, res[2] * 1e6);
		fflush(stdout);
		free(x);
	}
	pthread_mutex_lock(&mu);
	stop = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	pthread_join(th, NULL);
	check(braid_comm_destroy(comm), "destroy");
	return 0;
}
