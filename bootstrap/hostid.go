package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// HostID returns this process's host identity: ranks with equal
// identities run on one machine and can share memory; the others must
// talk over the network. It is the host name, "#", and 8 hex digits of a
// hash of what tells apart machines and containers that share a host
// name:
//
//   - the kernel's boot id (/proc/sys/kernel/random/boot_id), which
//     differs between machines;
//   - the network namespace (/proc/self/ns/net): two namespaces have
//     different loopback interfaces, so 127.0.0.1 reaches a different
//     process in each;
//   - the PID namespace (/proc/self/ns/pid): shared memory needs the peers'
//     process ids, for liveness and single-copy reads;
//   - the device of /dev/shm's file system: containers that mount their
//     own /dev/shm cannot open each other's segments.
//
// NCCL hashes the host name with the boot id alike (its host hash) and
// checks /dev/shm's device before using shared memory. A fact that cannot
// be read (no /proc) is left out, so that without /proc the identity
// depends on the host name alone. BRAID_HOST (Options.Host) replaces the
// identity as a whole.
func HostID() string {
	f := hostFacts{bootID: readTrim("/proc/sys/kernel/random/boot_id")}
	f.name, _ = os.Hostname()
	f.netNS, _ = os.Readlink("/proc/self/ns/net")
	f.pidNS, _ = os.Readlink("/proc/self/ns/pid")
	var st syscall.Stat_t
	if syscall.Stat("/dev/shm", &st) == nil {
		f.shmDev = fmt.Sprint(st.Dev)
	}
	return f.id()
}

// hostFacts are what HostID is made of.
type hostFacts struct {
	name, bootID, netNS, pidNS, shmDev string
}

func (f hostFacts) id() string {
	name := f.name
	if name == "" {
		name = "localhost"
	}
	if f.bootID == "" && f.netNS == "" && f.pidNS == "" && f.shmDev == "" {
		return name
	}
	h := sha256.Sum256([]byte(strings.Join([]string{"braid-host 1", f.bootID, f.netNS, f.pidNS, f.shmDev}, "\x00")))
	return name + "#" + hex.EncodeToString(h[:4])
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// HostName returns the host name part of a host identity (HostID): what
// precedes "#".
func HostName(id string) string {
	name, _, _ := strings.Cut(id, "#")
	return name
}
