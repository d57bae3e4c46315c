//go:build cgo

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/bootstrap"
)

// uidMagic starts every unique id, so that bytes that are not one are
// told apart from one.
const uidMagic = "braid-uid-1"

// newUniqueID makes the text of a unique id: the address of the TCP store
// that rank 0 will serve (this host's address and a port free now), the
// job's secret and a fresh job id.
func newUniqueID() (string, error) {
	host := advertiseHost()
	listen := ":0"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		listen = net.JoinHostPort(host, "0")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", &braid.Error{Kind: braid.Internal, Rank: -1, Call: "get_unique_id", Peer: -1,
			Err: fmt.Errorf("finding a free port: %w", err)}
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	job := make([]byte, 8)
	rand.Read(job)
	return fmt.Sprintf("%s %s %x uid-%x", uidMagic, net.JoinHostPort(host, strconv.Itoa(port)),
		bootstrap.NewSecret(), job), nil
}

// advertiseHost is the address other hosts reach this one at:
// BRAID_ADVERTISE_ADDR, else the first address of the host name that is
// not a loopback one, else 127.0.0.1 (a job on this host only).
func advertiseHost() string {
	if a := os.Getenv("BRAID_ADVERTISE_ADDR"); a != "" {
		return a
	}
	if name, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(name); err == nil {
			for _, ip := range ips {
				if !ip.IsLoopback() && ip.To4() != nil {
					return ip.String()
				}
			}
		}
	}
	return "127.0.0.1"
}

// parseUniqueID splits the text of a unique id (NUL-padded) into the
// store's address, the secret in hex and the job id.
func parseUniqueID(id string) (store, secret, job string, err error) {
	if i := strings.IndexByte(id, 0); i >= 0 {
		id = id[:i]
	}
	f := strings.Fields(id)
	if len(f) != 4 || f[0] != uidMagic {
		return "", "", "", fmt.Errorf("the unique id is not one that braid_get_unique_id made (it begins %q)", cut(id, 40))
	}
	if _, err := hex.DecodeString(f[2]); err != nil {
		return "", "", "", fmt.Errorf("the unique id's secret is not hex")
	}
	return f[1], f[2], f[3], nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// envMu holds the process's environment while initRank hands an id to
// braid.Init through it.
var envMu sync.Mutex

// initRank joins the job that the unique id names as rank of size: it
// sets the variables of Braid's own launcher (bootstrap.EnvRank and the
// others), which take precedence over every other launcher's, for the
// time of braid.Init, and restores them after.
func initRank(size, rank int, id string, opts *braid.Options) (*braid.Comm, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, argErr(nil, "init", "rank %d of size %d: want 0 ≤ rank < size", rank, size)
	}
	store, secret, job, err := parseUniqueID(id)
	if err != nil {
		return nil, &braid.Error{Kind: braid.InvalidArgument, Rank: rank, Call: "init", Peer: -1, Err: err}
	}
	set := map[string]string{
		bootstrap.EnvRank:          strconv.Itoa(rank),
		bootstrap.EnvSize:          strconv.Itoa(size),
		bootstrap.EnvStore:         store,
		bootstrap.EnvSecret:        secret,
		bootstrap.EnvJob:           job,
		bootstrap.EnvStoreExternal: "", // rank 0 serves the store
		bootstrap.EnvLocalRank:     "", // unknown: Braid finds the hosts itself
		bootstrap.EnvLocalSize:     "",
	}
	envMu.Lock()
	defer envMu.Unlock()
	for k, v := range set {
		old, had := os.LookupEnv(k)
		if v == "" {
			os.Unsetenv(k)
		} else {
			os.Setenv(k, v)
		}
		defer func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		}()
	}
	return braid.Init(context.Background(), opts)
}
