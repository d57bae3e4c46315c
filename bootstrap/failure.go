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
