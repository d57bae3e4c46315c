// Package shm connects ranks that are processes on one host, through shared
// memory.
//
// Each rank makes a segment, a file in /dev/shm mapped with MAP_SHARED,
// that holds one inbound ring per peer. Connect publishes the file's name
// and the rank's PID through the job's KV store, maps every peer's segment,
// and unlinks its own file as soon as every peer has mapped it, so that a
// crash leaves nothing behind. A rank killed before then (during Connect:
// a launcher's death signal does that) leaves its file; the next Connect
// on the host removes the files whose makers, processes of its PID
// namespace, are dead. The segment's pages are allocated when it is made,
// so a full /dev/shm fails Connect with ENOSPC rather than a later write
// with SIGBUS.
//
// # Messages
//
// A message of at most Options.EagerLimit bytes (64 KiB by default; BRAID_SHM_EAGER) is
// copied into the receiver's ring for this sender as one frame: a 56-byte
// header (the tag's Comm, Seq, Step and Sig, the length) and the payload.
// The sender publishes a frame by storing its mark atomically after the
// rest, and the receiver polls the mark of the next frame, so an 8-byte
// message costs the receiver one cache-line transfer. A larger message goes
// by rendezvous: the sender writes a descriptor (tag, length, the address of
// its buffer, a completion slot) and the receiver, once the matching Irecv is
// posted, copies the message straight into its buffer with
// process_vm_readv(2), then stores a completion word in the sender's
// segment. While the receiver copies, the sender's Test waits for it by
// spinning (with sched_yield now and then), not in the caller's backoff.
//
// Where the kernel refuses process_vm_readv (checked once per peer at
// Connect; BRAID_SHM_CMA=0 or Options.NoCMA force it), large messages go
// through the ring in chunks of up to 64 KiB, which the sender writes from
// Test as space frees. A Test that moved chunks of its own message keeps
// polling while they flow (for up to 5 ms, waiting up to 3 ms for the
// peer), so that a transfer does not stall between chunks in the caller's
// backoff, which resets only when a request completes.
//
// Each ring holds 256 KiB (Options.RingSize), so a segment takes 256 KiB
// per peer; up to 256 rendezvous sends (Options.Slots) per peer may be
// outstanding at once.
//
// A frame whose receive is not posted yet is copied out of the ring into an
// unexpected queue (a rendezvous descriptor is kept as it is), so the ring
// never blocks other tags; Config.Unexpected is told. An unexpected
// message's buffer grows as its chunks arrive, not to the length its first
// frame announces. Ring space is
// released as frames are consumed; a send that finds the ring full stays
// pending and Test retries it: Isend never blocks.
//
// # Progress and concurrency
//
// Progress is polling: Request.Test drains the ring, and Done returns nil.
// Isend, Irecv and Test may be called from several goroutines at once: the
// receive side of a connection is under a mutex that Test only tries to
// take, since whoever holds it drains the ring for everyone; the send side
// is under another. A small send that fits in the ring completes at once
// without allocating; a receive allocates one small request unless its
// message was already taken out of the ring. The watchdog (below) also
// drains each ring that nobody else is draining, so that a message no
// receive waits for reaches Config.Unexpected within 50 ms. Config.Unexpected
// is called with the receive side's mutex held: it must not use the Conn.
//
// # Failures
//
// A watchdog goroutine per Mesh checks every 50 ms that each peer's process
// lives (kill(pid, 0), /proc/PID/stat not a zombie, same start time) and
// reads the state word in the peer's segment. Mesh.Abort sets this rank's
// state word to aborted (and fails this rank's own pending and later
// requests with ErrAborted), and Close sets it to closed; peers see either
// at their next poll or watchdog tick. A peer's death, abort or close calls
// Config.Lost once and fails that connection's pending and later requests
// with ErrPeerLost or ErrAborted (after delivering what was already in the
// ring). Close fails this rank's pending requests with ErrClosed.
//
// # Example
//
// Every rank on the host runs (the store and the endpoints come from the
// bootstrap):
//
//	mesh, err := shm.New().Connect(ctx, transport.Config{
//		Self:   transport.Endpoint{Rank: rank, Host: host, PID: os.Getpid()},
//		Peers:  peers, // the other ranks on this host
//		World:  world,
//		Store:  store,
//		Prefix: "job42/",
//		Secret: secret,
//	})
//	if err != nil {
//		return err
//	}
//	defer mesh.Close()
//	c := mesh.Conn(peer)
//	sreq, _ := c.Isend(tag, data)
//	rreq, _ := c.Irecv(tag, buf)
//	err = transport.Wait(ctx, nil, sreq, rreq)
package shm
