#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with a device build
# carried in build-device/ (scripts/device/build.sh makes it here). Checks the CUDA backend
# byte-exact on a generated 20 GiB model and measures hoist's loads against the machine's
# ceilings measured in the same run. Results: $OUT/results.jsonl (one JSON object per line)
# and $OUT/log.txt. Usage: bash bench/gpu/engine.sh [SIZE]
set -uo pipefail
SIZE=${1:-20GiB}
BIN=${HOIST_BIN:-build-device}
OUT=${OUT:-/tmp/hoist-device-out}
MODEL_DIR=${HOIST_MODEL_DIR:-/root/hoist-model}
DEVICE=${HOIST_DEVICE:-cuda:0}
mkdir -p "$OUT" "$MODEL_DIR"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
record() { # record LABEL JSON
  python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d["label"]=sys.argv[1]; print(json.dumps(d))' "$1" "$2" >>"$RESULTS" \
    || echo "{\"label\":\"$1\",\"unparsed\":true}" >>"$RESULTS"
}
SECTIONS=${HOIST_SECTIONS:-ceilings,warm,sweep,verify,cold,peers}
want() { [[ ",$SECTIONS," == *",$1,"* ]]; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || echo "cannot drop caches here" >>"$OUT/log.txt"; }

log "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv; nproc; free -g; df -h "$MODEL_DIR"; uname -r; } 2>&1 | tee -a "$OUT/log.txt"

log "hoist on this machine"
$BIN/hoist --version 2>&1 | tee -a "$OUT/log.txt"
$BIN/hoist load /dev/null --device cuda:7 2>&1 | tee -a "$OUT/log.txt"

MODEL=$MODEL_DIR/model.gguf
log "writing a $SIZE sample model"
start=$(date +%s)
$BIN/hoist make-sample "$MODEL" --size "$SIZE" --dtypes F16,BF16,Q8_0,Q4_K --seed 7 2>&1 | tee -a "$OUT/log.txt"
sync
echo "written and synced in $(( $(date +%s) - start )) s" | tee -a "$OUT/log.txt"
$BIN/hoist inspect "$MODEL" | tail -8 | tee -a "$OUT/log.txt"

cat "$MODEL" >/dev/null
if want ceilings; then
log "ceilings (warm page cache)"
for mib in 64 16 8 4 1; do
  out=$($BIN/bench/hoist_ceilings h2d --mib-per-copy $mib --total-gib 8 2>>"$OUT/log.txt") && record ceiling "$out"
done
for t in 8 16; do record ceiling "$($BIN/bench/hoist_ceilings read "$MODEL" --threads $t --chunk-mib 8)"; done
fi

if want warm; then
log "hoist load, warm, defaults (x3)"
for i in 1 2 3; do record warm_default "$($BIN/hoist load "$MODEL" --device "$DEVICE" --json --quiet)"; done
fi
if want checksum; then
log "hoist load --checksum, warm (x2)"
for i in 1 2; do record warm_checksum "$($BIN/hoist load "$MODEL" --device "$DEVICE" --json --quiet --checksum | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("tensors"); print(json.dumps(d))')"; done
fi
if want staging; then
log "staging budget, warm"
for m in 64 128 512; do record "staging_${m}" "$($BIN/hoist load "$MODEL" --device "$DEVICE" --json --quiet --staging $m)"; done
fi

if want sweep; then
log "sweep: threads x chunk, warm"
for t in 8 12 16; do
  for c in 4 8 16; do
    record "sweep_t${t}_c${c}" "$($BIN/hoist load "$MODEL" --device "$DEVICE" --json --quiet --threads $t --chunk $c)"
  done
done
fi

if want verify; then
log "verify byte-exact on $DEVICE, warm (checksums too)"
timeout 300 $BIN/hoist verify "$MODEL" --device "$DEVICE" --quiet --checksum --json >"$OUT/verify.json" 2>>"$OUT/log.txt"
echo "verify exit code $?" | tee -a "$OUT/log.txt"
python3 - "$OUT/verify.json" <<'PY' | tee -a "$OUT/log.txt"
import json,sys
d=json.load(open(sys.argv[1]))
print("verified:", d.get("verified"), "tensors:", d.get("tensor_count"), "bytes:", d.get("bytes"),
      "load GB/s:", round(d.get("gbps",0),2), "verify s:", round(d.get("verify_s",0),1), "peak RSS MiB:", d.get("peak_rss_bytes",0)>>20)
PY
fi

if want cold; then
log "cold: O_DIRECT read ceiling, then hoist direct and buffered"
drop_caches; record ceiling_cold "$($BIN/bench/hoist_ceilings read "$MODEL" --threads 8 --chunk-mib 16 --direct)"
drop_caches; record cold_direct "$($BIN/hoist load "$MODEL" --device "$DEVICE" --json --quiet --io direct)"
drop_caches; record cold_buffered "$($BIN/hoist load "$MODEL" --device "$DEVICE" --json --quiet)"
drop_caches; record ceiling_cold_buffered "$($BIN/bench/hoist_ceilings read "$MODEL" --threads 8 --chunk-mib 16)"
fi

if want peers && python3 -c "import safetensors, torch" 2>/dev/null; then
  ST=$MODEL_DIR/model.safetensors
  log "safetensors side by side: a $SIZE safetensors model"
  rm -f "$MODEL"  # room on the disk
  $BIN/hoist make-sample "$ST" --format safetensors --size "$SIZE" --dtypes BF16,F16 --seed 8 2>&1 | tee -a "$OUT/log.txt"
  sync
  cat "$ST" >/dev/null
  for i in 1 2; do record st_hoist_warm "$($BIN/hoist load "$ST" --device "$DEVICE" --json --quiet)"; done
  record st_peer_warm "$(python3 bench/peers/safetensors_peer.py "$ST" --mode load_file 2>>"$OUT/log.txt")"
  record st_peer_warm "$(python3 bench/peers/safetensors_peer.py "$ST" --mode safe_open 2>>"$OUT/log.txt")"
  drop_caches; record st_peer_cold "$(python3 bench/peers/safetensors_peer.py "$ST" --mode load_file 2>>"$OUT/log.txt")"
  drop_caches; record st_hoist_cold "$($BIN/hoist load "$ST" --device "$DEVICE" --json --quiet --io direct)"
  drop_caches; record st_ceiling_cold "$($BIN/bench/hoist_ceilings read "$ST" --threads 8 --chunk-mib 16 --direct)"
fi

log "summary"
python3 - "$RESULTS" <<'PY' | tee "$OUT/summary.txt"
import json,sys
rows=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    if r.get("strategy"):
        print(f'{r["label"]:24s} {r["strategy"]:30s} {r["gbps"]:7.2f} GB/s  ({r["seconds"]:.2f} s, {r["bytes"]>>20} MiB)')
    elif r.get("what"):
        print(f'{r["label"]:24s} {r["what"]:16s} {r.get("copy_bytes",r.get("chunk_bytes",0))>>20:5d} MiB  t={r.get("threads","-")}  {r["gbps"]:7.2f} GB/s')
    else:
        print(f'{r["label"]:24s} load {r.get("io","?"):9s} t={r.get("threads")} chunk={r.get("chunk_bytes",0)>>20} MiB  {r.get("gbps",0):6.2f} GB/s wall, {r.get("stream_gbps",0):6.2f} GB/s stream, TTFB {r.get("time_to_first_byte_s",0)*1e3:6.1f} ms, RSS {r.get("peak_rss_bytes",0)>>20} MiB')
PY
