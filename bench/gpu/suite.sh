#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .device/ in it holding
# hoist and hoist_ceilings from scripts/device/build.sh, and .device/include with the
# header-only dependencies (scripts/device/prepare.sh makes both). Each part writes the 20 GiB
# safetensors sample model first if it is not there, and fits in one device call:
#   python: builds the Python module there (its python 3.12) and runs
#           bench/python/vs_safetensors.py
#   stream: the same module's hoist.safetensors.safe_open, get_slice and hoist.iter_tensors
#           against safetensors' safe_open (bench/python/stream.py)
#   reference: safetensors' own PyTorch tests (python/tests/safetensors_reference/) against
#           hoist.safetensors, with a GPU for the tests that need one
#   sweep:  reader threads x chunk size and staging budget x chunk size, warm, one `hoist load`
#           process each; the plot of the first (sweep.svg)
#   bench:  hoist bench --cold on the same model (ceilings, hoist, reference strategies), the
#           event-timed h2d ceiling, and the table merged with the Python part's peers
# Usage: bash bench/gpu/suite.sh PART... [--size SIZE]. Results under $OUT.
set -uo pipefail
PARTS=()
SIZE=20GiB
while [ $# -gt 0 ]; do
  case "$1" in
    --size) SIZE=$2; shift 2 ;;
    python|stream|reference|sweep|bench) PARTS+=("$1"); shift ;;
    *) echo "usage: $0 python|stream|reference|sweep|bench... [--size SIZE]" >&2; exit 64 ;;
  esac
done
[ ${#PARTS[@]} -gt 0 ] || { echo "usage: $0 python|stream|reference|sweep|bench... [--size SIZE]" >&2; exit 64; }
BIN=${HOIST_BIN:-.device}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
OUT=${OUT:-/tmp/hoist-device-out}
MODEL_DIR=${HOIST_MODEL_DIR:-/root/hoist-model}
DEVICE=${HOIST_DEVICE:-cuda:0}
MODEL=$MODEL_DIR/model.safetensors
mkdir -p "$OUT" "$MODEL_DIR"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }

log "machine (${PARTS[*]})"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
  nproc; free -g; df -h "$MODEL_DIR"; uname -r; python3 --version; } 2>&1 | tee -a "$OUT/log.txt"

if [ ! -f "$MODEL" ]; then
  log "writing a $SIZE safetensors sample model"
  start=$(date +%s)
  $BIN/hoist make-sample "$MODEL" --format safetensors --size "$SIZE" --seed 11 2>&1 | tee -a "$OUT/log.txt"
  sync
  echo "written and synced in $(( $(date +%s) - start )) s" | tee -a "$OUT/log.txt"
fi
$BIN/hoist inspect "$MODEL" | tail -6 | tee -a "$OUT/log.txt"

# shellcheck source=scripts/device/build_python.sh
source scripts/device/build_python.sh

python_part() {
  build_python || return 1
  log "hoist.load_file against safetensors.torch.load_file"
  HOIST_CEILINGS=$BIN/hoist_ceilings PYTHONPATH=$PWD/build-py/python PYTHONUNBUFFERED=1 python3 bench/python/vs_safetensors.py \
    "$MODEL" --device "$DEVICE" --out "$OUT/python_vs_safetensors.json" 2>&1 | tee -a "$OUT/log.txt"
}

stream_part() {
  build_python || return 1
  log "hoist.safetensors.safe_open and hoist.iter_tensors against safetensors' safe_open"
  PYTHONPATH=$PWD/build-py/python PYTHONUNBUFFERED=1 python3 bench/python/stream.py \
    "$MODEL" --device "$DEVICE" --out "$OUT/python_stream.json" 2>&1 | tee -a "$OUT/log.txt"
}

reference_part() {
  build_python || return 1
  log "safetensors' own PyTorch tests against hoist.safetensors, on a GPU"
  (cd "$(mktemp -d)" && mkdir -p tests/data && PYTHONPATH="$OLDPWD/build-py/python" python3 - \
    "$OLDPWD/python/tests/safetensors_reference/test_pt_comparison.py" <<'PY'
import importlib.util, sys, unittest
import hoist.safetensors
hoist.safetensors.patch()
spec = importlib.util.spec_from_file_location("reference", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(
    unittest.defaultTestLoader.loadTestsFromModule(module))
sys.exit(0 if result.wasSuccessful() else 1)
PY
  ) 2>&1 | tee -a "$OUT/log.txt"
}

sweep_part() {
  log "sweep: reader threads x chunk size, warm"
  cat "$MODEL" >/dev/null
  : >"$OUT/sweep.jsonl"
  for t in 4 8 12 16; do
    for c in 2 4 8 16 32; do
      $BIN/hoist load "$MODEL" --device "$DEVICE" --json --quiet --threads $t --chunk $c \
        | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("tensors",None); d["threads"]=int(sys.argv[1]); d["chunk_mib"]=int(sys.argv[2]); print(json.dumps(d))' $t $c \
        >>"$OUT/sweep.jsonl"
    done
  done
  log "staging budget x chunk size, warm, 12 readers"
  : >"$OUT/staging.jsonl"
  for m in 48 64 96 128 192; do
    for c in 2 4 8; do
      $BIN/hoist load "$MODEL" --device "$DEVICE" --json --quiet --threads 12 --chunk $c --staging $m \
        | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("tensors",None); d["threads"]=12; d["chunk_mib"]=int(sys.argv[1]); d["staging_mib"]=int(sys.argv[2]); print(json.dumps(d))' $c $m \
        >>"$OUT/staging.jsonl"
    done
  done
  python3 - "$OUT/sweep.jsonl" "$OUT/staging.jsonl" <<'PY' | tee -a "$OUT/log.txt"
import json,sys
for path in sys.argv[1:]:
    for l in open(path):
        d=json.loads(l); p=d["phases"]
        print(f"threads {d['threads']:2d} chunk {d['chunk_mib']:2d} MiB staging {d['staging']['bytes']>>20:4d} MiB "
              f"({d['staging']['buffers']:3d} buffers): {d['gbps']:6.2f} GB/s wall, stream {d['bytes']/p['stream_s']/1e9:6.2f}, "
              f"allocate {p['allocate_s']*1e3:5.1f} ms, teardown {p['teardown_s']*1e3:5.1f} ms")
PY
  ceiling=$($BIN/hoist_ceilings h2d --mib-per-copy 64 --total-gib 8 | python3 -c 'import json,sys; print(json.load(sys.stdin)["gbps"])')
  python3 bench/gpu/plot_sweep.py "$OUT/sweep.jsonl" "$OUT/sweep.svg" --ceiling "$ceiling"
}

bench_part() {
  log "event-timed pinned h2d ceiling (hoist_ceilings)"
  for mib in 64 8 1; do $BIN/hoist_ceilings h2d --mib-per-copy $mib --total-gib 8 | tee -a "$OUT/log.txt"; done
  log "hoist doctor"
  $BIN/hoist doctor "$MODEL" --device "$DEVICE" 2>&1 | tee -a "$OUT/log.txt"
  log "hoist bench --cold"
  $BIN/hoist bench "$MODEL" --device "$DEVICE" --cold --repeat 3 --json "$OUT/bench.json" 2>&1 | tee -a "$OUT/log.txt"
  echo "bench exit code ${PIPESTATUS[0]}" | tee -a "$OUT/log.txt"
  if [ -f "$OUT/python_vs_safetensors.json" ] || [ -f "${PEERS:-}" ]; then
    log "table with the peers"
    python3 bench/gpu/merge_bench_peers.py "$OUT/bench.json" "${PEERS:-$OUT/python_vs_safetensors.json}" \
      --out "$OUT/bench_with_peers.json" | tee -a "$OUT/log.txt"
  fi
}

for part in "${PARTS[@]}"; do
  "${part}_part" || exit 1
done
