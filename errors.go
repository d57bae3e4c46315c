package braid

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/shmcoll"
)

// ErrorKind classifies an *Error.
type ErrorKind uint8

// The kinds of error a call can return.
const (
	// InvalidArgument: a bad buffer, dtype, op, root or count on this rank.
	InvalidArgument ErrorKind = iota + 1
	// Mismatch: ranks called different collectives, or with different
	// counts, dtypes, ops, roots or algorithms (see "Disagreeing ranks" in
	// the package documentation).
	Mismatch
	// PeerLost: a peer process died or its connection closed.
	PeerLost
	// Timeout: the call did not finish within its deadline (BRAID_TIMEOUT).
	Timeout
	// Aborted: Abort was called, here or on a peer, or the communicator
	// failed earlier.
	Aborted
	// Unsupported: the request is valid but cannot be served here: it is
	// not implemented, or this machine lacks what it needs (GPU memory
	// without a CUDA driver; a /dev/shm with no room for the ranks'
	// shared memory, ENOSPC).
	Unsupported
	// Internal: a bug in Braid.
	Internal
)

var kindNames = [...]string{"", "invalid argument", "mismatch between ranks", "peer lost", "timeout", "aborted", "unsupported", "internal error"}

func (k ErrorKind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Error is the error every Braid call returns. It names the rank that
// reports it, the call, and where known the peer concerned.
type Error struct {
	Kind ErrorKind
	Rank int    // the reporting rank in the communicator; -1 before it is known
	Call string // "allreduce", "send", "init", ...
	Peer int    // the peer concerned, or -1: its rank in the communicator
	Err  error  // the underlying cause

	// wpeer is the peer's world rank, set when the error is recorded as
	// the job's failure (wknown), so that a communicator that reports it
	// gives the peer's rank in itself (Comm.peerIn).
	wpeer  int
	wknown bool

	// split says that Rank and Peer are ranks in a communicator made by
	// Split, whose world ranks are worldRank and wpeer: the message gives
	// both, since a transport's words in Err name world ranks.
	split     bool
	worldRank int
}

func (e *Error) Error() string {
	rank := fmt.Sprintf("rank %d", e.Rank)
	if e.split {
		rank += fmt.Sprintf(" (world rank %d)", e.worldRank)
	}
	msg := fmt.Sprintf("braid: %s: %s: %s", rank, e.Call, e.Kind)
	if e.Rank < 0 {
		// Before the rank is known (options checked at Init, NewLocal).
		msg = fmt.Sprintf("braid: %s: %s", e.Call, e.Kind)
	}
	switch {
	case e.Peer >= 0 && e.split && e.wknown && e.wpeer >= 0:
		msg += fmt.Sprintf(" (peer rank %d, world rank %d)", e.Peer, e.wpeer)
	case e.Peer >= 0:
		msg += fmt.Sprintf(" (peer rank %d)", e.Peer)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &braid.Error{Kind: k}) match any *Error of kind k.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && t.Call == "" && t.Err == nil
}

// KindOf returns the kind of err if it is (or wraps) an *Error, else 0.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// Sentinels for errors.Is.
var (
	ErrInvalidArgument = &Error{Kind: InvalidArgument}
	ErrMismatch        = &Error{Kind: Mismatch}
	ErrPeerLost        = &Error{Kind: PeerLost}
	ErrTimeout         = &Error{Kind: Timeout}
	ErrAborted         = &Error{Kind: Aborted}
	ErrUnsupported     = &Error{Kind: Unsupported}
)

func argError(rank int, call string, format string, args ...any) *Error {
	return &Error{Kind: InvalidArgument, Rank: rank, Call: call, Peer: -1, Err: fmt.Errorf(format, args...)}
}

// classify turns an executor or transport error into an *Error.
func classify(rank int, call string, err error) *Error {
	var be *Error
	if errors.As(err, &be) {
		if be.Call == call && be.Rank == rank {
			return be
		}
		return &Error{Kind: be.Kind, Rank: rank, Call: call, Peer: be.Peer, Err: err}
	}
	e := &Error{Rank: rank, Call: call, Peer: -1, Err: err}
	var we *shmcoll.WaitError
	if errors.As(err, &we) {
		e.Peer = we.Peer
	}
	var de *shmcoll.DirectError
	if errors.As(err, &de) {
		e.Peer = de.Peer
	}
	var me *shmcoll.MismatchError
	if errors.As(err, &me) {
		e.Kind, e.Peer = Mismatch, me.Peer
		return e
	}
	var se *exec.StepError
	if errors.As(err, &se) && se.Step.Kind != 0 {
		switch se.Step.Kind {
		case 1, 2, 3: // send, recv, recvreduce
			e.Peer = se.Step.Peer
		}
	}
	switch {
	case errors.Is(err, transport.ErrMismatch):
		e.Kind = Mismatch
	case errors.Is(err, transport.ErrPeerLost):
		e.Kind = PeerLost
	case errors.Is(err, transport.ErrAborted), errors.Is(err, transport.ErrClosed), errors.Is(err, context.Canceled):
		e.Kind = Aborted
	case errors.Is(err, context.DeadlineExceeded):
		e.Kind = Timeout
	case errors.Is(err, syscall.ENOSPC):
		// The machine's doing, not Braid's: a full /dev/shm (noSpace).
		e.Kind = Unsupported
	default:
		e.Kind = Internal
	}
	return e
}

// noSpace adds to err, if a full file system (ENOSPC) caused it, what the
// user can do: the shared memory that ranks of one host set up lives in
// /dev/shm, which containers often keep small.
func noSpace(err error) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	return fmt.Errorf("%w (ENOSPC): /dev/shm has no room for this rank's shared memory: free space there (braid-* files that no running job uses), enlarge it (docker run --shm-size), or set BRAID_TRANSPORT=tcp to connect the ranks of this host over TCP", err)
}
