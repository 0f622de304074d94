#!/usr/bin/env bash
# Runs on the GPU machine with .device/ in the repository's root and .device/ab/old.tar.gz an
# earlier tree (`git archive --prefix=old/ REV | gzip > .device/ab/old.tar.gz`): builds the
# Python module of that tree and of this one, then loads the 20 GiB safetensors sample warm with
# hoist.load_file onto cuda:0, alternating A (old) and B (this), with the pinned copy ceiling
# and the page-cache read measured in the same run. Results: $OUT/log.txt. KEEP_BUILDS=1: see below.
set -uo pipefail
BIN=$PWD/.device
OUT=${OUT:-/tmp/hoist-device-out}
MODEL=${HOIST_MODEL_DIR:-/root/hoist-model}/model.safetensors
SIZE=${HOIST_SIZE:-20GiB}
mkdir -p "$OUT" "$(dirname "$MODEL")"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
[ -f "$MODEL" ] || $BIN/hoist make-sample "$MODEL" --format safetensors --size "$SIZE" --seed 11 | tail -1
# shellcheck source=scripts/device/build_python.sh
. scripts/device/build_python.sh
# KEEP_BUILDS=1 reuses the two builds an earlier A/B script of this run left in /tmp/ab.
if [ -z "${KEEP_BUILDS:-}" ] || [ ! -f /tmp/ab/build-b/python/hoist/__init__.py ]; then
  rm -rf /tmp/ab && mkdir -p /tmp/ab && tar xzf .device/ab/old.tar.gz -C /tmp/ab
  log "building A (the old tree) and B (this one)"
  (build_python_tree /tmp/ab/old /tmp/ab/build-a) & (build_python_tree "$PWD" /tmp/ab/build-b) & wait
fi
[ -f /tmp/ab/build-a/python/hoist/__init__.py ] && [ -f /tmp/ab/build-b/python/hoist/__init__.py ] || { tail -30 /tmp/ab/build-*/*.txt; exit 1; }
cat "$MODEL" >/dev/null
$BIN/hoist_ceilings read "$MODEL" --threads 16 --chunk-mib 8 | tee -a "$OUT/log.txt"
$BIN/hoist_ceilings h2d --mib-per-copy 64 --total-gib 8 | tee -a "$OUT/log.txt"
for round in 1 2 3; do
  for side in a b; do
    PYTHONPATH=/tmp/ab/build-$side/python python3 - "$MODEL" "$side" "$round" <<'PY' 2>&1 | tee -a "$OUT/log.txt"
import sys, time, torch, hoist
path, side, run = sys.argv[1:]
hoist.load_file(path, device="cuda:0")  # warm-up: the context, pinned staging, the allocator
torch.cuda.synchronize()
times = []
for _ in range(3):
    start = time.perf_counter()
    t = hoist.load_file(path, device="cuda:0")
    torch.cuda.synchronize()
    times.append(time.perf_counter() - start)
    n = sum(x.numel() * x.element_size() for x in t.values())
    del t
print(f"{side.upper()} round {run}: hoist.load_file cuda:0 {n / min(times) / 1e9:6.2f} GB/s best of "
      f"{[round(x, 3) for x in times]} s")
PY
  done
done
# The expectation: B's median of the rounds' bests within 2% of A's (or faster).
python3 - "$OUT/log.txt" <<'PY'
import re, statistics, sys
rates = {"A": [], "B": []}
for side, rate in re.findall(r"^([AB]) round \d+: hoist.load_file cuda:0 +([\d.]+) GB/s",
                             open(sys.argv[1]).read(), re.M):
    rates[side].append(float(rate))
if len(rates["A"]) != 3 or len(rates["B"]) != 3:
    sys.exit(f"FAIL: expected 3 rounds per side, got {rates}")
a, b = statistics.median(rates["A"]), statistics.median(rates["B"])
verdict = "ok" if b >= 0.98 * a else "FAIL"
print(f"{verdict}: B/A = {b / a:.3f} (medians {b:.2f} / {a:.2f} GB/s; within 2% expected)")
sys.exit(0 if verdict == "ok" else 1)
PY
