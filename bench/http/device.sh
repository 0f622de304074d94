#!/usr/bin/env bash
# Runs on the GPU machine from the repository root: the HTTP source against
# parallel curl on loopback (bench/http/loopback.sh), over nginx and over the Python range server,
# HTTP and HTTPS, onto cuda:0 and host memory, with the pinned host-to-device ceiling measured in
# the same run. The floor (URL / parallel curl) is checked where the source is what bounds the
# load: nginx onto cuda:0, HTTP and HTTPS. Onto host memory the destination's first writes bound
# both the URL and the local file (curl writes to /dev/null), and the Python server bounds hoist
# and curl alike: those runs are reported, with the URL checked byte-equal as in every run. Carried: .device/ with hoist and hoist_ceilings (scripts/device/build.sh) and, where the
# machine has no nginx, .device/bin/nginx (a wrapper running Debian's nginx with its libraries
# in .device/lib). Every expectation it prints is checked: it exits 1 when one does not hold.
# Usage: bash bench/http/device.sh [SIZE] [MIN_RATIO]   (defaults: 8GiB 0.95). Results under $OUT.
set -uo pipefail
SIZE=${1:-8GiB}
FLOOR=${2:-0.95}
BIN=${HOIST_BIN:-$PWD/.device}
OUT=${OUT:-/tmp/hoist-device-out}
mkdir -p "$OUT"
export PATH="$BIN/bin:$PATH"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
failed=()

log "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; free -g | head -2
  uname -r; nginx -v; curl --version | head -1; } 2>&1 | tee -a "$OUT/log.txt"

log "ceiling: pinned host-to-device copies"
"$BIN/hoist_ceilings" h2d 2>&1 | tee -a "$OUT/log.txt" || failed+=("ceiling")

# name, then the environment and arguments of one loopback.sh run
run() {
  local name=$1
  shift
  log "$name"
  # pipefail: the status is loopback.sh's (1 where the floor did not hold), not tee's
  env "$@" 2>&1 | tee -a "$OUT/log.txt" || failed+=("$name")
}
run "nginx, HTTP, cuda:0, hoist's readers" MIN_RATIO="$FLOOR" bash bench/http/loopback.sh "$BIN/hoist" "$SIZE" cuda:0
run "nginx, HTTPS, cuda:0" MIN_RATIO="$FLOOR" TLS=1 bash bench/http/loopback.sh "$BIN/hoist" "$SIZE" cuda:0
run "nginx, HTTP, host memory" bash bench/http/loopback.sh "$BIN/hoist" "$SIZE" host
run "Python server, HTTP, cuda:0" NO_NGINX=1 bash bench/http/loopback.sh "$BIN/hoist" "$SIZE" cuda:0

if [ ${#failed[@]} -gt 0 ]; then
  log "FAILED: ${failed[*]}"
  exit 1
fi
log "every expectation held"
