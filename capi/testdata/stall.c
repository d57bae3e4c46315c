// stall.c: how long a quick call into Braid (braid_comm_size) takes on one
// thread while a collective on another thread waits for a late peer, as a
// framework's caller issues a call while its completion thread waits.
// Rank 1 enters each round's 1 MiB allreduce 50 ms late; rank 0 prints the
// mean and worst time of 40 quick calls made meanwhile. Where Init lowered
// GOMAXPROCS to 1 (as many ranks as cores), the quick calls wait for the
// collective's thread to sleep or end (milliseconds); GOMAXPROCS=2 in the
// environment avoids that, at a cost elsewhere (docs/PERFORMANCE.md, issue 20).
//
//   go build -buildmode=c-shared -o bin/libbraid.so ./capi
//   cc -O2 -o bin/stall capi/testdata/stall.c -I capi -L bin -lbraid -Wl,-rpath,'$ORIGIN' -lpthread
//   braid run -n 2 -- bin/stall
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "braid.h"

static braid_comm comm;
static float buf[1 << 18];

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *allreduce(void *arg) {
	(void)arg;
	if (braid_allreduce(comm, buf, buf, 1 << 18, BRAID_FLOAT32, BRAID_SUM) != BRAID_OK) {
		fprintf(stderr, "allreduce: %s\n", braid_last_error()->message);
		exit(1);
	}
	return NULL;
}

int main(void) {
	int rank;
	if (braid_init(&comm) != BRAID_OK || braid_comm_rank(comm, &rank) != BRAID_OK) {
		fprintf(stderr, "init: %s\n", braid_last_error()->message);
		return 1;
	}
	for (int round = 0; round < 3; round++) {
		braid_barrier(comm);
		if (rank == 1) {
			usleep(50000);
			allreduce(NULL);
			continue;
		}
		pthread_t t;
		pthread_create(&t, NULL, allreduce, NULL);
		usleep(2000);
		double worst = 0, sum = 0;
		enum { calls = 40 };
		for (int i = 0; i < calls; i++) {
			int size;
			double t0 = now();
			braid_comm_size(comm, &size);
			double d = now() - t0;
			if (d > worst) worst = d;
			sum += d;
			usleep(1000);
		}
		pthread_join(t, NULL);
		printf("round %d: quick calls while a collective waits: mean %.1f us, worst %.1f us\n", round,
		       sum / calls * 1e6, worst * 1e6);
	}
	return braid_comm_destroy(comm) != BRAID_OK;
}
