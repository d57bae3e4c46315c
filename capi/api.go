//go:build cgo

package main

// The C functions of braid.h. Each passes the calling thread's error
// record to its braidgo_ twin (export.go), so that braid_last_error, like
// errno, describes the thread's own last failure whatever other threads
// do. The record is a C thread-local: Go code that a C thread calls runs
// on that thread.

/*
#cgo CFLAGS: -std=gnu11
#include <string.h>
#include "braid.h"

// The Go functions of export.go (cgo's _cgo_export.h declares them the
// same way, but is not there yet when this preamble is compiled).
extern int braidgo_init(braid_comm *out, double timeout, braid_error *e);
extern int braidgo_get_unique_id(braid_unique_id *id, braid_error *e);
extern int braidgo_init_rank(braid_comm *out, int size, int rank, braid_unique_id *id, double timeout, braid_error *e);
extern int braidgo_comm_info(braid_comm h, int what, int *v, braid_error *e);
extern int braidgo_comm_split(braid_comm h, int color, int key, braid_comm *out, braid_error *e);
extern int braidgo_abort(braid_comm h, char *reason, braid_error *e);
extern int braidgo_comm_destroy(braid_comm h, braid_error *e);
extern int braidgo_allreduce(braid_comm h, void *send, void *recv, size_t count, int dtype, int op, braid_request *req, braid_error *e);
extern int braidgo_bcast(braid_comm h, void *buf, size_t count, int dtype, int root, braid_request *req, braid_error *e);
extern int braidgo_reduce(braid_comm h, void *send, void *recv, size_t count, int dtype, int op, int root, braid_request *req, braid_error *e);
extern int braidgo_allgather(braid_comm h, void *send, void *recv, size_t count, int dtype, braid_request *req, braid_error *e);
extern int braidgo_reduce_scatter(braid_comm h, void *send, void *recv, size_t count, int dtype, int op, braid_request *req, braid_error *e);
extern int braidgo_gather(braid_comm h, void *send, void *recv, size_t count, int dtype, int root, braid_request *req, braid_error *e);
extern int braidgo_scatter(braid_comm h, void *send, void *recv, size_t count, int dtype, int root, braid_request *req, braid_error *e);
extern int braidgo_alltoall(braid_comm h, void *send, void *recv, size_t count, int dtype, braid_request *req, braid_error *e);
extern int braidgo_barrier(braid_comm h, braid_request *req, braid_error *e);
extern int braidgo_send(braid_comm h, void *buf, size_t count, int dtype, int peer, int tag, braid_request *req, braid_error *e);
extern int braidgo_recv(braid_comm h, void *buf, size_t count, int dtype, int peer, int tag, braid_request *req, braid_error *e);
extern int braidgo_wait(braid_request h, braid_error *e);
extern int braidgo_test(braid_request h, int *done, braid_error *e);
extern int braidgo_noreq(char *name, braid_error *e);
extern int braidgo_device(int coll, braid_comm h, void *send, void *recv, size_t count, int dtype, int op, int root, void *stream, braid_error *e);
extern int braidgo_device_synchronize(braid_comm h, braid_error *e);
extern int braidgo_device_p2p(int kind, braid_comm h, void *send, size_t scount, int to, void *recv, size_t rcount, int from, int dtype, int tag, void *stream, braid_error *e);

static __thread braid_error braid_tls_error;

const braid_error *braid_last_error(void) { return &braid_tls_error; }

const char *braid_error_string(int kind) {
	switch (kind) {
	case BRAID_OK: return "success";
	case BRAID_ERR_INVALID_ARGUMENT: return "invalid argument";
	case BRAID_ERR_MISMATCH: return "mismatch between ranks";
	case BRAID_ERR_PEER_LOST: return "peer lost";
	case BRAID_ERR_TIMEOUT: return "timeout";
	case BRAID_ERR_ABORTED: return "aborted";
	case BRAID_ERR_UNSUPPORTED: return "unsupported";
	case BRAID_ERR_INTERNAL: return "internal error";
	}
	return "unknown error kind";
}

#define E (&braid_tls_error)

int braid_init(braid_comm *comm) { return braidgo_init(comm, 0, E); }
int braid_init_config(braid_comm *comm, const braid_config *cfg) {
	return braidgo_init(comm, cfg ? cfg->timeout_seconds : 0, E);
}
int braid_get_unique_id(braid_unique_id *id) { return braidgo_get_unique_id(id, E); }
int braid_init_rank(braid_comm *comm, int size, const braid_unique_id *id, int rank) {
	return braidgo_init_rank(comm, size, rank, (braid_unique_id *)id, 0, E);
}
int braid_init_rank_config(braid_comm *comm, int size, const braid_unique_id *id, int rank, const braid_config *cfg) {
	return braidgo_init_rank(comm, size, rank, (braid_unique_id *)id, cfg ? cfg->timeout_seconds : 0, E);
}
int braid_comm_rank(braid_comm c, int *v) { return braidgo_comm_info(c, 0, v, E); }
int braid_comm_size(braid_comm c, int *v) { return braidgo_comm_info(c, 1, v, E); }
int braid_comm_local_rank(braid_comm c, int *v) { return braidgo_comm_info(c, 2, v, E); }
int braid_comm_local_size(braid_comm c, int *v) { return braidgo_comm_info(c, 3, v, E); }
int braid_comm_split(braid_comm c, int color, int key, braid_comm *out) {
	return braidgo_comm_split(c, color, key, out, E);
}
int braid_abort(braid_comm c, const char *reason) { return braidgo_abort(c, (char *)reason, E); }
int braid_comm_destroy(braid_comm c) { return braidgo_comm_destroy(c, E); }

int braid_allreduce(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_op op) {
	return braidgo_allreduce(c, (void *)s, r, n, d, op, NULL, E);
}
int braid_bcast(braid_comm c, void *b, size_t n, braid_dtype d, int root) {
	return braidgo_bcast(c, b, n, d, root, NULL, E);
}
int braid_reduce(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_op op, int root) {
	return braidgo_reduce(c, (void *)s, r, n, d, op, root, NULL, E);
}
int braid_allgather(braid_comm c, const void *s, void *r, size_t n, braid_dtype d) {
	return braidgo_allgather(c, (void *)s, r, n, d, NULL, E);
}
int braid_reduce_scatter(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_op op) {
	return braidgo_reduce_scatter(c, (void *)s, r, n, d, op, NULL, E);
}
int braid_gather(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, int root) {
	return braidgo_gather(c, (void *)s, r, n, d, root, NULL, E);
}
int braid_scatter(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, int root) {
	return braidgo_scatter(c, (void *)s, r, n, d, root, NULL, E);
}
int braid_alltoall(braid_comm c, const void *s, void *r, size_t n, braid_dtype d) {
	return braidgo_alltoall(c, (void *)s, r, n, d, NULL, E);
}
int braid_barrier(braid_comm c) { return braidgo_barrier(c, NULL, E); }
int braid_send(braid_comm c, const void *b, size_t n, braid_dtype d, int peer, int tag) {
	return braidgo_send(c, (void *)b, n, d, peer, tag, NULL, E);
}
int braid_recv(braid_comm c, void *b, size_t n, braid_dtype d, int peer, int tag) {
	return braidgo_recv(c, b, n, d, peer, tag, NULL, E);
}

// The non-blocking forms: a NULL req is an error, not a blocking call.
#define NEEDREQ(call) if (!req) return braidgo_noreq((char *)call, E)

int braid_iallreduce(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_op op, braid_request *req) {
	NEEDREQ("iallreduce");
	return braidgo_allreduce(c, (void *)s, r, n, d, op, req, E);
}
int braid_ibcast(braid_comm c, void *b, size_t n, braid_dtype d, int root, braid_request *req) {
	NEEDREQ("ibcast");
	return braidgo_bcast(c, b, n, d, root, req, E);
}
int braid_ireduce(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_op op, int root, braid_request *req) {
	NEEDREQ("ireduce");
	return braidgo_reduce(c, (void *)s, r, n, d, op, root, req, E);
}
int braid_iallgather(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_request *req) {
	NEEDREQ("iallgather");
	return braidgo_allgather(c, (void *)s, r, n, d, req, E);
}
int braid_ireduce_scatter(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_op op, braid_request *req) {
	NEEDREQ("ireduce_scatter");
	return braidgo_reduce_scatter(c, (void *)s, r, n, d, op, req, E);
}
int braid_igather(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, int root, braid_request *req) {
	NEEDREQ("igather");
	return braidgo_gather(c, (void *)s, r, n, d, root, req, E);
}
int braid_iscatter(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, int root, braid_request *req) {
	NEEDREQ("iscatter");
	return braidgo_scatter(c, (void *)s, r, n, d, root, req, E);
}
int braid_ialltoall(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_request *req) {
	NEEDREQ("ialltoall");
	return braidgo_alltoall(c, (void *)s, r, n, d, req, E);
}
int braid_ibarrier(braid_comm c, braid_request *req) {
	NEEDREQ("ibarrier");
	return braidgo_barrier(c, req, E);
}
int braid_isend(braid_comm c, const void *b, size_t n, braid_dtype d, int peer, int tag, braid_request *req) {
	NEEDREQ("isend");
	return braidgo_send(c, (void *)b, n, d, peer, tag, req, E);
}
int braid_irecv(braid_comm c, void *b, size_t n, braid_dtype d, int peer, int tag, braid_request *req) {
	NEEDREQ("irecv");
	return braidgo_recv(c, b, n, d, peer, tag, req, E);
}
// The device calls: the numbers of the collectives are device.go's.
int braid_device_allreduce(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_op op, void *stream) {
	return braidgo_device(0, c, (void *)s, r, n, d, op, 0, stream, E);
}
int braid_device_bcast(braid_comm c, void *b, size_t n, braid_dtype d, int root, void *stream) {
	return braidgo_device(1, c, NULL, b, n, d, 0, root, stream, E);
}
int braid_device_reduce(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_op op, int root, void *stream) {
	return braidgo_device(2, c, (void *)s, r, n, d, op, root, stream, E);
}
int braid_device_allgather(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, void *stream) {
	return braidgo_device(3, c, (void *)s, r, n, d, 0, 0, stream, E);
}
int braid_device_reduce_scatter(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, braid_op op, void *stream) {
	return braidgo_device(4, c, (void *)s, r, n, d, op, 0, stream, E);
}
int braid_device_gather(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, int root, void *stream) {
	return braidgo_device(5, c, (void *)s, r, n, d, 0, root, stream, E);
}
int braid_device_scatter(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, int root, void *stream) {
	return braidgo_device(6, c, (void *)s, r, n, d, 0, root, stream, E);
}
int braid_device_alltoall(braid_comm c, const void *s, void *r, size_t n, braid_dtype d, void *stream) {
	return braidgo_device(7, c, (void *)s, r, n, d, 0, 0, stream, E);
}
int braid_device_synchronize(braid_comm c) { return braidgo_device_synchronize(c, E); }
// The device point-to-point calls: the numbers are device.go's.
int braid_device_send(braid_comm c, const void *b, size_t n, braid_dtype d, int peer, int tag, void *stream) {
	return braidgo_device_p2p(0, c, (void *)b, n, peer, NULL, 0, -1, d, tag, stream, E);
}
int braid_device_recv(braid_comm c, void *b, size_t n, braid_dtype d, int peer, int tag, void *stream) {
	return braidgo_device_p2p(1, c, NULL, 0, -1, b, n, peer, d, tag, stream, E);
}
int braid_device_sendrecv(braid_comm c, const void *s, size_t sn, int to, void *r, size_t rn, int from, braid_dtype d,
                          int tag, void *stream) {
	return braidgo_device_p2p(2, c, (void *)s, sn, to, r, rn, from, d, tag, stream, E);
}

int braid_wait(braid_request req) { return braidgo_wait(req, E); }
int braid_test(braid_request req, int *done) { return braidgo_test(req, done, E); }
*/
import "C"
