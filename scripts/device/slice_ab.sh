#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), carry [".device"] (scripts/device/prepare.sh, or
# any earlier .device with hoist and hoist_ceilings). Column slices gathered out of the page
# cache against whole rows read, in one run and alternated: scripts/device/slice_probe.py with
# HOIST_GATHER=off and on, twice each, on the 20 GiB safetensors sample, with the page-cache
# read ceiling (16 readers, as the loads use) and the pinned copy ceiling measured beside them.
# Then again with 8 readers, whose page-cache read matches the slower machines', and
# scripts/device/python_stream.py (get_slice and the rest, bit for bit against safetensors).
# Results under $OUT: log.txt, slice_{off,on}_{1,2}.json, slice8_{off,on}_{1,2}.json,
# python_stream.json, all in slices.tar.gz.
set -uo pipefail
BIN=$PWD/.device
OUT=${OUT:-/tmp/hoist-device-out}
MODEL_DIR=${HOIST_MODEL_DIR:-/root/hoist-model}
MODEL=$MODEL_DIR/model.safetensors
mkdir -p "$OUT" "$MODEL_DIR"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; free -g | head -2; uname -r; } 2>&1 | tee -a "$OUT/log.txt"
if [ ! -f "$MODEL" ]; then
  log "writing the 20 GiB safetensors sample"
  $BIN/hoist make-sample "$MODEL" --format safetensors --size 20GiB --seed 11 2>&1 | tail -2 | tee -a "$OUT/log.txt"
fi
# shellcheck source=scripts/device/build_python.sh
source scripts/device/build_python.sh
build_python || exit 1
cat "$MODEL" >/dev/null
log "ceilings: page-cache read (16 and 8 readers) and pinned host-to-device"
for t in 16 8; do $BIN/hoist_ceilings read "$MODEL" --threads $t --chunk-mib 8 | tee -a "$OUT/log.txt"; done
$BIN/hoist_ceilings h2d --mib-per-copy 64 --total-gib 8 | tee -a "$OUT/log.txt"
probe() {  # NAME GATHER ARGS...
  local name=$1 gather=$2
  shift 2
  log "slice_probe HOIST_GATHER=$gather $*"
  HOIST_GATHER=$gather PYTHONPATH=$PWD/build-py/python PYTHONUNBUFFERED=1 python3 scripts/device/slice_probe.py \
    "$MODEL" --out "$OUT/$name.json" "$@" 2>&1 | tee -a "$OUT/log.txt"
}
for round in 1 2; do
  for gather in off on; do probe "slice_${gather}_${round}" $gather; done
done
# Eight readers: a page-cache read rate like the slower machines of this kind (55-61 GB/s).
for round in 1 2; do
  for gather in off on; do probe "slice8_${gather}_${round}" $gather --threads 8; done
done
log "python_stream.py: get_slice and the rest against safetensors, bit for bit (gathering)"
PYTHONPATH=$PWD/build-py/python PYTHONUNBUFFERED=1 python3 scripts/device/python_stream.py \
  "$MODEL" --device cuda:0 --out "$OUT/python_stream.json" 2>&1 | tee -a "$OUT/log.txt"
# The device tool brings back a few files: the JSON in one archive.
(cd "$OUT" && tar czf slices.tar.gz ./*.json && rm -f ./*.json build.txt cmake.txt)
