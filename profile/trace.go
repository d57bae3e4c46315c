package profile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// The names of the trace events' arguments are those that Kineto (PyTorch's
// profiler) writes for NCCL collectives recorded by record_param_comms —
// libkineto/src/output_json.cpp in pytorch/kineto: "Collective name",
// "dtype", "In msg nelems", "Out msg nelems", "Group size", "Process Group
// Name"; and torch/csrc/profiler/util.h in pytorch/pytorch: "Seq", "Rank",
// "Src Rank", "Dst Rank", "Is asynchronized op". Kineto has no algorithm
// field; "Algorithm" is the name NCCL's example profiler plugin gives it
// (ext-profiler/example/print_event.c in NVIDIA/nccl, beside "SeqNum",
// "Count" and "Datatype"). Tools that read PyTorch traces (Holistic Trace
// Analysis, Chakra) thus find Braid's calls where they look for NCCL's.
const (
	argCollective = "Collective name"
	argDType      = "dtype"
	argIn         = "In msg nelems"
	argOut        = "Out msg nelems"
	argGroup      = "Group size"
	argPG         = "Process Group Name"
	argSeq        = "Seq"
	argRank       = "Rank"
	argSrc        = "Src Rank"
	argDst        = "Dst Rank"
	argAsync      = "Is asynchronized op"
	argAlgo       = "Algorithm"
)

// writeTrace writes r's events to path as a Chrome trace (the JSON object
// format that chrome://tracing, Perfetto and Kineto read): one complete
// event ("ph": "X") per call, ts and dur in microseconds from the
// recorder's start, pid the world rank, and tid a lane: calls that overlap
// in time (several goroutines, non-blocking calls) go on different lanes, so
// that no lane holds events that overlap without nesting.
func writeTrace(path string, r *Recorder, baseNS int64) error {
	r.mu.Lock()
	evs := r.events.list()
	stride, offered := r.stride, r.ended
	r.mu.Unlock()
	slices.SortStableFunc(evs, func(a, b event) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	var lanes []int64 // the end of each lane's last event
	lane := make([]int, len(evs))
	for i, e := range evs {
		l := slices.IndexFunc(lanes, func(end int64) bool { return end <= e.start })
		if l < 0 {
			l = len(lanes)
			lanes = append(lanes, 0)
		}
		lanes[l] = max(e.end, e.start)
		lane[i] = l
	}

	f, err := os.CreateTemp(filepath.Dir(path), "."+base(path)+".*")
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<16)
	err = encodeTrace(w, r, evs, lane, len(lanes), baseNS, stride, offered)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Chmod(0o644)
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

func encodeTrace(w io.Writer, r *Recorder, evs []event, lane []int, lanes int, baseNS int64, stride, offered uint64) error {
	b := make([]byte, 0, 1<<12)
	b = append(b, `{"schemaVersion": 1, "displayTimeUnit": "ns", "baseTimeNanoseconds": `...)
	b = strconv.AppendInt(b, baseNS, 10)
	b = append(b, `, "braid": {"rank": `...)
	b = strconv.AppendInt(b, int64(r.rank), 10)
	b = append(b, `, "size": `...)
	b = strconv.AppendInt(b, int64(r.size), 10)
	b = append(b, `, "host": `...)
	b = appendString(b, r.host)
	b = append(b, `, "stride": `...)
	b = strconv.AppendUint(b, stride, 10)
	b = append(b, `, "offered": `...)
	b = strconv.AppendUint(b, offered, 10)
	b = append(b, "},\n\"traceEvents\": [\n"...)
	pid := int64(r.rank)
	b = meta(b, "process_name", pid, 0, "name", `"rank `+itoa(r.rank)+`"`)
	b = append(b, ",\n"...)
	b = meta(b, "process_sort_index", pid, 0, "sort_index", itoa(r.rank))
	for l := range lanes {
		b = append(b, ",\n"...)
		b = meta(b, "thread_name", pid, int64(l), "name", `"calls `+itoa(l)+`"`)
	}
	for i, e := range evs {
		b = append(b, ",\n"...)
		b = appendEvent(b, &e, pid, int64(lane[i]), r.rank)
		if len(b) > 1<<15 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = append(b, "\n]}\n"...)
	_, err := w.Write(b)
	return err
}

func meta(b []byte, name string, pid, tid int64, key, val string) []byte {
	b = append(b, `{"name": "`...)
	b = append(b, name...)
	b = append(b, `", "ph": "M", "pid": `...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, `, "tid": `...)
	b = strconv.AppendInt(b, tid, 10)
	b = append(b, `, "args": {"`...)
	b = append(b, key...)
	b = append(b, `": `...)
	b = append(b, val...)
	return append(b, "}}"...)
}

func appendEvent(b []byte, e *event, pid, tid int64, worldRank int) []byte {
	cat := e.kind.String()
	name := e.name
	if e.wait {
		cat, name = "wait", "wait "+e.name
	}
	b = append(b, `{"ph": "X", "cat": "`...)
	b = append(b, cat...)
	b = append(b, `", "name": `...)
	b = appendString(b, name)
	b = append(b, `, "pid": `...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, `, "tid": `...)
	b = strconv.AppendInt(b, tid, 10)
	b = append(b, `, "ts": `...)
	b = strconv.AppendFloat(b, float64(e.start)/1e3, 'f', 3, 64)
	b = append(b, `, "dur": `...)
	b = strconv.AppendFloat(b, float64(max(e.end-e.start, 0))/1e3, 'f', 3, 64)
	b = append(b, `, "args": {`...)
	key := func(k string) {
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `": `...)
	}
	key(argCollective)
	b = appendString(b, e.name)
	if e.wait {
		if e.kind == Collective {
			b = append(b, ", "...)
			key(argSeq)
			b = strconv.AppendUint(b, uint64(e.seq), 10)
		}
		return append(b, "}}"...)
	}
	b = append(b, ", "...)
	key(argDType)
	b = appendString(b, e.dtype)
	b = append(b, ", "...)
	key(argIn)
	b = strconv.AppendInt(b, e.in, 10)
	b = append(b, ", "...)
	key(argOut)
	b = strconv.AppendInt(b, e.out, 10)
	b = append(b, ", "...)
	key(argGroup)
	b = strconv.AppendInt(b, int64(e.group), 10)
	b = append(b, ", "...)
	key(argPG)
	b = append(b, '"')
	b = fmt.Appendf(b, "%08x", e.comm)
	b = append(b, `", `...)
	key(argRank)
	b = strconv.AppendInt(b, int64(e.rank), 10)
	b = append(b, ", "...)
	key(argAsync)
	b = strconv.AppendBool(b, e.async)
	if e.kind == Collective {
		b = append(b, ", "...)
		key(argSeq)
		b = strconv.AppendUint(b, uint64(e.seq), 10)
		b = append(b, ", "...)
		key(argAlgo)
		b = appendString(b, e.algo)
	} else {
		src, dst := worldRank, e.peer
		if e.name == "recv" {
			src, dst = dst, src
		}
		b = append(b, ", "...)
		key(argSrc)
		b = strconv.AppendInt(b, int64(src), 10)
		b = append(b, ", "...)
		key(argDst)
		b = strconv.AppendInt(b, int64(dst), 10)
		b = append(b, `, "Tag": `...)
		b = strconv.AppendInt(b, int64(e.tag), 10)
	}
	if e.fail {
		b = append(b, `, "Failed": true`...)
	}
	return append(b, "}}"...)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// ChromeTrace is a trace file as Braid writes it (and as Chrome's and
// Perfetto's JSON importers read it).
type ChromeTrace struct {
	SchemaVersion   int              `json:"schemaVersion"`
	DisplayTimeUnit string           `json:"displayTimeUnit"`
	BaseTimeNS      int64            `json:"baseTimeNanoseconds"`
	TraceEvents     []map[string]any `json:"traceEvents"`
}

// ReadTrace reads a trace file.
func ReadTrace(path string) (*ChromeTrace, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t ChromeTrace
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%s: not a Chrome trace: %v", path, err)
	}
	return &t, nil
}

// WriteMergedTrace writes the traces of r's ranks into one Chrome trace at
// path, each rank a process (pid = rank), their times shifted onto the
// earliest rank's clock by the Unix times at which their traces began (the
// hosts' clocks, so ranks of several hosts line up as well as those agree).
func (r *Report) WriteMergedTrace(path string) error {
	out := ChromeTrace{SchemaVersion: 1, DisplayTimeUnit: "ns"}
	var traces []*ChromeTrace
	for i, s := range r.Ranks {
		t, err := ReadTrace(filepath.Join(filepath.Dir(r.Files[i]), s.Trace.File))
		if err != nil {
			return err
		}
		if len(traces) == 0 || t.BaseTimeNS < out.BaseTimeNS {
			out.BaseTimeNS = t.BaseTimeNS
		}
		traces = append(traces, t)
	}
	for _, t := range traces {
		shift := float64(t.BaseTimeNS-out.BaseTimeNS) / 1e3
		for _, e := range t.TraceEvents {
			if ts, ok := e["ts"].(float64); ok {
				e["ts"] = ts + shift
			}
			out.TraceEvents = append(out.TraceEvents, e)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}
