#!/usr/bin/env bash
# Runs on a machine with several GPUs (every GPU it has, or HOIST_GPUS of them): one model
# loaded onto all of them split by layers, split by tensor (tensor parallel) and replicated,
# against the one-GPU load, the all-links copy ceiling, the page-cache read and the raw O_DIRECT
# read measured in the same run, warm and cold, every mode verified byte-exact once; rank mode
# under torchrun (NCCL); the peers in the same run: one independent `hoist load` process per
# GPU and safetensors' per-rank get_slice (what vLLM does by default).
# Prepare here with `bash scripts/device/prepare.sh`, then, on the GPU machine
# (two GPUs, or eight with HOIST_SIZE=110GiB) with .device/ in the repository's root:
# bash bench/gpu/multi_gpu.sh
# HOIST_SIZE (default 20GiB) sets the sample's size; HOIST_COLD=0 skips the cold loads and
# HOIST_WARM=0 everything else but the ceilings (a large model's run in two calls).
# Results under $OUT: log.txt, summary.txt and runs.tar.gz (one `hoist load --json` each, in one
# archive: few files to copy back).
set -uo pipefail
RESULTS=${OUT:-/tmp/hoist-device-out}
OUT=$(mktemp -d)
MODEL_DIR=${HOIST_MODEL_DIR:-/root/hoist-model}
SIZE=${HOIST_SIZE:-20GiB}
COLD=${HOIST_COLD:-1}
WARM=${HOIST_WARM:-1}
MODEL=$MODEL_DIR/model-$SIZE.safetensors
BIN=$PWD/.device
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT" "$MODEL_DIR"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
settle() { sleep 1; }  # the driver finishes with the previous load's freed memory
# load NAME ARGS...: one `hoist load --json`, its exit code logged.
load() {
  local name=$1; shift
  settle; "$BIN/hoist" "$@" --json --quiet >"$OUT/$name.json" 2>>"$OUT/log.txt"
  echo "$name: exit $?" | tee -a "$OUT/log.txt"
}
GPUS=${HOIST_GPUS:-$(nvidia-smi -L | grep -c '^GPU')}
ALL=$(seq -s, -f 'cuda:%g' 0 $((GPUS - 1)))
declare -A DEV=([one]="--device cuda:0" [layer]="--device $ALL --split layer"
                [tensor]="--device $ALL --split tensor"
                [replicate]="--device $ALL --split replicate")

log "machine"
{ nvidia-smi --query-gpu=index,name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
  nvidia-smi topo -m; nproc; free -g; df -h "$MODEL_DIR"; } 2>&1 | tee -a "$OUT/log.txt"
if [ ! -f "$MODEL" ]; then
  log "writing a $SIZE safetensors sample model"
  "$BIN/hoist" make-sample "$MODEL" --format safetensors --size "$SIZE" --seed 11 2>&1 | tee -a "$OUT/log.txt"
  sync
fi
for mode in layer tensor replicate; do
  # shellcheck disable=SC2086
  "$BIN/hoist" inspect "$MODEL" ${DEV[$mode]} | sed -n '/^placement/,$p' | tee -a "$OUT/log.txt"
done

log "ceilings"
THREADS=$(nproc)
"$BIN/hoist_ceilings" read "$MODEL" --threads "$THREADS" --chunk-mib 8 >/dev/null  # warms the page cache
"$BIN/hoist_ceilings" read "$MODEL" --threads "$THREADS" --chunk-mib 8 | tee "$OUT/ceiling-read.json" | tee -a "$OUT/log.txt"
"$BIN/hoist_ceilings" h2d --mib-per-copy 64 --total-gib 16 | tee "$OUT/ceiling-h2d-1.json" | tee -a "$OUT/log.txt"
"$BIN/hoist_ceilings" h2d --mib-per-copy 64 --total-gib $((8 * GPUS)) --gpus "$GPUS" | tee "$OUT/ceiling-h2d-all.json" | tee -a "$OUT/log.txt"

if [ "$WARM" = 1 ]; then
  for round in 1 2 3; do
    log "warm round $round"
    for mode in one layer tensor replicate; do
      # shellcheck disable=SC2086
      load "$mode-$round" load "$MODEL" ${DEV[$mode]}
    done
  done
  log "verify every mode"
  for mode in layer tensor replicate; do
    # shellcheck disable=SC2086
    load "verify-$mode" verify "$MODEL" ${DEV[$mode]}
  done

  log "peers, warm: $GPUS independent hoist load processes, one per GPU"
  settle
  for ((g = 0; g < GPUS; ++g)); do
    "$BIN/hoist" load "$MODEL" --device "cuda:$g" --json --quiet >"$OUT/independent-$g.json" 2>>"$OUT/log.txt" &
  done
  wait
  log "peers, warm: safetensors get_slice per rank (vLLM's default), $GPUS processes"
  timeout 300 python3 bench/peers/tp_safetensors_peer.py "$MODEL" --ranks "$GPUS" | tee "$OUT/peer-safetensors-tp.json" | tee -a "$OUT/log.txt"

  log "rank mode: torchrun --nproc-per-node $GPUS, hoist.load_file(process_group=WORLD) over NCCL"
  # shellcheck source=scripts/device/build_python.sh
  source scripts/device/build_python.sh
  if build_python; then
    PYTHONPATH=$PWD/build-py/python timeout 300 torchrun --nproc-per-node "$GPUS" \
      bench/gpu/rank_mode.py "$MODEL" 2>>"$OUT/log.txt" | tee "$OUT/rank-mode.jsonl" | tee -a "$OUT/log.txt"
  fi
fi

if [ "$COLD" = 1 ]; then
  log "cold: the raw O_DIRECT read, then each mode with --io direct after drop_caches"
  "$BIN/hoist_ceilings" read "$MODEL" --threads "$THREADS" --chunk-mib 8 --direct | tee "$OUT/ceiling-direct.json" | tee -a "$OUT/log.txt"
  for mode in one layer tensor replicate; do
    sync; echo 3 >/proc/sys/vm/drop_caches
    # shellcheck disable=SC2086
    load "cold-$mode" load "$MODEL" ${DEV[$mode]} --io direct
  done
fi

python3 bench/gpu/multi_gpu_summary.py "$OUT" | tee "$OUT/summary.txt" | tee -a "$OUT/log.txt"
mkdir -p "$RESULTS"
cp "$OUT/summary.txt" "$OUT/log.txt" "$RESULTS/"
tar czf "$RESULTS/runs.tar.gz" -C "$OUT" .
