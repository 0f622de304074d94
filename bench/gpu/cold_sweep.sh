#!/usr/bin/env bash
# Cold loads (page cache dropped before each) over chunk size and staging budget, direct I/O,
# beside the raw direct-read ceilings of the same run. Usage: bash bench/gpu/cold_sweep.sh
# (CEILINGS="THREADS:CHUNK_MIB ..." and LOADS="CHUNK_MIB:STAGING_MIB ..." choose the configurations)
set -uo pipefail
BIN=${HOIST_BIN:-.device}
OUT=${OUT:-/tmp/hoist-device-out}
MODEL=${HOIST_MODEL_DIR:-/root/hoist-model}/model.safetensors
mkdir -p "$OUT" "$(dirname "$MODEL")"
[ -f "$MODEL" ] || { $BIN/hoist make-sample "$MODEL" --format safetensors --size 20GiB --seed 11 >/dev/null; sync; }
drop() { sync; echo 1 >/proc/sys/vm/drop_caches; }
for cfg in ${CEILINGS:-8:16 8:64 16:16}; do
  set -- ${cfg/:/ }
  drop; $BIN/hoist_ceilings read "$MODEL" --threads $1 --chunk-mib $2 --direct | tee -a "$OUT/cold.jsonl"
done
for cfg in ${LOADS:-4:64 8:64 16:128 32:256 64:512}; do
  set -- ${cfg/:/ }
  drop
  $BIN/hoist load "$MODEL" --device cuda:0 --io direct --json --quiet --chunk $1 --staging $2 >"$OUT/cold_c$1_s$2.json"
  python3 - "$OUT/cold_c$1_s$2.json" $1 $2 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"hoist cold direct chunk {sys.argv[2]} MiB staging {sys.argv[3]} MiB: {d['gbps']:.2f} GB/s")
PY
done
