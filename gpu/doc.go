// Package gpu runs Braid's collectives on device buffers, one process per
// GPU, the mode users run: each rank owns one GPU, and the ranks of one
// host reach each other's device memory through CUDA IPC mappings. It is
// the executor of the GPU path. Most calls run as one fused kernel each,
// of any size; the others run the same programs (package sched) that
// package exec runs over host transports (ring, recursive doubling, direct
// reduce-scatter and allgather, chains and trees), step by step, on CUDA
// streams, through the same loop (exec.Drive).
//
// # Fused kernels
//
// When a Comm is made, every rank allocates a region of device memory
// (fused.RegionBytes: a flag per block and peer, up to 256 blocks, then two parities
// of one slot per rank, Options.SlotBytes each, 64 MiB in all by default),
// exports it and maps every peer's. A fused call is then one kernel launch
// and no host round trip (fused.Launch): each block pushes its piece
// of the data into the peers' slots with stores over NVLink, raises its
// flag in every peer's region with a system-scope release, waits until the
// peers' flags in its own region reach the round's value, and finishes
// from local memory. The kernels are:
//
//   - one-shot allreduce (algorithm "gpu_oneshot"): every rank pushes its
//     input to all and combines all inputs in rank order, so that every
//     rank gets the same bits. Small vectors (Options.LLBytes, by default
//     fused.DefaultLLBytes) travel in low-latency lines instead of slots: every
//     16-byte store carries 8 bytes of data beside two copies of the
//     call's number, so the reader waits on the data itself, and the
//     writer needs neither a fence nor a flag. On two H200s an 8-byte
//     allreduce went from 5.9 to 3.5 µs (the host's launch now bounds it);
//     the lines have their own part of the region, which nothing else
//     writes. On 3 GPUs or more, vectors above that limit and up to
//     fused.TwoShotLLMax(n) run as a two-shot in lines: chunk q goes to
//     rank q, which combines it and sends the result back, so each GPU
//     sends 2(n−1)/n of the vector instead of n−1 times it (four H200s,
//     512 KiB: 12.3 → 10.5 µs);
//   - two-shot allreduce (algorithm "direct"): chunk p is pushed to rank p,
//     which combines it and pushes the result back to all (two flag
//     exchanges a round);
//   - broadcast (a scatter from the root, then an allgather among the
//     others; the root, which reads nothing, streams a round ahead of the
//     others), allgather and reduce-scatter. A reduce-scatter whose
//     blocks are not whole 16-byte words, from fused.StrideMin a block,
//     runs staged: its n blocks copied into scratch at an aligned stride
//     (fused.Kernel.Stride, chosen from the size, so every rank stages
//     alike), the kernel there, the block copied out
//     (fusedState.strided); unstaged, every block but the first started
//     at an odd offset and was combined an element at a time. Blocks in
//     whole 8-byte words up to the one-shot's limit in lines
//     (Options.LLBytes) run in low-latency lines instead, as the
//     two-shot in lines' first half (reduce-scatter) or a push of a
//     rank's block to every peer's lines (allgather): one trip over
//     NVLink and no flag exchange. On two H200s, 16 B to 512 KiB back to
//     back, a reduce-scatter went from 6.4–7.3 to 4.9–5.5 µs a call and
//     an allgather from 7.1–7.7 to 4.6–5.6 (the host's launch now bounds
//     them); in a CUDA graph, a call of 4 KiB from 5.1 and 5.5 µs to 2.7
//     and 2.8.
//
// The planner (package braid, plan.DeviceModel) decides which calls run
// fused: Shape gives it the kernel a call would run (package gpu/fused
// shapes it: kind, grid, rounds, host share, ramp), and Call.Fused carries
// that kernel back to Run, which adds the buffers, the sequence counters
// and the wait's bound and launches it (fused.Launch).
//
// All but the one-shot are pipelined: block b owns area b of every slot,
// and the vector passes through the areas in rounds, so any size runs in
// one kernel; a block pushes the next round before it waits for and reads
// the current one. Every round has a sequence number, the call's first
// plus its index (fused.Kernel.Rounds counts the rounds), and uses the
// slots of parity seq & 1 and flags 2·seq−1 and 2·seq. The kernels keep
// the numbers themselves: a kernel reads its call's first from counters in
// this rank's device memory (fused.Kernel.Seqs, fused.SeqWords words) and
// advances them by its rounds when it ends, so that a kernel replayed
// from a CUDA graph (see below) runs new numbers like one the host
// launches; the host counts them too (fusedState.seq). Every fused kernel
// begins with griddepcontrol.wait and then lets the next kernel start, so
// fused.Launch launches it overlapped (cuda.Ctx.LaunchOverlapped,
// programmatic stream serialization) where the kernels and the driver
// allow (cuda.Ctx.KernelsOverlap; Comm.Overlapped): the GPU begins a
// kernel's blocks as the kernel ahead of it on the stream ends, and they
// wait on the GPU until it has, which takes most of the gap between two
// small kernels off the call, on a stream and in a graph. A block writes a
// parity at a peer only after seeing a flag that the peer's block raised
// once it had finished reading the round before of that parity; between
// calls, a rank's kernel ends only after every peer's blocks reached its
// last round. Flags only grow, so no second barrier is needed
// (kernels/reduce.cu argues each kernel). A flag wait is bounded by the
// call's deadline on the GPU: a block that gives up records the missing
// peer in mapped host memory, which the host reads after the stream, and
// the call fails with a timeout (TestDeviceLatePeer).
//
// Options.LLBytes sets the largest one-shot allreduce in low-latency lines,
// LL2Bytes the largest two-shot in lines, and LLBlocks the grid of a call
// in lines (default a thread per 8-byte word; 32, 64 and 128 blocks changed
// nothing on four H200s). Blocks sets the most blocks of a pipelined kernel
// (default fused.DefaultBlocks, and for large vectors 256 blocks of 256
// threads on 3 GPUs or more, 128 of 512 on 2 and for allgathers: see
// package gpu/fused), Threads their threads, MinRounds the fewest rounds
// a vector is cut into (default 1: on H200s every extra round cost about
// 10 µs of flag exchanges and bought no overlap), and BcastRamp how many
// halvings a broadcast on 3 GPUs or more cuts its last full round into
// (default fused.DefaultBcastRamp: 1 from 16 to 64 MiB, else 0); all are for
// tuning. Package braid reads them once from DeviceOptions and the
// BRAID_GPU_* variables, and New compares them across ranks
// (Options.Shared): ranks that cut a vector differently would wait for
// each other until the deadline.
//
// The kernel in low-latency lines is chosen from the size alone, which
// every rank shares; a rank whose buffers are not 8-byte aligned runs it
// on aligned scratch, with a copy in and a copy out. The sequence numbers
// stay below SeqLimit: the call that would pass it first waits for every
// rank's earlier kernels, clears the flags and lines, sets the counters to
// 1 and starts again there (resetFused), so that no flag left by a block
// that has not run for 2^30 calls reads as ahead of a wait.
//
// The broadcast above fused.BcastDirectMax on 3 GPUs or more is a scatter
// from the root and an exchange among the others, in rounds. The root
// streams up to two rounds ahead, and ends once the others have read the
// round before its last, so that its next call's first pushes overlap
// their last exchange. The others copy a round's exchanged parts out after
// pushing the next round's, through four buffers that rotate (both halves
// of a non-root's slots, which hold no part of the root's), so that no
// flag's trip between GPUs lies on a round's path: on four H200s a 64 MiB
// broadcast went from 305 to 320 GB/s (NCCL 2.28.9: 323) and 1 GiB from
// 380 to 384.
//
// # Multi-path
//
// On more than 2 GPUs the two-shot allreduce, the broadcast above
// fused.BcastDirectMax, and the pipelined reduce-scatter and allgather can
// also move a share of every round through pinned host
// memory, across PCIe, beside NVLink: the multi-path copy of Temuçin's MASc
// thesis (Queen's University 2021), done by the kernel's own loads and stores. The host region (16 MiB,
// fused.HostRegionBytes) ends the mailbox file in /dev/shm, so every rank
// maps the same pages, and every rank registers it with the driver; a
// rank that cannot (or a /dev/shm too small for it) leaves the host path
// out for all. A broadcast's root stores its host share once and every
// other rank loads it; a two-shot rank stores, for every peer, that peer's
// chunk's share, and its combined chunk's share once for all; a
// reduce-scatter rank stores each peer's block's share, an allgather rank
// its own block's share once for all. Readers use
// ld.cv, which takes nothing from caches. The share is
// Options.HostShare (percent; BRAID_GPU_HOST_SHARE, 0 for none), or by
// kind and size: as the multi-path table that braid tune --device cuda
// --multipath measured on the machine says, where the communicator has one
// (Options.MultiPath, BRAID_GPU_MULTIPATH), else fused.DefaultHostShare
// (8–11 % from 16 MiB for allreduces, from 64 MiB for broadcasts, 8 % for
// reduce-scatters from 256 MiB blocks, none for allgathers, which lost
// with every share below 1 GiB). On four H200s it took a 1 GiB allreduce
// from 343 to 372 GB/s busbw (NCCL 2.28.9: 354) and a broadcast from 342
// to 378 (NCCL: 359): NVLink alone moved about 343 GB/s out of a GPU in
// these kernels, and the bus adds 30–40 on top, as the thesis's copies found
// for a lone pair (+11 %).
//
// # Programs: pushes, notices and events
//
// Data moves by push. The receiver of a message offers a destination: its
// own buffer for a Recv, or for a RecvReduce a landing area in its scratch
// (one per step, offered when the call starts; the scratch grows to the
// bytes a rank reduces in one call). The offer is a notice with the
// allocation's IPC handle and offset and, where earlier work must finish
// first, an interprocess event. The sender's copy engine writes the chunk
// there, on a stream of its own for that peer, after the events of the
// step's dependencies on this rank; then it records an interprocess event
// and sends a "written" notice. The receiver's stream waits for that event
// (cuStreamWaitEvent: the GPU waits, not the host), and a RecvReduce then
// reduces the landing area into its destination with the reduction kernel.
// Work on the main stream that depends on a push waits for the push's
// "copy done" event; a call ends with the main stream waiting for every
// copy stream it used. Options.PushMax (and Options.Pull) selects the
// older pull protocol, where receivers read the senders' memory.
//
// Notices travel through lock-free single-producer, single-consumer rings
// in a shared-memory file, one ring per ordered pair of ranks: the shm
// transport's rings of frames (internal/shmring), a notice a frame; the
// file is created by rank 0 and its name is passed through the host
// communicator once.
//
// The loop over a program's steps is the host's: exec.Drive, with this
// package's backend (backend in run.go) doing the steps. Drive starts a
// step once the steps it depends on are done, in program order and ahead
// of it (exec.Env.Ahead: a step held by its dependencies holds back no
// later offer), polls the steps under way and the rings (backend.Poll
// drains the arrived notices and posts those that waited for room), and
// between empty polls waits as the host does, spinning briefly, then
// yielding, then sleeping in short intervals (internal/wait.Backoff with
// the phases of waitPolicy in run.go); it gives up when the call's
// deadline passes, with an exec.StepError naming the step it waited for
// (in a point-to-point call inside a PeerWaitError naming the peer). The
// backend issues what a step can: it is done once its work is queued on
// a stream, or, for a pulled Send or a pushed Recv, first posted, then
// done once the peer's answer is in; a step it runs fused with the one or
// two after it (see Fused steps) completes them with it. The fused
// kernels' reset rendezvous (resetFused) is a program of one receive
// from each peer through the same loop. Waits are issued only for
// events whose record the peer has already issued, so the streams of the
// ranks never wait in a cycle; an event is recorded again only in a later
// call, after the peer has issued its wait on the earlier record (a
// sender records a message's event again only after that call's offer
// from the same peer, which the peer posts once its waits of the call
// before are issued).
//
// Exports: a buffer is exported the first time one of its chunks is
// offered or sent; the executor finds the allocation that holds it
// (cuMemGetAddressRange), gets its IPC handle once, and remembers both
// under the allocation's buffer id (CU_POINTER_ATTRIBUTE_BUFFER_ID, unique
// for the life of the process, so that memory freed and allocated again
// at the same address is exported afresh). A peer opens a handle once per
// (peer, buffer id) and keeps the mapping until the communicator closes.
//
// Fused steps: a Copy followed by a reduction into exactly its destination
// runs as one kernel that reads the copy's source, and a reduction followed
// by a Copy of its result writes the copy as the kernel's second
// destination, once everything that copy depends on (pushes included) is
// waited for.
//
// # Point-to-point
//
// A point-to-point call (Call.P2P; DeviceComm.Send, Recv and SendRecv in
// package braid) is a program of Send and Recv steps run as above, by
// push or pull, between the two ranks it names only. It takes no sequence
// number of the Comm's: each message is numbered within its (peer, tag)
// pair, and its notices are marked noticeP2P, so the collectives of every
// rank stay in step and never take a message's notice. Its notices carry
// the end's length and type; the other end checks them before anything
// moves, and a mismatch is refused on both (SizeMismatchError), which
// leaves a lone Send or Recv's Comm usable. A Send completes once the
// peer's Recv has offered its buffer.
//
// # Calls
//
// Run is synchronous: it returns when the result is in place and no peer
// touches the caller's buffers any more. Enqueue is stream-ordered, as
// NCCL's calls are: the worker issues the call after those queued before
// it and the caller goes on; Synchronize waits for the stream and reports
// the first error. With Options.Stats each Comm prints, when closed,
// where the time of its synchronous program calls went.
//
// A synchronous fused call is launched by the worker, which queues a store
// of the call's number into mapped host memory behind the kernel; the
// caller polls that word (runPolled, poll.go). A kernel of one block (the
// calls up to 4 KiB) stores its end into such a word itself, once its
// result is in place, and the worker queues nothing behind it; only such a
// call asks its kernel to (fused.Kernel.SignalEnd): the store is a release
// at system scope, which a graph's or a stream-ordered loop's calls, that
// nobody polls, would pay for nothing. With Options.Resident a
// small allreduce in low-latency lines skips the launch too: a kernel of
// one block stays on the GPU between calls and polls a bell in host memory
// into which the caller writes the call (serve.go, kernels/serve.cuh). It
// runs only while nothing is queued on the stream, ends after
// Options.Resident without a call, and holds an SM while it waits.
//
// # CUDA graphs
//
// Between BeginCapture and EndCapture the Comm's stream captures (in
// thread-local mode, on the worker's thread): a fused call made meanwhile,
// by Run or Enqueue, is recorded into a graph with its buffers, shape and
// wait bound, and runs nothing; EndCapture instantiates the graph, and
// Graph.Launch (or Graph.Enqueue) replays every call it holds for the
// host's cost of one launch. Since the kernels take their sequence numbers
// from the counters in device memory and advance them, a replay runs new
// numbers, and replays and calls launched one by one mix in any order;
// the host adds a launch's rounds to its count (fusedState.advance), and
// resets before SeqLimit as for a call. A program cannot be captured: its
// steps are issued by the host as the peers' notices arrive, and its
// copies wait on interprocess events; Run and Enqueue refuse one during a
// capture (ErrNotCapturable) without failing the Comm, and a program whose
// stream captures from elsewhere (a caller's capturing stream it waits
// for) fails the same way. Replays of a graph that a caller captured and
// launches itself are not counted by the host, whose reset then comes
// late.
//
// # How a device call flows
//
// One allreduce on device buffers, from the API to the driver, by
// function and file (package braid is the repository's root):
//
//  1. Comm.Allreduce (collectives.go) calls Comm.collective, which sees a
//     braid.Device buffer and hands the call to Comm.deviceCall
//     (device.go). A DeviceComm's own DeviceComm.Allreduce (device.go)
//     starts at step 3.
//  2. Comm.deviceCall takes the device communicator from Comm.deviceComm
//     (device.go), which makes it on first use on the GPU that holds the
//     buffer (cuda.PointerDevice, then Comm.NewDeviceComm).
//  3. DeviceComm.collective (device.go) checks the buffers
//     (deviceParams) and asks DeviceComm.plan (device_plan.go) for the
//     call's plan, cached by collective, count, root, type and op.
//  4. DeviceComm.plan makes the candidates: each fused kernel that can run
//     the call, shaped by gpu.Comm.Shape (oneshot.go here), that is
//     fused.Config.Shape (gpu/fused/choose.go), and costed by
//     plan.DeviceModel.Cost (plan/device.go); and each schedule
//     (package algo) that supports it, costed by its algo.Coster. Where
//     the host communicator has a topology (Options.Topology, BRAID_TOPO),
//     the candidates include Blink's packed trees ("treepack" for
//     broadcast, reduce and allreduce: device_trees.go packs them over
//     the GPUs' peer paths, pack.ForCollective's "peer", and
//     algo.TreepackOnLinks costs them with their links), and the
//     narrowest route between two ranks bounds the fused kernels and the
//     flat schedules (plan.DeviceModel's CostOn and ProgramsOn). Then
//     devDecider.decide (device_plan.go) chooses: a forced candidate
//     (DeviceOptions.Algo, BRAID_ALGO), else the device tuning table's
//     (plan.Table.Choose, plan/plan.go), else the cheapest under the model
//     (plan.Default.Plan, plan/plan.go); plan.Decision.Source says which.
//     A schedule's program is generated here (Algorithm.Program). Where
//     its segment is the planner's (no option, BRAID_ALGO or table fixed
//     it) and the calls are synchronous, MIAD adapts it over the first
//     calls, as for host calls (miadScope.start decides for both;
//     device_miad.go runs the trials and agrees on their times through
//     the host communicator).
//  5. DeviceComm.collective fills a Call (comm.go here: the buffers, and
//     the plan's Fused kernel or Prog) and runs it: Comm.Run (comm.go),
//     or Comm.Enqueue where DeviceOptions.StreamOrdered is set.
//  6. Comm.Run hands a closure to the device's worker, cuda.Worker.Do
//     (cuda/worker.go), which runs it on the OS thread that holds the
//     context current; the closure is Comm.run (run.go).
//  7. Fused branch: Comm.run calls fusedState.launch (oneshot.go), which
//     counts the call's sequence numbers (resetting first where they would
//     pass SeqLimit), adds the counters, the deadline and the buffers (and stages
//     unaligned low-latency calls through scratch, fusedState.staged),
//     then fused.Launch (gpu/fused/launch.go) packs the kernel's typed
//     arguments and calls cuda.Ctx.LaunchOverlapped (cuda/module.go,
//     cuLaunchKernelEx), or cuda.Ctx.Launch (cuLaunchKernel) where the
//     kernels or the driver do not allow overlap. Unless the call is stream-ordered, Comm.run then
//     synchronizes the stream and reads the kernels' status
//     (fusedState.failed).
//  8. Schedule branch: Comm.run offers the landing areas, then
//     Comm.drive hands the program to exec.Drive (exec/exec.go), the
//     host's dependency loop, with this package's backend (run.go): each
//     step Drive starts or polls is issued by Comm.step: copies with
//     cuda.Ctx.Copy, offers and pushes through the notice rings
//     (mailbox.go), reductions with Comm.reduce (run.go), which calls
//     cuda.Ctx.Reduce (cuda/reduce.go), whose reduction kernel goes out
//     through cuda.Ctx.Launch as well. Between polls Drive waits as
//     waitPolicy says (run.go).
//
// Where the kernel choice lives: what a fused kernel would be for a call
// (kind, grid, rounds, host share, ramp) is gpu/fused's choose.go
// (Config.Shape and the defaults by kind and size) over layout.go (the
// region's layout, the kinds, what fits the slots, the low-latency lines
// and the host region); whether a call runs a fused kernel or a schedule,
// and which, is package braid's device_plan.go (DeviceComm.plan,
// devDecider, the caps of DeviceOptions), over plan.DeviceModel and the
// device tuning table. Package cuda is the binding under both: the
// driver, the worker, contexts, modules, the reduction kernel and NVML,
// 2,853 lines in its 13 non-test .go files (wc -l cuda/*.go without the
// tests), beside the kernels: kernels/reduce.cu and the 12 .cuh files,
// one per family, that it includes (1,465 lines; wc -l
// cuda/kernels/*.cu cuda/kernels/*.cuh).
//
// Limits: one rank per process (a process cannot open its own IPC
// handles); several processes may share a GPU, which the driver
// time-slices (the device tests' shared mode, BRAID_TEST_GPUS above the
// GPU count);
// all ranks on one host; at most fused.MaxRanks (8) ranks for the
// fused kernels (more run programs); a rank that dies in a call makes its
// peers fail when the call's deadline passes, not sooner.
package gpu
