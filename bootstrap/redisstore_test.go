package bootstrap

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// redisServer starts redis-server (Debian's redis-server package) on a
// free loopback port with a password and no persistence, and returns its
// store URL; it skips the test, saying so, where redis-server is missing.
func redisServer(t *testing.T) (url, addr, password string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("needs redis-server (apt-get install redis-server) for the Redis store")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	password = "redis-test-password"
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--requirepass", password,
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", dir+"/redis.log")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			log, _ := os.ReadFile(dir + "/redis.log")
			t.Fatalf("redis-server did not start: %v\n%s", err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Sprintf("redis://:%s@%s/0", password, addr), addr, password
}

func TestRedisStore(t *testing.T) {
	url, _, _ := redisServer(t)
	job := 0
	testStore(t, func(t *testing.T, n int) []Store {
		job++
		var ss []Store
		for range n {
			s, err := DialRedisStore(context.Background(), url, fmt.Sprint("job", job), testSecret)
			if err != nil {
				t.Fatal(err)
			}
			ss = append(ss, s)
		}
		return ss
	})
}

// TestRedisStoreAuth: a wrong password is refused with a clear error; a
// job with another secret does not see the job's keys; a value that a
// client without the secret writes under the job's key is not taken.
func TestRedisStoreAuth(t *testing.T) {
	url, addr, password := redisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := strings.Replace(url, password, "wrong", 1)
	if _, err := DialRedisStore(ctx, bad, "job", testSecret); err == nil || !strings.Contains(err.Error(), "refused the password") {
		t.Fatalf("wrong password: %v", err)
	}
	s, err := DialRedisStore(ctx, url, "job", testSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Set(ctx, "addr/0", []byte("10.0.0.1:1234")); err != nil {
		t.Fatal(err)
	}
	other, err := DialRedisStore(ctx, url, "job", []byte("another-secret-0123456789abcdef!"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if v, err := other.Get(short, "addr/0"); err == nil {
		t.Fatalf("a job with another secret read %q", v)
	}
	// A client with the password but not the secret overwrites the key.
	rs := s.(*redisStore)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "AUTH %s\r\nSET %saddr/0 evil:1\r\n", password, rs.prefix)
	r := bufio.NewReader(c)
	r.ReadString('\n')
	r.ReadString('\n')
	if v, err := s.Get(ctx, "addr/0"); err == nil || !strings.Contains(err.Error(), "not signed with the job's secret") {
		t.Fatalf("Get of a planted value = %q, %v", v, err)
	}
}

// TestOpenRedisStore: ranks bootstrap through the Redis store (Open), and
// the job's keys are gone once every rank has closed it.
func TestOpenRedisStore(t *testing.T) {
	url, addr, password := redisServer(t)
	infos := ranks(3, url, "redisjob")
	for i := range infos {
		infos[i].Secret = testSecret
	}
	_, closers := runRanks(t, infos)
	closeRanks(t, closers)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "AUTH %s\r\nDBSIZE\r\n", password)
	r := bufio.NewReader(c)
	r.ReadString('\n')
	n, _ := r.ReadString('\n')
	if strings.TrimSpace(n) != ":0" {
		t.Fatalf("keys left in Redis after the job: %q", n)
	}
}
