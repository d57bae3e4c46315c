#!/usr/bin/env bash
# The chaos and soak campaigns (docs/RELIABILITY.md): builds braid, the
# test program internal/testprog/mix and the driver internal/testprog/chaos,
# and runs the driver. Needs root (every job mounts its own /dev/shm and
# /tmp in a mount namespace) and ss(8) from iproute2 for the closed-socket
# faults; without root, or where it cannot mount in a new mount namespace,
# it says so and exits 0.
#
#	scripts/chaos.sh chaos [-jobs 200] [-seed 1] [-v] ...    faults, counts per kind
#	scripts/chaos.sh soak [-duration 1h] [-ranks 4] ...      one long job, RSS and fds
#
# Other flags go to the driver (go run ./internal/testprog/chaos -h).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
mode=${1:-chaos}
shift || true
if [ "$(id -u)" != 0 ]; then
    echo "chaos.sh: skipped: needs root to give every job its own /dev/shm and /tmp"
    exit 0
fi
if ! unshare -m sh -c 'mount -t tmpfs chaos-probe /dev/shm' 2>/dev/null; then
    echo "chaos.sh: skipped: cannot mount a tmpfs in a new mount namespace (no CAP_SYS_ADMIN, or no unshare)"
    exit 0
fi
if [ "$mode" = chaos ] && ! command -v ss >/dev/null 2>&1; then
    echo "chaos.sh: ss (iproute2) is missing: the closed-socket faults need it" >&2
    exit 1
fi
# Not under /tmp, which every job mounts over.
dir=$(mktemp -d /var/tmp/braid-chaos.XXXXXX)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/" ./cmd/braid ./internal/testprog/mix ./internal/testprog/chaos
"$dir/chaos" -mode "$mode" -braid "$dir/braid" -mix "$dir/mix" -work "$dir/work" "$@"
