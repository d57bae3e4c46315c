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
	}
	sum := sha256.Sum256(append(append([]byte("braid-file-store\x00"), info.Secret...), "\x00"+info.JobID...))
	run := filepath.Join(dir, "run-"+hex.EncodeToString(sum[:8]))
	fs, err := NewFileStore(run)
	if err != nil {
		return nil, nil, err
	}
	closer := checkOut(fs, info, info.Rank == 0, func() error {
		fs.Close()
		if info.Rank != 0 {
			return nil
		}
		err := os.RemoveAll(run)
		if ownSecret {
			os.Remove(filepath.Join(dir, secretFile))
		}
		if info.JobID != "" && filepath.Base(dir) == info.JobID {
			os.Remove(dir) // the job's directory, if nothing else is left in it
		}
		return err
	})
	return fs, closer, nil
}

func openTCPStore(ctx context.Context, info *Info) (Store, func() error, error) {
	host, port, err := net.SplitHostPort(info.Store)
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap: store %q: want HOST:PORT or file:DIR", info.Store)
	}
	var secretPath string
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
		if info.Rank == 0 {
			secretPath = filepath.Join(dir, secretFile)
		}
	}
	cleanup := func() {
		if secretPath != "" {
			os.Remove(secretPath)
			os.Remove(filepath.Dir(secretPath))
		}
	}
	if !info.ServeStore {
		s, err := DialTCPStore(ctx, info.Store, info.Secret)
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("bootstrap: rank %d: %w", info.Rank, err)
		}
		return s, checkOut(s, info, false, func() error { cleanup(); return s.Close() }), nil
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
	return s, checkOut(s, info, true, func() error { s.Close(); cleanup(); return srv.Close() }), nil
}

// closedKey counts the ranks that have called their closer.
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
//	host HOSTNAME
//	pid PID
//	start START (clock ticks after boot, from /proc/PID/stat)
//	secret HEX
type secretRecord struct {
	host   string
	pid    int
	start  uint64
	secret []byte
}

func (r secretRecord) encode() []byte {
	return fmt.Appendf(nil, "braid-secret 1\nhost %s\npid %d\nstart %d\nsecret %x\n", r.host, r.pid, r.start, r.secret)
}

func parseSecretRecord(b []byte) (secretRecord, error) {
	var r secretRecord
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) != 5 || lines[0] != "braid-secret 1" {
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
	if len(r.secret) < MinSecretLen {
		return r, errors.New("secret too short")
	}
	return r, nil
}

// shareSecret hands a fresh secret from rank 0 to the other ranks through
// a file in dir.
func shareSecret(ctx context.Context, dir string, info *Info) ([]byte, error) {
	host, _ := os.Hostname()
	path := filepath.Join(dir, secretFile)
	if info.Rank == 0 {
		r := secretRecord{host: host, pid: os.Getpid(), secret: NewSecret()}
		_, r.start, _ = procStat(r.pid)
		if err := writeFileAtomic(dir, secretFile, r.encode()); err != nil {
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
