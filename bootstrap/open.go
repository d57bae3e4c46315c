package bootstrap

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// secretFile is the name of the file, in the job's directory, through
// which rank 0 hands the job's secret to the other ranks.
const secretFile = "secret"

// NewSecret returns a fresh random secret of 32 bytes.
func NewSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

// Open opens the store that info names and returns it with a function that
// closes it and releases what Open set up. Open may wait (for rank 0's
// secret, for the store's server) until ctx ends; the store lives until
// the closer is called.
//
//   - Store "": a store in memory (a single rank only).
//   - Store "file:DIR": a file store in DIR (see NewFileStore).
//   - Store "redis://[:PASSWORD@]HOST:PORT[/DB]": a Redis store (see
//     DialRedisStore); it needs the job's secret.
//   - Store "HOST:PORT": a TCP store. If info.ServeStore, this rank serves
//     it, listening on PORT (on HOST only if HOST is a loopback address,
//     else on every interface), and uses it directly; otherwise it dials
//     it (DialTCPStore). The server logs refused clients with log.Printf.
//
// When info.Secret is empty, Open fills it in: rank 0 writes a fresh
// secret to a file of mode 0600 in the job's directory (DIR for a file
// store, $TMPDIR/braid-UID/JOB for a TCP store, whose ranks must then all
// run on this host) and the other ranks wait until they can read it. A
// file left there by an earlier job whose rank 0 ran on this host and has
// died is ignored. A single rank makes up a secret. The secret also keys
// the file store's subdirectory, so keys left by an earlier job are never
// read.
//
// Every rank must call its closer when it is done with the store. The
// closer of the rank that owns the store (rank 0 of a file store, the rank
// that serves a TCP store) waits, up to 10 s, until every rank has called
// its own, then removes what the job left in the directory, or stops the
// server. Stores from Open reserve the keys that begin with
// "braid/bootstrap/".
//
// Files on disk (the secret file, a file store's keys) are removed as
// soon as they are no longer needed, so that a job that crashes leaves
// nothing behind: the last rank to call Settle removes them; rank 0's
// closer removes them if the job ends before that. A rank 0 that creates
// a job directory under $TMPDIR/braid-UID also removes the directories
// there whose rank 0 ran on this host and has died without cleaning up
// (a job killed during its set-up).
func Open(ctx context.Context, info *Info) (Store, func() error, error) {
	if err := info.check(); err != nil {
		return nil, nil, err
	}
	switch {
	case info.Store == "":
		if info.Size > 1 {
			return nil, nil, fmt.Errorf("bootstrap: rank %d of %d: no store (set %s)", info.Rank, info.Size, EnvStore)
		}
		if len(info.Secret) == 0 {
			info.Secret = NewSecret()
		}
		s := NewMemStore()
		return s, s.Close, nil
	case isFileStore(info.Store):
		return openFileStore(ctx, info)
	case isRedisStore(info.Store):
		return openRedisStore(ctx, info)
	default:
		return openTCPStore(ctx, info)
	}
}

func openFileStore(ctx context.Context, info *Info) (Store, func() error, error) {
	dir := strings.TrimPrefix(info.Store, "file:")
	if dir == "" {
		return nil, nil, fmt.Errorf("bootstrap: store %q names no directory", info.Store)
	}
	if err := prepareDir(dir); err != nil {
		return nil, nil, err
	}
	ownSecret := len(info.Secret) == 0
	if ownSecret {
		s, err := shareSecret(ctx, dir, info)
		if err != nil {
			return nil, nil, err
		}
		info.Secret = s
	} else if info.Rank == 0 && underPrivate(dir) {
		// No secret file names this job's rank 0 for the reaper: an
		// owner file does.
		if err := writeOwner(dir); err != nil {
			return nil, nil, err
		}
	}
	sum := sha256.Sum256(append(append([]byte("braid-file-store\x00"), info.Secret...), "\x00"+info.JobID...))
	run := filepath.Join(dir, "run-"+hex.EncodeToString(sum[:8]))
	fs, err := NewFileStore(run)
	if err != nil {
		return nil, nil, err
	}
	js := &jobStore{Store: fs, size: info.Size, files: jobFiles(dir, info, run)}
	closer := checkOut(fs, info, info.Rank == 0, func() error {
		fs.Close()
		if info.Rank != 0 {
			return nil
		}
		return js.removeFiles()
	})
	return js, closer, nil
}

// jobFiles lists what a job keeps on disk in dir, in the order to remove
// them: the secret or owner file, the file store's directory run (if any),
// then dir itself if it is the job's own and $TMPDIR/braid-UID if that is
// empty.
func jobFiles(dir string, info *Info, run string) []jobFile {
	files := []jobFile{{path: filepath.Join(dir, secretFile)}, {path: filepath.Join(dir, ownerFile)}}
	if run != "" {
		files = append(files, jobFile{path: run, all: true})
	}
	if info.JobID != "" && filepath.Base(dir) == info.JobID || underPrivate(dir) {
		files = append(files, jobFile{path: dir, ifEmpty: true})
	}
	if underPrivate(dir) {
		files = append(files, jobFile{path: privateTempDir(), ifEmpty: true})
	}
	return files
}

// jobFile is a file or directory that a job leaves on disk.
type jobFile struct {
	path    string
	all     bool // a directory to remove with what it holds
	ifEmpty bool // a directory to remove if nothing else is left in it
}

func openTCPStore(ctx context.Context, info *Info) (Store, func() error, error) {
	host, port, err := net.SplitHostPort(info.Store)
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap: store %q: want HOST:PORT or file:DIR", info.Store)
	}
	var files []jobFile
	if len(info.Secret) == 0 {
		if !info.SingleHost() {
			return nil, nil, fmt.Errorf("bootstrap: rank %d: the TCP store %s needs the job's secret: set %s to the same hex value on every rank",
				info.Rank, info.Store, EnvSecret)
		}
		job := info.JobID
		if job == "" {
			job = sanitizeJobID("store-" + info.Store)
		}
		dir := filepath.Join(privateTempDir(), job)
		if err := prepareDir(dir); err != nil {
			return nil, nil, err
		}
		s, err := shareSecret(ctx, dir, info)
		if err != nil {
			return nil, nil, err
		}
		info.Secret = s
		files = jobFiles(dir, info, "")
	}
	js := &jobStore{size: info.Size, files: files, rank: info.Rank, member: -1}
	cleanup := func() {
		if info.Rank == 0 {
			js.removeFiles()
		}
	}
	js.watched = true
	if !info.ServeStore {
		s, err := DialTCPStore(ctx, info.Store, info.Secret)
		if err == nil {
			// The server learns which rank this connection is, to tell
			// the others if it ends during the set-up (LostRank).
			if err = s.Set(ctx, memberKey(info.Rank), []byte(memberJoined)); err != nil {
				s.Close()
			}
		}
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("bootstrap: rank %d: %w", info.Rank, err)
		}
		js.Store, js.member = s, info.Rank
		return js, checkOut(s, info, false, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), memberTimeout)
			s.Set(ctx, memberKey(info.Rank), []byte(memberLeft))
			cancel()
			cleanup()
			return s.Close()
		}), nil
	}
	addr := ":" + port
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		addr = info.Store
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("bootstrap: rank %d cannot serve the store %s: %w", info.Rank, info.Store, err)
	}
	srv := ServeTCPStore(context.Background(), ln, info.Secret, log.Printf)
	s := srv.Local()
	js.Store = s
	return js, checkOut(s, info, true, func() error { s.Close(); cleanup(); return srv.Close() }), nil
}

// jobStore is a store that Open returned, with what Settle removes.
type jobStore struct {
	Store
	size    int
	files   []jobFile
	rank    int  // this rank
	member  int  // this rank if it dialled the TCP store, else -1
	watched bool // a TCP store, which records the ranks lost (LostRank)
	once    sync.Once
	err     error
}

// removeFiles removes the job's files once.
func (js *jobStore) removeFiles() error {
	js.once.Do(func() {
		for _, f := range js.files {
			var err error
			switch {
			case f.ifEmpty:
				os.Remove(f.path) // fails if something is left: fine
			case f.all:
				// A rank still counting itself out (its closer) may
				// write into the directory while it goes: try again.
				for try := 0; ; try++ {
					if err = os.RemoveAll(f.path); err == nil || try == 4 {
						break
					}
					time.Sleep(time.Duration(try+1) * 10 * time.Millisecond)
				}
			default:
				if err = os.Remove(f.path); errors.Is(err, os.ErrNotExist) {
					err = nil
				}
			}
			if err != nil && js.err == nil {
				js.err = fmt.Errorf("bootstrap: %w", err)
			}
		}
	})
	return js.err
}

// settledKey counts the ranks that have called Settle.
const settledKey = "braid/bootstrap/settled"

// Settle tells the job's store s (from Open) that this rank has done its
// set-up: it reads no key that other ranks write from now on, except
// through the store's closer. The last rank of the job to settle removes
// the files that the job keeps on disk, so that nothing is left behind if
// the job is killed later: the secret file through which the ranks of one
// host shared the job's secret, and a file store's directory. After every
// rank has settled, a file store fails every call (the closers still
// work); a TCP store goes on working, in memory, and no longer reports
// this rank to LostRank when its connection ends. Settle does nothing for
// stores that Open did not return.
func Settle(ctx context.Context, s Store) error {
	js, ok := s.(*jobStore)
	if !ok {
		return nil
	}
	if js.member >= 0 {
		if err := js.Set(ctx, memberKey(js.member), []byte(memberSettled)); err != nil {
			return err
		}
	}
	if len(js.files) == 0 {
		return nil
	}
	n, err := js.Add(ctx, settledKey, 1)
	if err != nil {
		return err
	}
	if n >= int64(js.size) {
		return js.removeFiles()
	}
	return nil
}

// Lost returns a channel that is closed when the process serving s goes
// away (the connection to a TCP store from DialTCPStore, or from Open on a
// rank that does not serve it, ends other than by Close), and a function
// that then says why. For stores that no other process serves, the
// channel is nil.
func Lost(s Store) (<-chan struct{}, func() error) {
	if js, ok := s.(*jobStore); ok {
		s = js.Store
	}
	ts, ok := s.(*tcpStore)
	if !ok {
		return nil, func() error { return nil }
	}
	return ts.done, func() error {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if errors.Is(ts.err, transport.ErrClosed) {
			return nil
		}
		return ts.err
	}
}

// closedKey counts the ranks that have called their closer, and those
// whose connection to a TCP store ended before they did (member.go).
const closedKey = "braid/bootstrap/closed"

// closeWait bounds how long rank 0's closer waits for the other ranks'.
const closeWait = 10 * time.Second

// checkOut returns a closer that counts this rank out of the store, then
// calls release. If owner (this rank serves the store or removes its
// files), it first waits until every rank has counted out, or closeWait
// passes, so that it does not pull the store from under a rank that still
// reads it.
func checkOut(s Store, info *Info, owner bool, release func() error) func() error {
	var (
		once sync.Once
		err  error
	)
	return func() error {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), closeWait)
			defer cancel()
			n, aerr := s.Add(ctx, closedKey, 1)
			for delay := time.Duration(0); owner && aerr == nil && n < int64(info.Size); {
				delay = min(max(2*delay, minPoll), maxPoll)
				select {
				case <-ctx.Done():
					aerr = ctx.Err()
					continue
				case <-time.After(delay):
				}
				var v []byte
				if v, aerr = s.Get(ctx, closedKey); aerr == nil {
					n, aerr = strconv.ParseInt(string(v), 10, 64)
				}
			}
			err = release()
		})
		return err
	}
}

// prepareDir creates dir (mode 0700). A directory under the private
// temporary directory must be private: owned by this user, no access for
// others, and not a symbolic link, so that no other user can read or plant
// the secret.
func prepareDir(dir string) error {
	priv := privateTempDir()
	if rel, err := filepath.Rel(priv, dir); err == nil && !strings.HasPrefix(rel, "..") {
		if err := os.Mkdir(priv, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("bootstrap: %w", err)
		}
		if err := checkPrivate(priv); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// secretRecord is what the secret file holds, one field a line:
//
//	braid-secret 1
//	host HOSTID (see HostID)
//	pid PID
//	start START (clock ticks after boot, from /proc/PID/stat)
//	secret HEX
//
// The owner file, which rank 0 writes where there is no secret file, is
// the same without the secret line and with the first line
// "braid-owner 1".
type secretRecord struct {
	host   string
	pid    int
	start  uint64
	secret []byte // nil in an owner file
}

// ownerFile is the name of the owner file in a job's directory.
const ownerFile = "owner"

func (r secretRecord) encode() []byte {
	if r.secret == nil {
		return fmt.Appendf(nil, "braid-owner 1\nhost %s\npid %d\nstart %d\n", r.host, r.pid, r.start)
	}
	return fmt.Appendf(nil, "braid-secret 1\nhost %s\npid %d\nstart %d\nsecret %x\n", r.host, r.pid, r.start, r.secret)
}

// ownRecord describes this process as a job's rank 0.
func ownRecord() secretRecord {
	r := secretRecord{host: HostID(), pid: os.Getpid()}
	_, r.start, _ = procStat(r.pid)
	return r
}

// writeOwner writes the owner file of this process to dir.
func writeOwner(dir string) error {
	if err := writeRecord(dir, ownerFile, ownRecord()); err != nil {
		return fmt.Errorf("bootstrap: rank 0: %w", err)
	}
	return nil
}

// writeRecord writes r to dir/name; rank 0 first removes the directories
// of dead jobs beside dir. A reaper of another job may remove dir, if
// still empty, between prepareDir and the write: then it makes dir again.
func writeRecord(dir, name string, r secretRecord) error {
	if underPrivate(dir) {
		reapStale(dir)
	}
	err := writeFileAtomic(dir, name, r.encode())
	if errors.Is(err, os.ErrNotExist) {
		if err = prepareDir(dir); err == nil {
			err = writeFileAtomic(dir, name, r.encode())
		}
	}
	return err
}

// staleAge is how old an empty job directory must be before reapStale
// removes it: a rank other than 0 may have made it and wait for rank 0.
const staleAge = time.Minute

// reapStale removes the job directories beside keep (under
// $TMPDIR/braid-UID) that a job left behind: those whose secret or owner
// file names a rank 0 of this host (HostID) that no longer runs, and empty
// ones older than staleAge. It leaves alone what it cannot judge: records
// of other hosts (a shared /tmp), unreadable or foreign files.
func reapStale(keep string) {
	priv := privateTempDir()
	entries, err := os.ReadDir(priv)
	if err != nil {
		return
	}
	host := HostID()
	for _, e := range entries {
		dir := filepath.Join(priv, e.Name())
		if !e.IsDir() || dir == keep || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		var rec []byte
		for _, name := range []string{secretFile, ownerFile} {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				rec = b
				break
			}
		}
		if rec == nil {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleAge {
				os.Remove(dir) // only if empty
			}
			continue
		}
		r, err := parseRecord(rec)
		if err != nil || r.host != host || procAlive(r.pid, r.start) {
			continue
		}
		os.RemoveAll(dir)
	}
}

// underPrivate reports whether dir lies in $TMPDIR/braid-UID.
func underPrivate(dir string) bool {
	rel, err := filepath.Rel(privateTempDir(), dir)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

func parseSecretRecord(b []byte) (secretRecord, error) {
	r, err := parseRecord(b)
	if err == nil && r.secret == nil {
		err = errors.New("not a braid secret file")
	}
	return r, err
}

// parseRecord parses a secret file or an owner file.
func parseRecord(b []byte) (secretRecord, error) {
	var r secretRecord
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	switch {
	case len(lines) == 5 && lines[0] == "braid-secret 1":
	case len(lines) == 4 && lines[0] == "braid-owner 1":
	default:
		return r, errors.New("not a braid secret file")
	}
	var err error
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, " ")
		switch k {
		case "host":
			r.host = v
		case "pid":
			r.pid, err = strconv.Atoi(v)
		case "start":
			r.start, err = strconv.ParseUint(v, 10, 64)
		case "secret":
			r.secret, err = hex.DecodeString(v)
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return r, err
		}
	}
	if lines[0] == "braid-secret 1" && len(r.secret) < MinSecretLen {
		return r, errors.New("secret too short")
	}
	return r, nil
}

// shareSecret hands a fresh secret from rank 0 to the other ranks through
// a file in dir.
func shareSecret(ctx context.Context, dir string, info *Info) ([]byte, error) {
	host := HostID()
	path := filepath.Join(dir, secretFile)
	if info.Rank == 0 {
		r := ownRecord()
		r.secret = NewSecret()
		if err := writeRecord(dir, secretFile, r); err != nil {
			return nil, fmt.Errorf("bootstrap: rank 0: writing the job's secret: %w", err)
		}
		return r.secret, nil
	}
	delay := time.Duration(0)
	for {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			r, err := parseSecretRecord(b)
			if err != nil {
				return nil, fmt.Errorf("bootstrap: rank %d: %s: %v", info.Rank, path, err)
			}
			if err := checkPrivate(path); err != nil {
				return nil, err
			}
			if r.host != host || procAlive(r.pid, r.start) {
				return r.secret, nil
			}
			// Left by a rank 0 on this host that has died: wait for ours.
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("bootstrap: rank %d: %w", info.Rank, err)
		}
		delay = min(max(2*delay, minPoll), maxPoll)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, fmt.Errorf("bootstrap: rank %d: waiting for rank 0 to write the job's secret to %s: %w", info.Rank, path, ctx.Err())
		}
	}
}
