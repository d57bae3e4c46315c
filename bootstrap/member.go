package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A rank that dies during its set-up, after it joined the job's store but
// before it connected to its peers, would leave them waiting for it until
// their timeout: no transport connects it yet, and a launcher other than
// braid run may not watch it. A TCP store sees its connection end, though.
// So a rank that dials the store says which rank it is (Open), and that
// its set-up is done (Settle), failed (Leave) or is over (its closer); the
// server records the first rank whose connection ended, or that left,
// before its set-up was done, and the ranks still in their set-up wait
// for that record (LostRank) beside their other waits.

// Membership keys: a dialled rank r sets memberPrefix+r to one of the
// member states; the server notes the state of each connection's rank
// and sets lostKey, once, to "RANK\tHOW\tWHY" for the first rank lost.
const (
	memberPrefix = "braid/bootstrap/member/"
	lostKey      = "braid/bootstrap/lost"

	memberJoined  = "joined"  // Open: the rank's set-up has begun
	memberSettled = "settled" // Settle: its set-up is done
	memberLeft    = "left"    // its closer, or Leave ("left\tWHY"): it leaves the job

	lostKilled = "killed" // the connection ended without a word
	lostFailed = "failed" // the rank left
)

// memberTimeout bounds the closer's word to the store that the rank leaves.
const memberTimeout = time.Second

// maxLeaveWhy bounds the reason a rank gives for leaving.
const maxLeaveWhy = 4096

func memberKey(rank int) string { return memberPrefix + strconv.Itoa(rank) }

// member is what a server knows of the rank on one connection.
type member struct {
	rank    int // -1 until the client says
	state   string
	counted bool // the rank counted itself out (closedKey)
}

// noteSet updates m for a Set of key to value on its connection, and
// records the rank as lost if it left during its set-up.
func (s *StoreServer) noteSet(m *member, key string, value []byte) {
	r, err := strconv.Atoi(strings.TrimPrefix(key, memberPrefix))
	if !strings.HasPrefix(key, memberPrefix) || err != nil || r < 0 {
		return
	}
	state, why, _ := strings.Cut(string(value), "\t")
	if state == memberLeft && m.rank == r && m.state == memberJoined {
		if why == "" {
			why = "it closed its connection to the job's store during its set-up"
		}
		s.t.setIfAbsent(lostKey, lostRecord(r, lostFailed, why))
	}
	m.rank, m.state = r, state
}

// connEnded records m's rank as lost if its connection ended during its
// set-up. A rank whose connection ended before it counted itself out
// (closedKey) is counted out, since it will not use the store again: the
// owner's closer need not wait for it.
func (s *StoreServer) connEnded(m *member) {
	if m.rank < 0 || s.ctx.Err() != nil {
		return
	}
	if m.state == memberJoined {
		s.t.setIfAbsent(lostKey, lostRecord(m.rank, lostKilled,
			"its connection to the job's store ended during its set-up, without a word: the process died or was killed"))
	}
	if !m.counted {
		s.t.add(closedKey, 1)
	}
}

func lostRecord(rank int, how, why string) []byte {
	return []byte(fmt.Sprintf("%d\t%s\t%s", rank, how, why))
}

// Leave tells the job's store s (from Open) that this rank leaves during
// its set-up, which failed: why says how (its error). The ranks still in
// their set-up learn it through LostRank, rather than waiting for this
// rank until their timeout. It does nothing for stores that LostRank
// cannot watch, and changes nothing once a rank was recorded as lost.
func Leave(ctx context.Context, s Store, why string) error {
	js, ok := s.(*jobStore)
	if !ok || !js.watched {
		return nil
	}
	if len(why) > maxLeaveWhy {
		why = why[:maxLeaveWhy]
	}
	if js.member >= 0 {
		return js.Set(ctx, memberKey(js.member), []byte(memberLeft+"\t"+why))
	}
	if ms, ok := js.Store.(*memStore); ok {
		// This rank serves the store: it records itself.
		ms.t.setIfAbsent(lostKey, lostRecord(js.rank, lostFailed, why))
	}
	return nil
}

// LostMember is a rank lost during its set-up (LostRank).
type LostMember struct {
	Rank int
	// Failed says that the rank left, its set-up having failed (Why is
	// its error, or says that it closed the store); else its connection
	// to the store ended without a word (Why says so).
	Failed bool
	Why    string
}

// ErrNoWatch is what LostRank returns for a store that cannot tell that a
// rank is lost.
var ErrNoWatch = errors.New("bootstrap: this store does not watch its ranks")

// LostRank waits until a rank of the job is lost during its set-up: its
// connection to the job's TCP store ended before it called Settle (the
// process died or was killed), or it left before Settle (Leave, or its
// closer: its set-up failed). It returns the first rank lost. It waits
// until ctx ends, and returns ErrNoWatch at once for a store that cannot
// tell: s must come from Open on a TCP store (file and Redis stores
// cannot). The death of the rank that serves the store ends the store,
// which Lost reports.
func LostRank(ctx context.Context, s Store) (LostMember, error) {
	js, ok := s.(*jobStore)
	if !ok || !js.watched {
		return LostMember{Rank: -1}, ErrNoWatch
	}
	v, err := js.Get(ctx, lostKey)
	if err != nil {
		return LostMember{Rank: -1}, err
	}
	f := strings.SplitN(string(v), "\t", 3)
	var r int
	if len(f) == 3 {
		r, err = strconv.Atoi(f[0])
	}
	if len(f) != 3 || err != nil || (f[1] != lostKilled && f[1] != lostFailed) {
		return LostMember{Rank: -1}, fmt.Errorf("bootstrap: malformed record of a lost rank: %q", v)
	}
	return LostMember{Rank: r, Failed: f[1] == lostFailed, Why: f[2]}, nil
}
