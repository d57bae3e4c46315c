// Package gpu runs Braid's schedules (package sched) on device buffers,
// one process per GPU, the mode users run: each rank owns one GPU, and the
// ranks of one host read each other's device memory through CUDA IPC
// mappings. It is the executor of the GPU path: the same programs that
// package exec runs over host transports (ring, recursive doubling, direct
// reduce-scatter and allgather, chains and trees, and the GPU-only one-shot
// allreduce of package algo) run here, step by step, on a CUDA stream.
//
// # How a program runs on device buffers
//
// A sched.Program is a list of steps over chunks of three buffers: In and
// Out, the caller's (device pointers), and Tmp, scratch that the executor
// provides. Each rank has one cuda.Worker (a goroutine locked to its OS
// thread, holding the device's primary context) and one stream; a call runs
// as a single closure on that worker, so that issuing a step costs driver
// calls only, no hand-off between goroutines.
//
// Data moves by pull. A Send on rank a to rank b does not move data: it
// tells b where the chunk lies in a's memory and, if earlier steps of the
// call write it, an interprocess event that a recorded on its stream behind
// those steps. The Recv or RecvReduce on b waits for that event on its own
// stream (cuStreamWaitEvent: the GPU waits, not the host), then reads the
// chunk straight out of a's memory through the IPC mapping: a Recv by the
// copy engine (cuMemcpyAsync on unified addresses), a RecvReduce by the
// reduction kernel (cuda.Ctx.Reduce) with one input in local memory and one
// in the peer's, fused with the write of the result. b then records a
// second interprocess event behind the read and tells a; a's stream waits
// for it before any later step may overwrite the chunk, so a Send is
// complete once the reader is done. Each byte crosses NVLink once, by the
// reader's engine or SMs, and no intermediate buffer is involved.
//
// A Send whose step has no dependencies reads memory that nothing in the
// call writes before it; the caller's buffers are ready when a call starts
// (the API is synchronous: work that produced them must have completed, and
// the previous call ended with a stream synchronisation), so such a Send
// carries no event and the reader starts at once.
//
// # Synchronisation: host mailboxes for messages, IPC events for ordering
//
// The notices ("chunk ready at this address, after this event" and "read
// done, after this event") travel through lock-free single-producer,
// single-consumer rings in a shared-memory file, one ring per ordered pair
// of ranks; the file is created by rank 0 and its name is passed through
// the host communicator once per communicator. A notice costs a few
// hundred nanoseconds; the executor polls its rings while it has nothing
// to issue, spinning briefly, then yielding, then sleeping in short
// intervals, and gives up when the call's context ends.
//
// Ordering between the GPUs is by CUDA interprocess events, so that the
// host never waits for the GPU inside a call: a host flag would tell a
// reader that the sender's host had issued its work, not that the GPU had
// done it, and making the sender's host wait for its GPU before every
// notice would put a device-to-host round trip (several microseconds) on
// every step of a pipeline. Device-side flags written and polled by
// kernels (stream memory operations or a spinning kernel) would save the
// event waits too; they are left for later, since the reduction kernels of
// package cuda take no flags. Events are reused safely: each ordered pair
// draws a fresh event per message within a call, and an event is recorded
// again only in a later call, once the peer has issued its wait on the
// previous record (a sender's call ends only after the reader's "read
// done" notice, which follows the reader's wait; a reader records its
// "read done" event again only after a notice of the sender's next call,
// which the sender sends after it has waited on the previous one).
// Waits are issued only for events whose record the peer has already
// issued, so the streams of the ranks can never wait in a cycle.
//
// # Buffers, IPC handles and scratch
//
// A buffer is exported the first time one of its chunks is sent: the
// executor finds the allocation that holds it (cuMemGetAddressRange), gets
// its IPC handle once, and remembers both under the allocation's buffer id
// (CU_POINTER_ATTRIBUTE_BUFFER_ID, unique for the life of the process, so
// that memory freed and allocated again at the same address is exported
// afresh). A notice carries the handle, the buffer id and the offset; the
// reader opens the handle once per (peer, buffer id) and keeps the mapping
// until the communicator closes. No collective exchange of handles is
// needed, and buffers that are never sent from are never exported.
// Scratch (Tmp) is allocated on first use and grown, never shrunk, and
// released when the communicator closes; a grown scratch keeps the smaller
// allocations alive too, since peers may hold mappings of them.
//
// # Fused steps
//
// Two patterns of the schedules are run as one kernel: a Copy followed by
// a reduction into exactly the copy's destination becomes one reduction
// that reads the copy's source (dst = src op other), and a reduction
// followed by a Copy of its result, when the copy waits for nothing else
// that is pending, writes the copy as the kernel's second destination.
// On two ranks the one-shot allreduce runs as one fused kernel and one
// copy (its last copy must wait until the peer has read the input, which
// in-place calls overwrite).
//
// # Measuring
//
// With BRAID_GPU_STATS=1 each Comm prints, when closed, where the time of
// its calls went: issuing steps (and within that, waiting for peers'
// notices), the final stream synchronisation, and the hand-off to the
// worker.
//
// A call returns when its stream has finished, which includes the waits on
// every peer's "read done" events: when it returns, the result is in Out
// and no peer reads the caller's buffers any more.
//
// Limits: one rank per GPU (a process cannot open its own IPC handles);
// all ranks on one host; a rank that dies in a call makes its peers fail
// when their context ends, not sooner.
package gpu
