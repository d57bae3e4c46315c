package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// Version is the format version of the summary files; ReadSummary refuses
// others.
const Version = 1

// Summary is one rank's profile, the JSON of its file PATH.RANK. Times are
// microseconds; shares are fractions of the rank's wall time, from the end
// of Init (or NewLocal) to Close.
//
// The record is meant to grow: a reader ignores fields it does not know, and
// a field added later (arrival times, say) is left at its zero value or
// null in older files.
type Summary struct {
	Version int         `json:"version"`
	Rank    int         `json:"rank"` // world rank
	Size    int         `json:"size"` // world size
	Host    string      `json:"host"`
	PID     int         `json:"pid"`
	Start   time.Time   `json:"start"`    // when recording began
	WallUs  float64     `json:"wall_us"`  // from the start to Close
	BraidUs float64     `json:"braid_us"` // of it, spent in Braid's calls (the sum over the calls' TimeUs)
	Share   float64     `json:"share"`    // BraidUs / WallUs
	Calls   []CallStats `json:"calls"`    // by name, kind and blocking, in the order of their first call
	P2P     []PeerStats `json:"p2p"`      // point-to-point partners, by world rank
	Trace   TraceInfo   `json:"trace"`

	// Arrivals is the arrival log: the rank's arrival at and return from
	// sampled collective calls (see ArrivalAll), on the job's common
	// clock, from which braid prof measures each call's arrival pattern
	// over every rank.
	Arrivals []Arrival `json:"arrivals,omitempty"`
}

// Arrival is one collective call in a rank's arrival log.
type Arrival struct {
	Comm     uint32 `json:"comm"`
	Seq      uint32 `json:"seq"`
	Name     string `json:"call"`
	Group    int    `json:"group"` // the communicator's size
	Rank     int    `json:"rank"`  // the rank in the communicator
	Bytes    int64  `json:"bytes"`
	ArriveNS int64  `json:"arrive_ns"` // on the job's clock: CLOCK_MONOTONIC of rank 0's host
	ReturnNS int64  `json:"return_ns"` // 0 where the rank did not read its clock (a sample of small calls)
}

// CallStats counts the calls of one name, kind and blocking.
type CallStats struct {
	Name   string  `json:"name"`   // "allreduce", "send", ...
	Kind   string  `json:"kind"`   // "collective" or "p2p"
	Async  bool    `json:"async"`  // the non-blocking method (IAllreduce, ISend, ...)
	Calls  uint64  `json:"calls"`  // calls that returned without error
	Timed  uint64  `json:"timed"`  // of them, those whose time was measured (see SampleBelow); the others' is estimated
	Failed uint64  `json:"failed"` // calls that returned an error
	Bytes  uint64  `json:"bytes"`  // the sum of the successful calls' sizes
	TimeUs float64 `json:"time_us"`
	Share  float64 `json:"share"` // TimeUs / the rank's wall time

	// The time of one successful call, entry to return (a non-blocking
	// call: issue to completion): the mean over all calls (estimated where
	// some were not timed), the least and the most of the timed ones.
	MeanUs float64 `json:"mean_us"`
	MinUs  float64 `json:"min_us"`
	MaxUs  float64 `json:"max_us"`

	// Non-blocking calls only: the time from issue to completion summed
	// over the calls (SpanUs), the time Wait blocked on them (WaitUs, over
	// Waits waits), and the overlap 1 − WaitUs/SpanUs: the share of the
	// calls' time that the caller spent on other work.
	SpanUs  float64  `json:"span_us,omitempty"`
	WaitUs  float64  `json:"wait_us,omitempty"`
	Waits   uint64   `json:"waits,omitempty"`
	Overlap *float64 `json:"overlap,omitempty"`

	Hist  []Bin       `json:"hist"`  // successful calls per size bin (SizeBin), bins with calls only
	Algos []AlgoCount `json:"algos"` // successful calls per algorithm and size bin

	// ArrivalSpreadUs is the mean spread of the ranks' arrival at the
	// calls in which this rank knew every rank's arrival (ArrivalKnown of
	// them: calls through the host's shared area): the worst-case
	// imbalance time Ω, latest minus earliest entry; null when there were
	// none. ArrivalAverageUs is their mean average-case imbalance time
	// Δ̄, ArrivalMaxUs their largest Ω.
	ArrivalSpreadUs  *float64 `json:"arrival_spread_us"`
	ArrivalKnown     uint64   `json:"arrival_known,omitempty"`
	ArrivalAverageUs float64  `json:"arrival_average_us,omitempty"`
	ArrivalMaxUs     float64  `json:"arrival_max_us,omitempty"`
}

// Bin is one bin of a size histogram: calls of (Upper/2, Upper] bytes
// (Upper 0: calls of no data, Upper 1: of one byte).
type Bin struct {
	Upper  int64   `json:"upper_bytes"`
	Calls  uint64  `json:"calls"`
	Timed  uint64  `json:"timed"`   // of them, those whose time was measured
	TimeUs float64 `json:"time_us"` // their time, entry to return (scaled from the timed ones)
}

// AlgoCount is how many calls of a size bin ran an algorithm.
type AlgoCount struct {
	Algo  string `json:"algo"`
	Upper int64  `json:"upper_bytes"`
	Calls uint64 `json:"calls"`
}

// PeerStats counts the point-to-point messages between this rank and Peer.
type PeerStats struct {
	Peer      int    `json:"peer"` // world rank
	Sends     uint64 `json:"sends"`
	SendBytes uint64 `json:"send_bytes"`
	Recvs     uint64 `json:"recvs"`
	RecvBytes uint64 `json:"recv_bytes"`
}

// TraceInfo describes the rank's trace file.
type TraceInfo struct {
	File    string `json:"file"`    // its name, beside the summary
	Events  int    `json:"events"`  // events it holds
	Offered uint64 `json:"offered"` // timed calls and waits that ended; the trace keeps every Stride-th
	Stride  uint64 `json:"stride"`
	BaseNS  int64  `json:"base_ns"` // Unix time of the trace's ts 0, in ns
}

// WriteSummary writes s as JSON to path.
func WriteSummary(path string, s *Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}

// writeFile writes b to path through a temporary file in the same
// directory, so that a reader never sees half a file.
func writeFile(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o644) // as os.Create's 0666 under the usual umask
	}
	if err2 := f.Close(); err == nil {
		err = err2
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("profile: writing %s: %w", path, err)
	}
	return nil
}

// ReadSummary reads a summary file. Its errors name the file.
func ReadSummary(path string) (*Summary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: not a Braid profile: %v", path, err)
	}
	switch {
	case s.Version == 0:
		return nil, fmt.Errorf("%s: not a Braid profile summary (give FILE or FILE.RANK, not a trace)", path)
	case s.Version != Version:
		return nil, fmt.Errorf("%s: profile format version %d, want %d", path, s.Version, Version)
	case s.Size < 1 || s.Rank < 0 || s.Rank >= s.Size:
		return nil, fmt.Errorf("%s: rank %d of %d ranks: not a Braid profile", path, s.Rank, s.Size)
	case s.WallUs < 0 || s.BraidUs < 0:
		return nil, errors.New(path + ": negative times: not a Braid profile")
	}
	return &s, nil
}

func itoa(i int) string { return strconv.Itoa(i) }

func base(path string) string { return filepath.Base(path) }

func sortPeers(p []PeerStats) {
	slices.SortFunc(p, func(a, b PeerStats) int { return a.Peer - b.Peer })
}
