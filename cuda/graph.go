package cuda

import (
	"fmt"
	"unsafe"
)

// CUDA graphs: work queued on a stream in capture mode is recorded into a
// graph instead of run (BeginCapture ... EndCapture); the graph,
// instantiated once (Instantiate), is then launched as a whole, as many
// times as wanted, for the cost of one launch (GraphLaunch). Kernel
// launches, copies, memsets and event records and waits among streams
// can be captured; synchronisations, allocations and anything that
// waits on the host cannot (the driver fails them with
// ErrStreamCaptureUnsupported and invalidates the capture). A graph's
// kernels get the arguments they were captured with at every launch.
//
// These functions need a driver that has them (CUDA 11.4 or later); with
// an older one they fail with ErrNotSupported.

// Graph is a handle to a CUDA graph (CUgraph).
type Graph uintptr

// GraphExec is a handle to an instantiated, launchable graph
// (CUgraphExec).
type GraphExec uintptr

// GraphNode is a handle to a node of a graph (CUgraphNode).
type GraphNode uintptr

// CaptureMode is how a capture restricts the calls of other threads
// (CUstreamCaptureMode).
type CaptureMode int32

// Capture modes, with cuda.h's values.
const (
	// CaptureGlobal: while the capture runs, calls that are unsafe
	// during a capture (allocations, synchronisations) fail on every
	// thread that does not itself capture in relaxed mode.
	CaptureGlobal CaptureMode = 0
	// CaptureThreadLocal: they fail only on the thread that began the
	// capture.
	CaptureThreadLocal CaptureMode = 1
	// CaptureRelaxed: they fail nowhere (the caller keeps them out).
	CaptureRelaxed CaptureMode = 2
)

// CaptureStatus is whether a stream captures (CUstreamCaptureStatus).
type CaptureStatus int32

// Capture statuses, with cuda.h's values.
const (
	CaptureNone        CaptureStatus = 0 // the stream runs its work
	CaptureActive      CaptureStatus = 1 // the stream records its work into a graph
	CaptureInvalidated CaptureStatus = 2 // a capture failed; EndCapture ends it
)

func (s CaptureStatus) String() string {
	switch s {
	case CaptureNone:
		return "not capturing"
	case CaptureActive:
		return "capturing"
	case CaptureInvalidated:
		return "capture invalidated"
	}
	return fmt.Sprintf("capture status %d", int32(s))
}

// GraphNodeType is the kind of a graph node (CUgraphNodeType).
type GraphNodeType int32

// Graph node types, with cuda.h's values.
const (
	NodeKernel      GraphNodeType = 0
	NodeMemcpy      GraphNodeType = 1
	NodeMemset      GraphNodeType = 2
	NodeHost        GraphNodeType = 3
	NodeGraph       GraphNodeType = 4
	NodeEmpty       GraphNodeType = 5
	NodeWaitEvent   GraphNodeType = 6
	NodeEventRecord GraphNodeType = 7
)

// graphCall calls the optional driver function fn, named name, or fails
// with ErrNotSupported where the driver lacks it. As with ccall, a pointer
// converted to uintptr in the argument list stays valid and in place.
//
//go:uintptrescapes
func graphCall(name string, fn uintptr, args ...uintptr) error {
	if fn == 0 {
		return fmt.Errorf("cuda: the driver has no %s (CUDA graphs need CUDA 11.4 or later): %w", name, ErrNotSupported)
	}
	return check(name, Result(ccall(fn, args...)))
}

// BeginCapture puts s in capture mode: the work queued on it from now on,
// and on the streams that wait for events recorded on it, is recorded
// into a graph that EndCapture returns, instead of run. s must not be the
// legacy default stream (0).
func (c *Ctx) BeginCapture(s Stream, mode CaptureMode) error {
	return graphCall("cuStreamBeginCapture_v2", api.cuStreamBeginCapture, uintptr(s), uintptr(mode))
}

// EndCapture ends the capture of s and returns the graph of the work
// recorded on it, which the caller destroys (DestroyGraph). A capture that
// an unsupported call invalidated ends with an error and no graph.
func (c *Ctx) EndCapture(s Stream) (Graph, error) {
	var g Graph
	err := graphCall("cuStreamEndCapture", api.cuStreamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g)))
	return g, err
}

// CaptureStatus reports whether s is in capture mode: begun on s or
// reached from a capturing stream through an event wait.
func (c *Ctx) CaptureStatus(s Stream) (CaptureStatus, error) {
	var st CaptureStatus
	err := graphCall("cuStreamIsCapturing", api.cuStreamIsCapturing, uintptr(s), uintptr(unsafe.Pointer(&st)))
	return st, err
}

// Instantiate makes a launchable graph of g (cuGraphInstantiateWithFlags,
// no flags). g may be destroyed afterwards; the GraphExec stays valid
// until DestroyGraphExec.
func (c *Ctx) Instantiate(g Graph) (GraphExec, error) {
	var e GraphExec
	err := graphCall("cuGraphInstantiateWithFlags", api.cuGraphInstantiateWithFlags, uintptr(unsafe.Pointer(&e)), uintptr(g), 0)
	return e, err
}

// GraphLaunch enqueues the whole graph e on s: it runs after the work
// queued on s before, and the work queued after waits for all of it. A
// graph runs one launch at a time: a launch waits for the one before.
func (c *Ctx) GraphLaunch(e GraphExec, s Stream) error {
	return graphCall("cuGraphLaunch", api.cuGraphLaunch, uintptr(e), uintptr(s))
}

// DestroyGraph destroys g.
func (c *Ctx) DestroyGraph(g Graph) error {
	return graphCall("cuGraphDestroy", api.cuGraphDestroy, uintptr(g))
}

// DestroyGraphExec destroys e once its launches have completed.
func (c *Ctx) DestroyGraphExec(e GraphExec) error {
	return graphCall("cuGraphExecDestroy", api.cuGraphExecDestroy, uintptr(e))
}

// GraphNodes returns the nodes of g, in no particular order.
func (c *Ctx) GraphNodes(g Graph) ([]GraphNode, error) {
	var n uintptr
	if err := graphCall("cuGraphGetNodes", api.cuGraphGetNodes, uintptr(g), 0, uintptr(unsafe.Pointer(&n))); err != nil || n == 0 {
		return nil, err
	}
	nodes := make([]GraphNode, n)
	if err := graphCall("cuGraphGetNodes", api.cuGraphGetNodes, uintptr(g), uintptr(unsafe.Pointer(&nodes[0])), uintptr(unsafe.Pointer(&n))); err != nil {
		return nil, err
	}
	return nodes[:min(int(n), len(nodes))], nil
}

// NodeType returns the kind of node n.
func (c *Ctx) NodeType(n GraphNode) (GraphNodeType, error) {
	var t GraphNodeType
	err := graphCall("cuGraphNodeGetType", api.cuGraphNodeGetType, uintptr(n), uintptr(unsafe.Pointer(&t)))
	return t, err
}
