#!/usr/bin/env bash
# transformers' from_pretrained through hoist, two builds of hoist's Python package alternated in
# one run on any GPU machine: A, an earlier tree (.device/ab/old.tar.gz, made with
# `git archive --prefix=old/ REV | gzip`), and B, this one; plain safetensors beside them. Each
# load is a fresh process, warm, with device_map="cuda:0"; every parameter of every load is
# compared bit for bit with the plain load's. The expectations, checked (exit 1 if one fails):
# every load bit-equal, and B's median time within 5% of A's for `patch` and `transformers`.
# Run with .device/ in the repository's root (the header-only dependencies in .device/include, the hoist binary
# for the ceilings); ROUNDS (default 3), MODES (default "patch transformers"), LAYERS (32: an 8B
# llama shape, 16 GB), HOIST_LLAMA_DIR. Results: $OUT/log.txt, $OUT/results.jsonl.
set -uo pipefail
BIN=$PWD/.device
OUT=${OUT:-/tmp/hoist-device-out}
MODEL=${HOIST_LLAMA_DIR:-/root/hoist-llama}
ROUNDS=${ROUNDS:-3}
MODES=${MODES:-patch transformers}
HARNESS=$PWD/bench/frameworks/from_pretrained.py
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
# shellcheck source=scripts/device/build_python.sh
. scripts/device/build_python.sh
rm -rf /tmp/ab && mkdir -p /tmp/ab && tar xzf .device/ab/old.tar.gz -C /tmp/ab
log "building A (the old tree) and B (this one)"
(build_python_tree /tmp/ab/old /tmp/ab/build-a) & (build_python_tree "$PWD" /tmp/ab/build-b) & wait
for side in a b; do
  ls /tmp/ab/build-$side/python/hoist/_native*.so >/dev/null 2>&1 \
    || { echo "FAIL: build $side"; tail -30 /tmp/ab/build-$side/*.txt; exit 1; }
done
if [ ! -f "$MODEL/config.json" ]; then
  log "writing a llama-shaped checkpoint to $MODEL"
  PYTHONPATH=/tmp/ab/build-b/python python3 "$HARNESS" make "$MODEL" --layers "${LAYERS:-32}" 2>&1 | tail -1 | tee -a "$OUT/log.txt"
fi
largest=$(ls -S "$MODEL"/*.safetensors | head -1)
log "ceilings"
$BIN/hoist_ceilings h2d --mib-per-copy 64 --total-gib 8 | tee -a "$OUT/log.txt"
cat "$MODEL"/*.safetensors >/dev/null
$BIN/hoist_ceilings read "$largest" --threads 16 --chunk-mib 8 | tee -a "$OUT/log.txt"
failed=0
run() {  # SIDE MODE TAG
  if PYTHONPATH=/tmp/ab/build-$1/python PYTHONUNBUFFERED=1 python3 "$HARNESS" load "$MODEL" \
      --mode "$2" --fingerprint "/tmp/fp-$3.json" --tag "$3" >"/tmp/result-$3.json" \
      2>"/tmp/stderr-$3.txt"; then
    tee -a "$OUT/results.jsonl" <"/tmp/result-$3.json"
  else
    { echo "FAIL: $3"; tail -15 "/tmp/stderr-$3.txt"; } | tee -a "$OUT/log.txt"
    failed=1
  fi
}
log "warm, device_map=cuda:0, A and B alternated"
for round in $(seq "$ROUNDS"); do
  [ "$round" -le 3 ] && run b plain "plain-$round"
  for mode in $MODES; do
    run a "$mode" "a-$mode-$round"
    run b "$mode" "b-$mode-$round"
  done
done
log "bit for bit against the plain load"
for f in /tmp/fp-*.json; do
  [ "$f" = /tmp/fp-plain-1.json ] && continue
  python3 "$HARNESS" compare /tmp/fp-plain-1.json "$f" | tee -a "$OUT/log.txt" || failed=1
done
log "medians (seconds), B against A"
python3 - "$OUT/results.jsonl" $MODES <<'PY' | tee -a "$OUT/log.txt" || failed=1
import json, statistics, sys
times = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    times.setdefault(r["tag"].rsplit("-", 1)[0], []).append(r["seconds"])
ok = True
print("plain", statistics.median(times["plain"]), times["plain"])
for mode in sys.argv[2:]:
    a, b = statistics.median(times[f"a-{mode}"]), statistics.median(times[f"b-{mode}"])
    verdict = "ok" if b <= 1.05 * a else "FAIL"
    ok = ok and verdict == "ok"
    print(f"{verdict}: {mode} B {b:.3f} s against A {a:.3f} s (B/A {b / a:.3f}; within 5% expected),"
          f" plain {statistics.median(times['plain']):.3f} s; A {times[f'a-{mode}']}, B {times[f'b-{mode}']}")
sys.exit(0 if ok else 1)
PY
rm -f /tmp/fp-*.json
echo "frameworks A/B: $([ $failed = 0 ] && echo ok || echo FAIL)" | tee -a "$OUT/log.txt"
exit $failed
