package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Redis store keeps a job's keys in a Redis server that the launcher
// (or the site) runs: BRAID_STORE=redis://[:PASSWORD@]HOST:PORT[/DB]. The
// server is shared infrastructure, so the store authenticates what it
// reads rather than the server: every value is written with an
// HMAC-SHA256 of the job's secret over its key and value, and a Get that
// finds a value without a valid one fails, naming the key (a client
// without the secret can delete or overwrite keys, not plant addresses).
// Keys live under "braid:" and a hash of the secret and the job, so that
// neither another job nor anyone without the secret can name them, and
// expire after RedisTTL; the rank that owns the job's store deletes them
// when the job closes. The password, if the server wants one (requirepass),
// goes in the URL. Counters (Add) are Redis integers, not signed.

// RedisTTL is how long a job's keys live in the Redis server at most.
const RedisTTL = 24 * time.Hour

func isRedisStore(s string) bool { return strings.HasPrefix(s, "redis://") }

// redisStore is a Store in a Redis server, over one connection.
type redisStore struct {
	addr   string
	prefix string
	secret []byte

	mu     sync.Mutex // one request at a time
	c      net.Conn
	r      *bufio.Reader
	closed chan struct{}
	once   sync.Once
}

// DialRedisStore connects to the Redis server that spec
// ("redis://[:PASSWORD@]HOST:PORT[/DB]") names, as job with secret.
func DialRedisStore(ctx context.Context, spec, job string, secret []byte) (Store, error) {
	if len(secret) == 0 {
		return nil, fmt.Errorf("bootstrap: the Redis store %s needs the job's secret (%s)", redactRedis(spec), EnvSecret)
	}
	u, err := url.Parse(spec)
	if err != nil || u.Scheme != "redis" || u.Host == "" {
		return nil, fmt.Errorf("bootstrap: store %q: want redis://[:PASSWORD@]HOST:PORT[/DB]", redactRedis(spec))
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "6379")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: the Redis store at %s: %w", host, err)
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("braid redis store\x00" + job))
	s := &redisStore{addr: host, prefix: "braid:" + hex.EncodeToString(m.Sum(nil)[:12]) + ":", secret: secret,
		c: c, r: bufio.NewReaderSize(c, 64<<10), closed: make(chan struct{})}
	if pw, ok := u.User.Password(); ok {
		args := []string{"AUTH", pw}
		if name := u.User.Username(); name != "" {
			args = []string{"AUTH", name, pw}
		}
		if _, err := s.do(ctx, args...); err != nil {
			c.Close()
			return nil, fmt.Errorf("bootstrap: the Redis store at %s refused the password: %w", host, err)
		}
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if _, err := strconv.Atoi(db); err != nil {
			c.Close()
			return nil, fmt.Errorf("bootstrap: store %q: the database %q is not a number", redactRedis(spec), db)
		}
		if _, err := s.do(ctx, "SELECT", db); err != nil {
			c.Close()
			return nil, fmt.Errorf("bootstrap: the Redis store at %s: SELECT %s: %w", host, db, err)
		}
	}
	if _, err := s.do(ctx, "PING"); err != nil {
		c.Close()
		return nil, fmt.Errorf("bootstrap: the Redis store at %s: %w", host, err)
	}
	return s, nil
}

// redactRedis hides a password in a store URL.
func redactRedis(spec string) string {
	if u, err := url.Parse(spec); err == nil {
		return u.Redacted()
	}
	return "redis://..."
}

// errRedis is an error reply from the server.
type errRedis string

func (e errRedis) Error() string { return "redis: " + string(e) }

// do sends one command and reads its reply: a string, []byte (nil for a
// missing value), int64 or []any.
func (s *redisStore) do(ctx context.Context, args ...string) (any, error) {
	select {
	case <-s.closed:
		return nil, errClosed
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Not the context's deadline: a request cut short would lose the
	// reply stream, and with it the store. Redis answers at once; Get
	// honours the context between its polls.
	s.c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := s.c.Write(b.Bytes()); err != nil {
		return nil, s.ioErr(err)
	}
	v, err := readReply(s.r)
	if err != nil {
		var er errRedis
		if errors.As(err, &er) {
			return nil, err
		}
		return nil, s.ioErr(err)
	}
	return v, nil
}

func (s *redisStore) ioErr(err error) error {
	select {
	case <-s.closed:
		return errClosed
	default:
	}
	s.Close() // the reply stream is lost
	return fmt.Errorf("bootstrap: the Redis store at %s: %w", s.addr, err)
}

// readReply reads one RESP reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, errRedis(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > MaxValueLen+64 {
			return nil, fmt.Errorf("malformed bulk length %q", body)
		}
		if n == -1 {
			return []byte(nil), nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b[:n], nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 1<<20 {
			return nil, fmt.Errorf("malformed array length %q", body)
		}
		out := make([]any, 0, max(n, 0))
		for range n {
			v, err := readReply(r)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("malformed reply %q", line)
}

func (s *redisStore) sign(key string, value []byte) []byte {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("braid redis value\x00" + key + "\x00"))
	m.Write(value)
	return m.Sum(nil)
}

func (s *redisStore) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("bootstrap: value of %d bytes under %q: at most %d", len(value), key, MaxValueLen)
	}
	// A signed value starts with a zero byte, which no counter does.
	v := append(append([]byte{0}, s.sign(key, value)...), value...)
	_, err := s.do(ctx, "SET", s.prefix+key, string(v), "EX", strconv.Itoa(int(RedisTTL/time.Second)))
	return err
}

func (s *redisStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var delay time.Duration
	for {
		v, err := s.do(ctx, "GET", s.prefix+key)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("bootstrap: waiting for %q: %w", key, ctx.Err())
			}
			return nil, err
		}
		if b, _ := v.([]byte); b != nil {
			if len(b) > 0 && b[0] == 0 {
				if len(b) < 1+sha256.Size || !hmac.Equal(b[1:1+sha256.Size], s.sign(key, b[1+sha256.Size:])) {
					return nil, fmt.Errorf("bootstrap: the value under %q in the Redis store at %s is not signed with the job's secret (a client without it wrote it)", key, s.addr)
				}
				return b[1+sha256.Size:], nil
			}
			if _, err := strconv.ParseInt(string(b), 10, 64); err == nil {
				return b, nil // a counter
			}
			return nil, fmt.Errorf("bootstrap: the value under %q in the Redis store at %s is not signed with the job's secret (a client without it wrote it)", key, s.addr)
		}
		delay = min(max(2*delay, minPoll), maxPoll)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bootstrap: waiting for %q: %w", key, ctx.Err())
		case <-s.closed:
			return nil, errClosed
		case <-time.After(delay):
		}
	}
}

func (s *redisStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	v, err := s.do(ctx, "INCRBY", s.prefix+key, strconv.FormatInt(delta, 10))
	if err != nil {
		if strings.Contains(err.Error(), "not an integer") {
			return 0, fmt.Errorf("bootstrap: Add to %q: the value is not an integer", key)
		}
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("bootstrap: the Redis store at %s answered INCRBY with %v", s.addr, v)
	}
	s.do(ctx, "EXPIRE", s.prefix+key, strconv.Itoa(int(RedisTTL/time.Second)))
	return n, nil
}

// removeAll deletes the job's keys.
func (s *redisStore) removeAll(ctx context.Context) error {
	cursor := "0"
	for {
		v, err := s.do(ctx, "SCAN", cursor, "MATCH", s.prefix+"*", "COUNT", "1000")
		if err != nil {
			return err
		}
		a, ok := v.([]any)
		if !ok || len(a) != 2 {
			return fmt.Errorf("bootstrap: the Redis store at %s answered SCAN with %v", s.addr, v)
		}
		next, _ := a[0].([]byte)
		keys, _ := a[1].([]any)
		if len(keys) > 0 {
			args := []string{"DEL"}
			for _, k := range keys {
				if b, ok := k.([]byte); ok {
					args = append(args, string(b))
				}
			}
			if _, err := s.do(ctx, args...); err != nil {
				return err
			}
		}
		if cursor = string(next); cursor == "0" || cursor == "" {
			return nil
		}
	}
}

func (s *redisStore) Close() error {
	s.once.Do(func() {
		close(s.closed)
		s.c.Close()
	})
	return nil
}

// openRedisStore opens info's Redis store; the closer of rank 0 waits for
// every rank's, then deletes the job's keys.
func openRedisStore(ctx context.Context, info *Info) (Store, func() error, error) {
	st, err := DialRedisStore(ctx, info.Store, info.JobID, info.Secret)
	if err != nil {
		return nil, nil, err
	}
	rs := st.(*redisStore)
	closer := checkOut(rs, info, info.Rank == 0, func() error {
		defer rs.Close()
		if info.Rank != 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		defer cancel()
		return rs.removeAll(ctx)
	})
	return rs, closer, nil
}
