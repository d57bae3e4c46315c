package bootstrap

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Failure is a rank's report of the failure of its communicator, which it
// writes to the job's store (ReportFailure) so that the launcher can name
// the rank that failed first (Failures): the first to exit is often only
// the first to notice.
type Failure struct {
	Rank int       // the reporting world rank
	Time time.Time // when it failed, by its clock
	Kind string    // the error's kind: "timeout", "peer lost", "mismatch between ranks", ...
	Peer int       // the world rank the failure concerns, or -1
	// Echo says that the rank learnt of the failure from another rank
	// (that rank aborted the job): it is a consequence, not a cause.
	Echo bool
	Msg  string // the error, at most MaxFailureMsg bytes

	// Where the rank was (its flight recorder's oldest call in flight),
	// if InCall: the communicator, the call's sequence number and name,
	// and the world rank it waited for when it stalled (or -1).
	InCall bool
	Comm   uint32
	Seq    uint32
	Call   string
	Waited int
}

// MaxFailureMsg bounds Failure.Msg.
const MaxFailureMsg = 2048

// failuresKey counts the failures reported; report i (from 1) is under
// failuresKey/i.
const failuresKey = "braid/bootstrap/failures"

// ReportFailure adds f to the failures reported in s.
func ReportFailure(ctx context.Context, s Store, f Failure) error {
	n, err := s.Add(ctx, failuresKey, 1)
	if err != nil {
		return err
	}
	msg := f.Msg
	if len(msg) > MaxFailureMsg {
		msg = msg[:MaxFailureMsg]
	}
	echo := 0
	if f.Echo {
		echo = 1
	}
	v := fmt.Sprintf("1\t%d\t%d\t%s\t%d\t%d\t%s", f.Rank, f.Time.UnixNano(), strings.ReplaceAll(f.Kind, "\t", " "), f.Peer, echo, msg)
	if f.InCall {
		v = fmt.Sprintf("2\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s", f.Rank, f.Time.UnixNano(), strings.ReplaceAll(f.Kind, "\t", " "), f.Peer, echo,
			f.Comm, f.Seq, strings.ReplaceAll(f.Call, "\t", " "), f.Waited, msg)
	}
	return s.Set(ctx, failuresKey+"/"+strconv.FormatInt(n, 10), []byte(v))
}

// Failures returns the failures reported in s, in the order they reached
// it. A report that is counted but not yet written when ctx ends is left
// out; malformed ones are skipped.
func Failures(ctx context.Context, s Store) ([]Failure, error) {
	n, err := s.Add(ctx, failuresKey, 0)
	if err != nil {
		return nil, err
	}
	var out []Failure
	for i := int64(1); i <= n; i++ {
		v, err := s.Get(ctx, failuresKey+"/"+strconv.FormatInt(i, 10))
		if err != nil {
			break
		}
		if f, ok := parseFailure(string(v)); ok {
			out = append(out, f)
		}
	}
	return out, nil
}

func parseFailure(v string) (Failure, bool) {
	if strings.HasPrefix(v, "2\t") {
		p := strings.SplitN(v, "\t", 11)
		if len(p) != 11 {
			return Failure{}, false
		}
		v1 := []string{"1", p[1], p[2], p[3], p[4], p[5], p[10]}
		f, ok := parseFailure(strings.Join(v1, "\t"))
		comm, err1 := strconv.ParseUint(p[6], 10, 32)
		seq, err2 := strconv.ParseUint(p[7], 10, 32)
		waited, err3 := strconv.Atoi(p[9])
		if !ok || err1 != nil || err2 != nil || err3 != nil {
			return Failure{}, false
		}
		f.InCall, f.Comm, f.Seq, f.Call, f.Waited = true, uint32(comm), uint32(seq), p[8], waited
		return f, true
	}
	p := strings.SplitN(v, "\t", 7)
	if len(p) != 7 || p[0] != "1" {
		return Failure{}, false
	}
	rank, err1 := strconv.Atoi(p[1])
	ns, err2 := strconv.ParseInt(p[2], 10, 64)
	peer, err3 := strconv.Atoi(p[4])
	if err1 != nil || err2 != nil || err3 != nil || rank < 0 || peer < -1 {
		return Failure{}, false
	}
	return Failure{Rank: rank, Time: time.Unix(0, ns), Kind: p[3], Peer: peer, Echo: p[5] == "1", Msg: p[6]}, true
}
