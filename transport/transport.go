package transport

import (
	"context"
	"errors"
	"fmt"
)

// Tag identifies a message. Every frame on the wire carries it. Messages are
// matched on (Comm, Seq, Step); Sig is compared after a match and a difference
// is reported as ErrMismatch on the receiving side.
type Tag struct {
	Comm uint32 // communicator id
	Seq  uint32 // collective sequence number on the communicator, or the user's tag for point-to-point
	Step uint32 // the schedule's tag within the collective, or P2PBit|counter for point-to-point
	Sig  uint32 // signature of the call's arguments (collective, count, dtype, op, root)
}

// P2PBit marks the Step of a point-to-point message.
const P2PBit = 1 << 31

// Key returns the part of the tag that matching uses.
func (t Tag) Key() [3]uint32 { return [3]uint32{t.Comm, t.Seq, t.Step} }

func (t Tag) String() string {
	return fmt.Sprintf("comm %08x seq %d step %d", t.Comm, t.Seq, t.Step)
}

// Errors that transports return, wrapped with context (use errors.Is).
var (
	// ErrPeerLost: the peer's process died or its connection closed.
	ErrPeerLost = errors.New("peer lost")
	// ErrPeerClosed: the peer closed its mesh on purpose (a clean
	// shutdown). It wraps ErrPeerLost: requests that needed the peer fail
	// alike, but the communicator does not treat it as a failure of the job.
	ErrPeerClosed = fmt.Errorf("closed its connections: %w", ErrPeerLost)
	// ErrAborted: the peer (or this process) aborted the job.
	ErrAborted = errors.New("aborted")
	// ErrMismatch: a matched message differs in length or signature from
	// what the receiver expected, i.e. the ranks called different things.
	ErrMismatch = errors.New("mismatch between ranks")
	// ErrClosed: the Conn or Mesh was closed by this process.
	ErrClosed = errors.New("closed")
	// ErrAuth: a connection did not present the job's secret.
	ErrAuth = errors.New("authentication failed")
	// ErrCanceled: the request was withdrawn by Cancel.
	ErrCanceled = errors.New("canceled")
)

// ErrTimeout is the error of a wait that made no progress within the
// communicator's own timeout (BRAID_TIMEOUT, Options.Timeout), which
// applies to calls whose context has no deadline. It is a
// context.DeadlineExceeded (errors.Is), so that a caller testing for a
// deadline sees one; the end of the caller's context deadline is
// context.DeadlineExceeded itself, which lets an error message say which
// limit passed.
var ErrTimeout error = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string        { return "timed out" }
func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Request is an outstanding send or receive.
type Request interface {
	// Test makes whatever progress it can without blocking and reports
	// whether the request has completed. After it returns true or an error,
	// later calls return the same. Test may be called from one goroutine at
	// a time per request.
	Test() (done bool, err error)

	// Done returns a channel that is closed when the request completes (or
	// fails), for transports that complete requests asynchronously. Polling
	// transports (shm) return nil: the caller must keep calling Test.
	Done() <-chan struct{}
}

// Canceler is a Request that can be withdrawn before it completes. Every
// transport's receives implement it. Once Cancel returns, the transport
// writes nothing more into the receive's buffer: a message it had matched
// is drained and dropped as it comes, and one that arrives later is held
// as unexpected. The request then reports ErrCanceled, unless it had
// completed before. Cancel must not run concurrently with the request's
// Test.
//
// A call that fails withdraws its requests before it returns (exec does,
// and so do the point-to-point calls), so that no transport writes into
// the caller's buffers after the call has returned.
type Canceler interface {
	Cancel()
}

// Cancel withdraws req if its transport can (Canceler); see Canceler.
func Cancel(req Request) {
	if c, ok := req.(Canceler); ok {
		c.Cancel()
	}
}

// Holder is implemented by meshes that can count the messages they hold
// for receives not yet posted: a diagnostic, with which tests show that a
// protocol leaves nothing behind.
type Holder interface {
	// Held returns the number of messages (or parts of messages) that
	// arrived and wait for their receive.
	Held() int
}

// Conn is a connection to one peer.
//
// Isend and Irecv may be called from several goroutines at once. Two sends
// with the same Tag to the same peer are not allowed while the first is
// outstanding. Messages with different tags may be received in any order;
// a message that arrives before its Irecv is held (copied, or for large
// messages, held by reference until received) until one is posted.
type Conn interface {
	// Peer returns the peer's world rank.
	Peer() int

	// Isend starts sending data under tag. The transport may read data until
	// the request completes; the caller must not modify it before then.
	// A zero-length message is valid.
	Isend(tag Tag, data []byte) (Request, error)

	// Irecv posts a receive of the message with tag into buf. The message
	// must have exactly len(buf) bytes and tag.Sig; otherwise the request
	// fails with ErrMismatch.
	Irecv(tag Tag, buf []byte) (Request, error)
}

// Mesh is one process's set of connections made by one Transport.
type Mesh interface {
	// Conn returns the connection to world rank peer, or nil if this mesh
	// does not reach it.
	Conn(peer int) Conn

	// Abort tells every peer that this process gave up with err; their
	// pending and later requests fail with ErrAborted, and their Lost
	// callback is called. It does not block.
	Abort(err error)

	// Close releases the mesh's resources; pending requests fail with
	// ErrClosed. Close does not wait for peers.
	Close() error
}

// KV is the key-value store ranks use to exchange addresses during Connect.
// bootstrap's stores implement it.
type KV interface {
	// Set stores value under key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value under key, waiting until it is set or ctx ends.
	Get(ctx context.Context, key string) ([]byte, error)
}

// Endpoint describes one rank for connection set-up.
type Endpoint struct {
	Rank int    // world rank
	Host string // host identity: ranks with equal Host share memory
	PID  int    // process id (for liveness checks and single-copy access)
}

// Config is what Connect needs.
type Config struct {
	Self   Endpoint
	Peers  []Endpoint // the ranks to connect to, excluding Self, in rank order
	World  int        // number of ranks in the job
	Store  KV
	Prefix string // key prefix for this job and transport in Store
	Secret []byte // the job's secret; connections without it are refused

	// Lost is called (from any goroutine, at most once per peer) when the
	// transport learns that peer died, closed, or aborted. err wraps
	// ErrPeerLost or ErrAborted. May be nil.
	Lost func(peer int, err error)

	// Unexpected, if not nil, is called (from any goroutine) with the
	// sender's world rank and the tag of each message that arrives before
	// its Irecv is posted. The
	// communicator uses it to notice ranks whose calls disagree even when
	// no message of theirs is ever matched. It must not block.
	Unexpected func(peer int, tag Tag)
}

// Transport makes Meshes.
type Transport interface {
	// Name returns the transport's name ("shm", "tcp", "inproc").
	Name() string
	// CanConnect reports whether this transport can connect a and b.
	CanConnect(a, b Endpoint) bool
	// Connect connects cfg.Self to every rank in cfg.Peers. Every rank in
	// the job that uses this transport calls Connect at the same time with
	// consistent configs; Connect returns when all connections are up, or
	// with an error when ctx ends first.
	Connect(ctx context.Context, cfg Config) (Mesh, error)
}
