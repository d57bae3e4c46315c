// Package shmreg is registered host memory: buffers that a process
// allocates so that the other processes of its host can read them
// directly, without a copy into a shared staging area, and the cache
// through which a reader maps them.
//
// # Pools
//
// A process owns one Pool per job. A pool made by Create is a file under
// /dev/shm: a 64 KiB header, then the allocations, each a page-aligned
// range of the file that the owner maps with MAP_SHARED. Alloc allocates a
// range's pages when it is made (fallocate), so that a full /dev/shm fails
// Alloc with ENOSPC instead of a later access with SIGBUS; Free unmaps the
// range and gives its pages back at once (a punched hole), whatever the
// readers still have mapped. A pool made by NewMem is Go memory, for
// ranks that are goroutines of one process.
//
// Every allocation has an id, its slot in the pool's table (the lowest free
// one, so ids are reused), and a generation, a number the pool never hands
// out twice. A Ref (id, generation, the range in the file) is what the owner
// publishes to tell a reader where its data lie. The header holds, per id,
// the generation of the allocation that holds it now (zero when free), and a
// count of the frees so far.
//
// # The registration cache
//
// A reader opens each peer's pool once (Open; the file is unlinked by the
// last of the peers the owner expects to open it, or by the owner's Close,
// or, if the owner died first, by the next Create on the host), and maps
// each allocation on first use, keeping the mapping by id. Peer.Get checks
// the Ref's generation against the cached mapping's on every use: a peer
// that freed an allocation and made another with the same id (and perhaps
// the same range of its file) publishes a new generation, so the reader
// maps the new one instead of using the old. Before each lookup it compares
// the peer's count of frees with the one it last saw, and when it moved,
// drops every mapping whose id the peer's table no longer gives the cached
// generation: the cache holds at most one mapping per live allocation of
// the peer (plus those freed since the reader's last lookup).
//
// # Lifetime
//
// An allocation is valid from Alloc until Free, which fails while a
// collective has it pinned (Find) as its input: a writer holds the pin
// until every reader is done. Close closes the pool's file; the owner's
// own allocations stay mapped until they are freed.
//
// Example (the owner and a reader, in one process for brevity):
//
//	pool, _ := shmreg.Create("", secret, 1)
//	buf, _ := pool.Alloc(1 << 20)
//	ref, off, _ := pool.Find(buf[4096:])
//	peer, _ := shmreg.Open(pool.Path(), secret)
//	mem, _ := peer.Get(ref) // mem[off:] is buf[4096:]
//	pool.Unpin(ref)
//	pool.Free(buf)
package shmreg
