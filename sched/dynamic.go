package sched

// Dynamic is an algorithm that decides as messages arrive, so that it has
// no schedule fixed in advance: the process-arrival-pattern-aware
// collectives ("Efficient Process Arrival Pattern Aware Collective
// Communication for Deep Learning", Alizadeh et al., EuroMPI/USA 2022),
// whose ranks learn at run time in which order they arrived. The executor
// runs it against its primitives (Exec); it is the exception, schedules
// the rule.
//
// What the validator and the simulator can see of it, Trace gives: once
// the order of arrival is known, a Dynamic algorithm's data movement is a
// schedule like any other. Run must move exactly the data of Trace(p, rank,
// order) for the order it learns (it may add control messages of its own,
// which Trace leaves out).
type Dynamic interface {
	// TmpLen returns the elements of scratch (Buf Tmp) rank needs.
	TmpLen(p Params, rank int) int
	// Run runs rank's part of the call through x.
	Run(p Params, rank int, x Exec) error
	// Trace returns rank's program when the ranks arrive in order
	// (order[k] is the k-th rank to arrive; a permutation of the ranks).
	Trace(p Params, rank int, order []int) Program
}

// Handle names one request of an Exec.
type Handle int32

// Exec is what the executor offers a Dynamic algorithm: non-blocking
// messages over chunks of the call's buffers (as a Program's steps move
// them), one-word control messages, waits and local reductions. Tags are
// the algorithm's, like a Step's; a message's tag and its peer match it
// with the peer's. A failed request reports its error from Wait, WaitAny
// or Test, naming the peer.
type Exec interface {
	Send(peer int, tag int32, src Chunk) Handle
	Recv(peer int, tag int32, dst Chunk) Handle
	// RecvReduce receives a chunk and combines it into dst (dst = dst op
	// received) when it completes.
	RecvReduce(peer int, tag int32, dst Chunk) Handle
	// SendWord and RecvWord exchange one 64-bit word; Word returns a
	// completed RecvWord's.
	SendWord(peer int, tag int32, v uint64) Handle
	RecvWord(peer int, tag int32) Handle
	Word(h Handle) uint64
	// Test reports whether h completed, without waiting.
	Test(h Handle) (bool, error)
	// Wait waits until h completes.
	Wait(h Handle) error
	// WaitAny waits until one of hs completes and returns its index in
	// hs; hs must not be empty.
	WaitAny(hs []Handle) (int, error)
	// Copy and Reduce are the steps of the same names: dst = src, and
	// dst = dst op src.
	Copy(src, dst Chunk)
	Reduce(src, dst Chunk)
}
