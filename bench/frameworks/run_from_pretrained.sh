#!/usr/bin/env bash
# transformers' from_pretrained on the GPU machine, each load in a fresh process, the modes
# alternated in one run with the ceilings measured beside them, every parameter compared bit for
# bit with the plain load's. Run on the GPU machine with .device/ in the repository's root after
# scripts/device/prepare.sh:
#   bash bench/frameworks/run_from_pretrained.sh
# Environment: MODES (default "plain patch transformers"), ROUNDS (warm rounds, default 3),
# COLD=0 skips the cold loads, AUTO=0 the device_map="auto" and two-device (cuda:0 plus cpu)
# loads, CONSUMERS=0 accelerate, PEFT and sentence-transformers (bench/frameworks/consumers.py),
# LAYERS (32: an 8B llama shape, 16 GB), HOIST_MODEL_DIR. Results: $OUT/log.txt,
# $OUT/results.jsonl. Exits 1 when a load fails or is not bit-equal to the plain one.
set -uo pipefail
BIN=$PWD/.device
OUT=${OUT:-/tmp/hoist-device-out}
MODEL=${HOIST_MODEL_DIR:-/root/hoist-llama}
MODES=${MODES:-plain patch transformers}
ROUNDS=${ROUNDS:-3}
HARNESS=$PWD/bench/frameworks/from_pretrained.py
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
. scripts/device/build_python.sh
build_python || exit 1
export PYTHONPATH=$PWD/build-py/python PYTHONUNBUFFERED=1
if [ ! -f "$MODEL/config.json" ]; then
  log "writing a llama-shaped checkpoint to $MODEL"
  python3 "$HARNESS" make "$MODEL" --layers "${LAYERS:-32}" 2>&1 | tail -1 | tee -a "$OUT/log.txt"
fi
largest=$(ls -S "$MODEL"/*.safetensors | head -1)
failed=0
run() {  # MODE DEVICE_MAP TAG
  if ! python3 "$HARNESS" load "$MODEL" --mode "$1" --device-map "$2" --fingerprint "/tmp/fp-$3.json" \
      --tag "$3" 2>"/tmp/stderr-$3.txt" | tee -a "$OUT/results.jsonl"; then
    { echo "$3 failed:"; tail -15 "/tmp/stderr-$3.txt"; } | tee -a "$OUT/log.txt"
    failed=1
  fi
}
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
log "ceilings"
$BIN/hoist_ceilings h2d --mib-per-copy 64 --total-gib 8 | tee -a "$OUT/log.txt"
cat "$MODEL"/*.safetensors >/dev/null
$BIN/hoist_ceilings read "$largest" --threads 16 --chunk-mib 8 | tee -a "$OUT/log.txt"
log "warm, device_map=cuda:0"
for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do run "$mode" cuda:0 "$mode-warm-$round"; done
done
if [ "${COLD:-1}" != 0 ]; then
  log "cold, device_map=cuda:0"
  drop; $BIN/hoist_ceilings read "$largest" --threads 16 --chunk-mib 16 --direct | tee -a "$OUT/log.txt"
  for mode in $MODES; do drop; run "$mode" cuda:0 "$mode-cold"; done
fi
if [ "${AUTO:-1}" != 0 ]; then
  log "device_map=auto, a quarter of the model on the CPU"
  cat "$MODEL"/*.safetensors >/dev/null
  for mode in $MODES; do run "$mode" auto-cpu "$mode-auto"; done
  log "a two-device device_map: half the layers on cuda:0, the rest and the head on the CPU"
  for mode in $MODES; do run "$mode" half-cpu "$mode-half"; done
fi
if [ "${CONSUMERS:-1}" != 0 ]; then
  CONSUMERS_PY=$PWD/bench/frameworks/consumers.py
  [ -d /root/hoist-consumers/sentence ] || python3 "$CONSUMERS_PY" make /root/hoist-consumers \
    2>"/tmp/stderr-make.txt" | tee -a "$OUT/log.txt" || tail -15 "/tmp/stderr-make.txt"
  for what in accelerate peft sentence; do
    dir=/root/hoist-consumers; [ "$what" = accelerate ] && dir=$MODEL
    log "$what, unchanged"
    for mode in plain patch plain patch; do
      n=$(ls /tmp/fp-"$what"-"$mode"-*.json 2>/dev/null | wc -l)
      python3 "$CONSUMERS_PY" load "$what" "$dir" --mode "$mode" --tag "$what-$mode-$((n + 1))" \
        --fingerprint "/tmp/fp-$what-$mode-$((n + 1)).json" 2>"/tmp/stderr-$what.txt" \
        | tee -a "$OUT/consumers.jsonl" \
        || { failed=1; tail -15 "/tmp/stderr-$what.txt" | tee -a "$OUT/log.txt"; }
    done
  done
fi
log "bit for bit against the plain load"
for f in /tmp/fp-*.json; do
  tag=$(basename "$f" .json); tag=${tag#fp-}
  case $tag in plain-warm-1|plain-auto|plain-half|*-plain-1) continue ;; esac
  ref=/tmp/fp-plain-warm-1.json
  case $tag in
    *-auto) ref=/tmp/fp-plain-auto.json ;;
    *-half) ref=/tmp/fp-plain-half.json ;;
    accelerate-*|peft-*|sentence-*) ref=/tmp/fp-${tag%%-*}-plain-1.json ;;
  esac
  if [ -f "$ref" ]; then python3 "$HARNESS" compare "$ref" "$f" | tee -a "$OUT/log.txt" || failed=1; fi
done
log "summary (seconds, GB/s, peak GPU GB)"
python3 - "$OUT/results.jsonl" $( [ -f "$OUT/consumers.jsonl" ] && echo "$OUT/consumers.jsonl") <<'PY' | tee -a "$OUT/log.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['tag']:>22} {r['seconds']:7.2f} s {r['gbps']:6.2f} GB/s "
          f"peak {r['peak_gpu_gb']:6.2f} GB {','.join(r['devices'])}")
for line in open(sys.argv[2]) if len(sys.argv) > 2 else []:
    r = json.loads(line)
    print(f"{r['tag']:>22} {r['seconds']:7.2f} s {r['gb']:6.2f} GB {r['tensors']} tensors "
          f"{','.join(r['devices'])}")
PY
# The expectations: every load ran, and is bit-equal to its plain counterpart.
echo "every load ran and is bit-equal: $([ $failed = 0 ] && echo ok || echo FAIL)" | tee -a "$OUT/log.txt"
exit $failed
