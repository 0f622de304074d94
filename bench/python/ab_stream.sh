#!/usr/bin/env bash
# bench/python/stream.py (safe_open's get_tensor and get_slice on a GPU, iter_tensors) for two
# builds of hoist's Python package alternated in one run on any GPU machine: A, an earlier tree
# (.device/ab/old.tar.gz, made with `git archive --prefix=old/ REV | gzip`), and B, this one.
# Usage: bash bench/python/ab_stream.sh MODEL.safetensors, with .device/ in the repository's root (the
# header-only dependencies in .device/include). KEEP_BUILDS=1 reuses the builds an earlier A/B
# script of this run left in /tmp/ab. ROUNDS (default 2).
# The expectations, checked (exit 1 if one fails): every tensor and slice of every run bit-equal
# to safetensors'; B's best safe_open get_tensor rate at least AB_MIN_GET_TENSOR (0.95) of A's;
# B's best get_slice rate at least AB_MIN_SLICE (0.5) of A's; B's best iter_tensors rate at least
# AB_MIN_GET_TENSOR of A's. Results: $OUT/log.txt, $OUT/stream-SIDE-ROUND.json.
set -uo pipefail
BIN=$PWD/.device
OUT=${OUT:-/tmp/hoist-device-out}
MODEL=${1:?usage: ab_stream.sh MODEL.safetensors}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
# shellcheck source=scripts/device/build_python.sh
. scripts/device/build_python.sh
if [ -z "${KEEP_BUILDS:-}" ] || [ ! -f /tmp/ab/build-b/python/hoist/__init__.py ]; then
  rm -rf /tmp/ab && mkdir -p /tmp/ab && tar xzf .device/ab/old.tar.gz -C /tmp/ab
  log "building A (the old tree) and B (this one)"
  (build_python_tree /tmp/ab/old /tmp/ab/build-a) & (build_python_tree "$PWD" /tmp/ab/build-b) & wait
fi
for side in a b; do
  ls /tmp/ab/build-$side/python/hoist/_native*.so >/dev/null 2>&1 || { echo "FAIL: build $side"; exit 1; }
done
log "ceilings"
cat "$MODEL" >/dev/null
$BIN/hoist_ceilings read "$MODEL" --threads 16 --chunk-mib 8 | tee -a "$OUT/log.txt"
$BIN/hoist_ceilings h2d --mib-per-copy 64 --total-gib 8 | tee -a "$OUT/log.txt"
failed=0
for round in $(seq "$ROUNDS"); do
  for side in a b; do
    log "$side round $round"
    PYTHONPATH=/tmp/ab/build-$side/python PYTHONUNBUFFERED=1 python3 bench/python/stream.py \
      "$MODEL" --out "$OUT/stream-$side-$round.json" 2>&1 | tee -a "$OUT/log.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || { echo "FAIL: stream.py $side round $round" | tee -a "$OUT/log.txt"; failed=1; }
  done
done
python3 - "$OUT" "${AB_MIN_GET_TENSOR:-0.95}" "${AB_MIN_SLICE:-0.5}" <<'PY' | tee -a "$OUT/log.txt" || failed=1
import glob, json, sys
out, min_get, min_slice = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
best, ok = {}, True
for path in sorted(glob.glob(f"{out}/stream-*.json")):
    side = path.rsplit("/", 1)[1].split("-")[1]
    run = json.load(open(path))
    if run.get("iter_tensors_mismatches") != 0:
        print(f"FAIL: {path}: iter_tensors mismatches {run.get('iter_tensors_mismatches')}")
        ok = False
    for r in run["runs"]:
        if r.get("bit_equal") is False:
            print(f"FAIL: {path}: {r['what']} not bit-equal")
            ok = False
        key = (side, r["what"])
        best[key] = max(best.get(key, 0.0), r["gbps"])
for what, bound in (("hoist.safetensors safe_open get_tensor (all keys)", min_get),
                    ("hoist.safetensors get_slice[:, :half] (2-D tensors)", min_slice),
                    ("hoist.iter_tensors (consumer takes each)", min_get)):
    a, b = best.get(("a", what)), best.get(("b", what))
    if a is None or b is None:
        print(f"FAIL: {what}: no figure for both sides")
        ok = False
        continue
    verdict = "ok" if b >= bound * a else "FAIL"
    ok = ok and verdict == "ok"
    print(f"{verdict}: {what}: B {b:.2f} GB/s against A {a:.2f} (B/A {b / a:.3f}; at least {bound} expected)")
sys.exit(0 if ok else 1)
PY
echo "stream A/B: $([ $failed = 0 ] && echo ok || echo FAIL)" | tee -a "$OUT/log.txt"
exit $failed
