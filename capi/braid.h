/*
 * braid.h: the C API of Braid, a collective communication library for
 * distributed deep learning (libbraid.so, built from the Go package
 * github.com/braid-ccl/braid/capi with `go build -buildmode=c-shared`).
 *
 * A process joins a job with braid_init (from the launcher's environment:
 * braid run, torchrun, Open MPI's mpirun, MPICH's mpiexec, srun) or
 * braid_init_rank (from a unique id that one rank made with
 * braid_get_unique_id and handed to the others, as with NCCL), then calls
 * collectives on host buffers (and on GPU memory: braid_device_allreduce
 * and the others, below):
 *
 *     braid_comm comm;
 *     if (braid_init(&comm) != BRAID_OK) {
 *         fprintf(stderr, "%s\n", braid_last_error()->message);
 *         return 1;
 *     }
 *     float grad[1024];
 *     braid_allreduce(comm, grad, grad, 1024, BRAID_FLOAT32, BRAID_SUM);
 *     braid_comm_destroy(comm);
 *
 * Every function returns BRAID_OK (0) or the kind of its error (a
 * braid_error_kind); braid_last_error then describes the error of the
 * calling thread's last failed call, as errno does: its text, its kind, the
 * rank that reports it, the call and the peer it names. No call hangs on a
 * dead peer: a call that makes no progress within BRAID_TIMEOUT (30 s by
 * default) fails with BRAID_TIMEOUT on every rank, naming the rank that
 * does not answer.
 *
 * Every rank must make the same collective calls on a communicator, in the
 * same order, with the same count, dtype, op and root; a disagreement is
 * reported as BRAID_ERR_MISMATCH. The calls of one communicator may come
 * from several threads only if every rank issues them in the same order.
 *
 * Buffers are the caller's: Braid reads send and writes recv during a
 * blocking call, and until braid_wait or braid_test reports the completion
 * of a non-blocking one; they must stay valid (and the send buffer
 * unchanged) until then. Send and recv may be the same buffer for
 * allreduce (in place). Counts are in elements of dtype.
 */
#ifndef BRAID_H
#define BRAID_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types: the same numbers as Go's braid.DType. */
typedef enum {
    BRAID_FLOAT32 = 1,
    BRAID_FLOAT64 = 2,
    BRAID_FLOAT16 = 3,  /* IEEE 754 binary16 */
    BRAID_BFLOAT16 = 4, /* float32's upper 16 bits */
    BRAID_INT8 = 5,
    BRAID_UINT8 = 6,
    BRAID_INT32 = 7,
    BRAID_UINT32 = 8,
    BRAID_INT64 = 9,
    BRAID_UINT64 = 10
} braid_dtype;

/* Reduction operators: the same numbers as Go's braid.Op. BRAID_AVG is for
 * floating-point types only, the bitwise ones for integer types only. */
typedef enum {
    BRAID_SUM = 1,
    BRAID_PROD = 2,
    BRAID_MIN = 3,
    BRAID_MAX = 4,
    BRAID_AVG = 5,
    BRAID_BAND = 6,
    BRAID_BOR = 7,
    BRAID_BXOR = 8
} braid_op;

/* Error kinds: 0 is success, the others the numbers of Go's
 * braid.ErrorKind. */
typedef enum {
    BRAID_OK = 0,
    BRAID_ERR_INVALID_ARGUMENT = 1, /* bad buffer, dtype, op, root, count or handle on this rank */
    BRAID_ERR_MISMATCH = 2,         /* ranks made different calls */
    BRAID_ERR_PEER_LOST = 3,        /* a peer died or its connection closed */
    BRAID_ERR_TIMEOUT = 4,          /* no progress within the timeout */
    BRAID_ERR_ABORTED = 5,          /* braid_abort here or on a peer, or an earlier failure */
    BRAID_ERR_UNSUPPORTED = 6,      /* valid, but not implemented here */
    BRAID_ERR_INTERNAL = 7          /* a bug in Braid */
} braid_error_kind;

/* A communicator and a non-blocking call in flight: opaque handles, never
 * 0 when valid. */
typedef uint64_t braid_comm;
typedef uint64_t braid_request;

/* The description of an error. */
typedef struct {
    int kind;           /* a braid_error_kind */
    int rank;           /* the rank that reports it, or -1 */
    int peer;           /* the peer it names (its rank in the communicator), or -1 */
    char call[32];      /* the call: "allreduce", "init", ... */
    char message[1024]; /* the whole text, as Go's Error() gives it (cut to fit) */
} braid_error;

/* A unique id: what the ranks of a job started without a launcher share
 * to find each other (the address of the job's store, served by rank 0,
 * and the job's secret). Copy it to every rank byte for byte. */
#define BRAID_UNIQUE_ID_BYTES 256
typedef struct {
    char internal[BRAID_UNIQUE_ID_BYTES];
} braid_unique_id;

/* braid_last_error returns the error of the calling thread's last failed
 * call (kind BRAID_OK if none has failed). The pointer stays valid for the
 * thread's life; the next failed call on the thread overwrites it. */
const braid_error *braid_last_error(void);

/* braid_error_string returns the name of an error kind ("peer lost"). */
const char *braid_error_string(int kind);

/* Settings of a communicator made by braid_init_config or
 * braid_init_rank_config; zero fields take Braid's defaults (and a NULL
 * config all of them). */
typedef struct {
    /* The timeout of a call that makes no progress, in seconds; 0 means
     * BRAID_TIMEOUT where set, else 30 s. */
    double timeout_seconds;
} braid_config;

/* braid_init joins the job this process was launched into (braid run,
 * torchrun, Open MPI, MPICH/PMI, Slurm; see Go's braid.Init) and returns the
 * world communicator. A process started without a launcher is a job of one
 * rank. It blocks until every rank has joined. */
int braid_init(braid_comm *comm);
int braid_init_config(braid_comm *comm, const braid_config *config);

/* braid_get_unique_id makes a fresh id on the rank that will be rank 0:
 * the store's address is this host's (BRAID_ADVERTISE_ADDR, else an address
 * its host name resolves to, else 127.0.0.1) and a free port. */
int braid_get_unique_id(braid_unique_id *id);

/* braid_init_rank joins the job of size ranks that id names, as rank rank,
 * whatever the launcher's environment says. Each process makes one such
 * call at a time (the id is handed to Braid's launcher-independent
 * bootstrap through the process's environment, which the call holds). */
int braid_init_rank(braid_comm *comm, int size, const braid_unique_id *id, int rank);
int braid_init_rank_config(braid_comm *comm, int size, const braid_unique_id *id, int rank,
                           const braid_config *config);

/* braid_comm_rank and friends describe a communicator. */
int braid_comm_rank(braid_comm comm, int *rank);
int braid_comm_size(braid_comm comm, int *size);
int braid_comm_local_rank(braid_comm comm, int *rank); /* among the ranks on this host */
int braid_comm_local_size(braid_comm comm, int *size);

/* braid_comm_split partitions comm like MPI_Comm_split: ranks that pass the
 * same color form a new communicator, ordered by key. A rank that passes
 * BRAID_UNDEFINED gets *out == 0. Every rank of comm calls it. */
#define BRAID_UNDEFINED (-1)
int braid_comm_split(braid_comm comm, int color, int key, braid_comm *out);

/* braid_abort ends the communicator (and every communicator of its job in
 * this process) from any thread: pending and later calls fail with
 * BRAID_ERR_ABORTED here and on the peers, whose errors carry reason. It
 * does not block. */
int braid_abort(braid_comm comm, const char *reason);

/* braid_comm_destroy releases the communicator. For the communicator of
 * braid_init or braid_init_rank it is collective, like MPI_Finalize: it
 * waits for every rank, and returns the job's failure if the job failed.
 * The handle is invalid afterwards, whatever it returns. */
int braid_comm_destroy(braid_comm comm);

/* The collectives, blocking: they return once this rank's part is done. */
int braid_allreduce(braid_comm comm, const void *send, void *recv, size_t count,
                    braid_dtype dtype, braid_op op);
int braid_bcast(braid_comm comm, void *buf, size_t count, braid_dtype dtype, int root);
/* recv is needed at root only (NULL elsewhere). */
int braid_reduce(braid_comm comm, const void *send, void *recv, size_t count,
                 braid_dtype dtype, braid_op op, int root);
/* recv holds size * sendcount elements. */
int braid_allgather(braid_comm comm, const void *send, void *recv, size_t sendcount,
                    braid_dtype dtype);
/* send holds size * recvcount elements; rank r gets block r of the result. */
int braid_reduce_scatter(braid_comm comm, const void *send, void *recv, size_t recvcount,
                         braid_dtype dtype, braid_op op);
/* recv (size * sendcount elements) is needed at root only. */
int braid_gather(braid_comm comm, const void *send, void *recv, size_t sendcount,
                 braid_dtype dtype, int root);
/* send (size * recvcount elements) is needed at root only. */
int braid_scatter(braid_comm comm, const void *send, void *recv, size_t recvcount,
                  braid_dtype dtype, int root);
/* send and recv hold size blocks of blockcount elements. */
int braid_alltoall(braid_comm comm, const void *send, void *recv, size_t blockcount,
                   braid_dtype dtype);
int braid_barrier(braid_comm comm);
/* Point to point: messages between two ranks with the same tag arrive in
 * order. braid_send returns once the transport has taken the data. */
int braid_send(braid_comm comm, const void *buf, size_t count, braid_dtype dtype, int peer,
               int tag);
int braid_recv(braid_comm comm, void *buf, size_t count, braid_dtype dtype, int peer, int tag);

/* The non-blocking forms start the call and return at once with a request
 * in *req, which braid_wait, or braid_test once it reports completion,
 * releases; every request must be released so. A call that cannot start
 * (a bad handle or argument) fails at once and sets *req to 0. */
int braid_iallreduce(braid_comm comm, const void *send, void *recv, size_t count,
                     braid_dtype dtype, braid_op op, braid_request *req);
int braid_ibcast(braid_comm comm, void *buf, size_t count, braid_dtype dtype, int root,
                 braid_request *req);
int braid_ireduce(braid_comm comm, const void *send, void *recv, size_t count,
                  braid_dtype dtype, braid_op op, int root, braid_request *req);
int braid_iallgather(braid_comm comm, const void *send, void *recv, size_t sendcount,
                     braid_dtype dtype, braid_request *req);
int braid_ireduce_scatter(braid_comm comm, const void *send, void *recv, size_t recvcount,
                          braid_dtype dtype, braid_op op, braid_request *req);
int braid_igather(braid_comm comm, const void *send, void *recv, size_t sendcount,
                  braid_dtype dtype, int root, braid_request *req);
int braid_iscatter(braid_comm comm, const void *send, void *recv, size_t recvcount,
                   braid_dtype dtype, int root, braid_request *req);
int braid_ialltoall(braid_comm comm, const void *send, void *recv, size_t blockcount,
                    braid_dtype dtype, braid_request *req);
int braid_ibarrier(braid_comm comm, braid_request *req);
int braid_isend(braid_comm comm, const void *buf, size_t count, braid_dtype dtype, int peer,
                int tag, braid_request *req);
int braid_irecv(braid_comm comm, void *buf, size_t count, braid_dtype dtype, int peer, int tag,
                braid_request *req);

/* braid_wait blocks until the call completes, releases the request and
 * returns the call's result. A call that has not begun in the background
 * yet runs on the calling thread, as the blocking call would, so that
 * braid_wait right after the start costs about what the blocking call
 * costs; the other calls in flight go on in the background, so requests
 * may be waited for in any order. */
int braid_wait(braid_request req);
/* braid_test sets *done to 1 and releases the request if the call has
 * completed (returning its result), else sets *done to 0 and returns
 * BRAID_OK. */
int braid_test(braid_request req, int *done);

/*
 * Device buffers: the collectives on GPU memory, every rank on one host
 * with a GPU of its own (ranks may share one, which the driver then
 * time-slices). Pointers are CUDA device pointers (CUdeviceptr, a
 * tensor's data_ptr()) of memory from cuMemAlloc or cudaMalloc, which
 * PyTorch's caching allocator uses: peers map it with CUDA IPC, which
 * cudaMallocAsync's pools and virtual memory allocations do not support.
 * Counts, roots and the NULL buffers off the root are as in the host
 * calls above; the buffers of a call, and of every device call on a
 * communicator, are on one GPU (the communicator's first device call, on
 * every rank, sets it up there: a collective step that loads Braid's
 * kernels, which takes tens of seconds where the driver compiles them for
 * a GPU that the library's binaries do not cover, and maps the peers'
 * memory).
 *
 * stream is a CUstream or cudaStream_t of that GPU's primary context (the
 * one the CUDA runtime and PyTorch use), or NULL:
 *  - A stream: the call is ordered on it, as NCCL's are. It returns once
 *    queued; the collective starts on the GPU once the work queued on
 *    stream before the call has completed, and work queued on stream
 *    after the call sees its result. The buffers must stay allocated
 *    until then. An error of the call (a peer's death, a timeout) is
 *    returned by a later device call or by braid_device_synchronize.
 *    PyTorch's default stream is the legacy default stream, whose
 *    handle 0 means "no stream" here: pass BRAID_STREAM_LEGACY for it.
 *    cudaStreamPerThread is refused (BRAID_ERR_INVALID_ARGUMENT): it names
 *    the default stream of the thread that uses it, and Braid issues its
 *    work from a thread of its own.
 *  - NULL: the call is blocking, like the host calls. It follows the
 *    work queued on the legacy default stream before it: a synchronous
 *    cudaMemcpy from pageable host memory returns before its data has
 *    landed, and the call reads it once it has. Work that wrote the
 *    buffers on any other stream must have completed (e.g. after
 *    cudaStreamSynchronize). It returns with the result in place and
 *    every device call made before it completed.
 *
 * Without a CUDA driver or GPU, the device calls fail with
 * BRAID_ERR_UNSUPPORTED (a call with count 0 succeeds: it moves
 * nothing); a pointer that is not GPU memory (host memory, say) fails
 * with BRAID_ERR_INVALID_ARGUMENT before any communication, as do buffers
 * on another GPU than the communicator's device calls run on.
 */
#define BRAID_STREAM_LEGACY ((void *)0x1) /* CU_STREAM_LEGACY, cudaStreamLegacy */

int braid_device_allreduce(braid_comm comm, const void *send, void *recv, size_t count,
                           braid_dtype dtype, braid_op op, void *stream);
int braid_device_bcast(braid_comm comm, void *buf, size_t count, braid_dtype dtype, int root,
                       void *stream);
int braid_device_reduce(braid_comm comm, const void *send, void *recv, size_t count,
                        braid_dtype dtype, braid_op op, int root, void *stream);
int braid_device_allgather(braid_comm comm, const void *send, void *recv, size_t sendcount,
                           braid_dtype dtype, void *stream);
int braid_device_reduce_scatter(braid_comm comm, const void *send, void *recv, size_t recvcount,
                                braid_dtype dtype, braid_op op, void *stream);
int braid_device_gather(braid_comm comm, const void *send, void *recv, size_t sendcount,
                        braid_dtype dtype, int root, void *stream);
int braid_device_scatter(braid_comm comm, const void *send, void *recv, size_t recvcount,
                         braid_dtype dtype, int root, void *stream);
int braid_device_alltoall(braid_comm comm, const void *send, void *recv, size_t blockcount,
                          braid_dtype dtype, void *stream);
/* braid_device_synchronize waits until every device call made on comm so
 * far has completed on the GPU, and returns the first error of those
 * calls; BRAID_OK at once if comm has made none. braid_comm_destroy does
 * it too, then releases the communicator's GPU resources. */
int braid_device_synchronize(braid_comm comm);

/*
 * Point-to-point on GPU memory: count elements of dtype at buf, to or from
 * rank peer with tag (0 <= tag < 2^31), ordered on stream as the device
 * collectives are (NULL: blocking). The rules are the host calls': the
 * messages between two ranks with one tag arrive in the order they were
 * sent, and the receive has exactly the sent count and dtype, else both
 * ends fail with BRAID_ERR_MISMATCH and nothing is written. A bad peer or
 * tag, or a pointer that is not GPU memory, fails with
 * BRAID_ERR_INVALID_ARGUMENT naming it; a peer that never makes the
 * matching call makes the call fail once its deadline passes, naming the
 * peer (with a stream: a later call or braid_device_synchronize).
 *
 * The receiver's GPU offers its buffer and the sender's copies into it,
 * so a send completes only once the peer has called the matching receive,
 * as NCCL's do: two ranks that both send first, blocking or on streams,
 * wait for each other. braid_device_sendrecv sends send (sendcount
 * elements) to rank to and receives recv (recvcount) from rank from at
 * once, which a ring or an exchange needs; send and recv must not
 * overlap.
 *
 * The communicator's first device call must be a collective, on every
 * rank: it sets up the GPU path, which a call between two ranks cannot
 * (BRAID_ERR_INVALID_ARGUMENT before that). A message of count 0 may pass
 * NULL and is still matched.
 */
int braid_device_send(braid_comm comm, const void *buf, size_t count, braid_dtype dtype, int peer, int tag,
                      void *stream);
int braid_device_recv(braid_comm comm, void *buf, size_t count, braid_dtype dtype, int peer, int tag,
                      void *stream);
int braid_device_sendrecv(braid_comm comm, const void *send, size_t sendcount, int to, void *recv,
                          size_t recvcount, int from, braid_dtype dtype, int tag, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_H */
