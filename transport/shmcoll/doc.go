// Package shmcoll runs the collectives of ranks that share one host through
// one shared-memory area, without messages: each rank writes its
// contribution once into its own part of the area, and the others read it
// from there (the "written once, read by all" design of Open MPI's XHC and
// MVAPICH's shared-memory collectives).
//
// # The area
//
// Every rank owns one block of the area. A block holds five flag lines (64
// bytes each) and four data slots of Group.Slot bytes:
//
//	line 0, 1   in[0], in[1]: the chunk number whose input is in slot in[p],
//	            the call's signature, its length, up to 40 bytes inline,
//	            and the writer's arrival stamp (Call.Arrive)
//	line 2, 3   res[0], res[1]: the chunk number whose partial result is in res[p]
//	line 4      done: the last chunk this rank finished reading
//	slots       in[0], in[1], res[0], res[1]
//	doubling    two sets of eight entries, each a flag line and 1 KiB
//	            (recursive doubling's partial results: doubling.go)
//
// Only the owner writes its block (but for the arrival words, see
// AllreducePAP). A collective moves its data in chunks of
// at most Slot bytes; every rank numbers chunks 1, 2, 3... in the same order
// (the order of the communicator's calls, which MPI's rules make the same
// everywhere), and chunk f uses parity p = f mod 2. A writer publishes a
// chunk by storing its number into the flag line after the data (a store
// with release order, storeRelease for processes; readers load it
// atomically, then read the data). Data of at most 40
// bytes travels inside the flag line, so that an 8-byte allreduce costs each
// reader one cache line per peer.
//
// A chunk of at most a quarter slot goes to a quarter part of its slot,
// (f/2) mod 4, which the chunk's flag line names, so that successive small
// chunks go round eight parts instead of two places (see part).
//
// Before a rank writes parity p for chunk f, every rank must have finished
// reading chunk f−2, the last user of p. A rank that read every other rank's
// input flag of chunk f−1 knows it without looking (a rank publishes chunk
// f−1 only after finishing f−2); otherwise it reads the others' done lines.
//
// # Algorithms
//
//   - Allreduce: up to FlatMax bytes a chunk, every rank reduces every
//     rank's input itself (one synchronisation); above, rank r reduces the
//     r-th slice of every input into its res slot and every rank copies the
//     slices out (a reduce-scatter and an allgather in shared memory, two
//     synchronisations). Both combine the inputs in rank order 0, 1, ...,
//     n−1, so every rank gets the same bits. From 16 ranks (RDRanks), and
//     on 4 and 8, a call of at most RDMax bytes (1 KiB; on 8, more than
//     a flag line holds) goes by recursive doubling instead
//     (doubling.go): ⌈log₂ n / 2⌉ rounds, in each of which a
//     rank exchanges its partial result with three partners (one in a
//     last round where log₂ n is odd) through entries of its own at the
//     end of its block; partners combine the lower ranks' part first, so
//     every rank gets the same bits, in another order than the flat one.
//   - Reduce: the same, with only the root copying out.
//   - Bcast: the root writes each chunk once; the others copy it out. A
//     call of at most a quarter slot goes to a quarter part of the slot,
//     the next call's to the next part (eight parts in turn); the chunk
//     can be set smaller than the slot (Options.BcastSeg), up to eight
//     chunks in flight. The root says in the chunk's flag line which part
//     it wrote.
//   - Allgather: every rank writes its block; every rank copies all blocks.
//     On 4, 8, 16, 32 or 64 ranks, an output of at most RDMax bytes goes
//     by recursive doubling (gatherDoubling): in each round a rank
//     exchanges the blocks it has gathered with its partners.
//   - ReduceScatter: every rank writes the chunk's part of every block; rank
//     r reduces the r-th parts in rank order. Where the whole input could
//     double (doubles), it goes in rounds among a few partners
//     (scatterDoubling): on 4, 8, 16, 32 or 64 ranks by recursive halving
//     (in each round a rank keeps the part of its partial result that its
//     digit names, reading only that part of its partners'); on others,
//     where a block is at most a line (64 bytes), as that allreduce by
//     recursive doubling, each rank keeping its block.
//   - Barrier: a chunk of no data.
//   - AllreducePAP and ReducePAP (pap.go): the arrival-aware reductions of
//     "Efficient Process Arrival Pattern Aware Collective Communication
//     for Deep Learning" (Alizadeh et al., EuroMPI/USA 2022): small chunks
//     combined by a leader as the inputs arrive (the root for a reduce;
//     an allreduce's chunks up to FlatMax are reduced flat, as above),
//     large ones along a pipelined chain in the order of arrival, whose
//     members publish their progress a segment at a time in their res
//     flag lines; the order is kept in an arrival word per chunk in rank
//     0's block (the one word of the area that every rank writes, by
//     compare-and-swap). One rank combines, so every rank gets the same
//     bits, in the order of arrival rather than of rank.
//
// # Single copy from registered memory
//
// A writer whose input lies in registered memory (package shmreg) that
// every rank can map may publish a chunk by reference instead of copying
// it into its slot: its flag line then carries the allocation's id,
// generation and range and the input's offset in it, and the readers read
// and reduce the chunk straight from the writer's memory, mapped once
// through their registration cache (which checks the generation on every
// use). The writer does not return before every rank has finished reading
// its last chunk published so. This is each writer's own decision (see
// direct.go for which chunks): ranks need not agree on it.
//
// # Single copy by address
//
// A broadcast's root or an allgather's writer in a group of two processes
// (Options.CMARanks) whose input of 16–256 KiB is not registered
// publishes its address in its process instead, and the readers copy it
// out with process_vm_readv(2) (cma.go), once every rank found that it can
// read the others' processes.
//
// Every reader compares the writer's signature of the call with its own and
// reports a mismatch (Group.Mismatch) instead of reading other arguments'
// data. A wait that ends (context, deadline, failure of the communicator)
// names the rank it waited for.
//
// The area is a file in /dev/shm made by the group's first rank (Join, or
// Make and Open), unlinked as soon as every rank mapped it, or plain
// memory for goroutine ranks (NewLocal). The file's name carries its
// maker's pid and PID namespace, so that one left by a rank killed before
// the unlinking is removed by the next area made on the host, or by a Join
// that fails.
package shmcoll
