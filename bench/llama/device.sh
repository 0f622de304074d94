#!/usr/bin/env bash
# hoist_llama_load beside llama.cpp's own loader on a GPU machine, every expectation checked.
#   bash bench/llama/device.sh build     # llama.cpp (CUDA, sm_90) and hoist with hoist_llama
#   bash bench/llama/device.sh run       # the models, the ceilings and the loads
# Needs .device/include (scripts/device/prepare.sh: the header-only dependencies) and
# .device/hoist_ceilings. Writes an 8B llama-shaped GGUF with the snapshot's real vocabulary in
# F16 (16 GB) and Q4_K (uniform, from hoist_llama_load_bench write; llama-quantize's Q4_K_M mix is
# not built here) under $HOIST_MODEL_DIR. For each, all layers on the GPU and 16 of 32
# (n_gpu_layers), each load a fresh process: llama_model_load_from_file with mmap and without,
# and hoist_llama_load, warm (ROUNDS rounds alternated) and cold (page cache dropped before
# each). Checks: every load succeeds; hoist's logits of a fixed prompt bit-equal to llama.cpp's
# no-mmap load and its 8 greedy tokens equal; warm hoist >= 5x llama.cpp's best warm with all
# layers on the GPU; cold hoist >= llama.cpp's best cold. The pinned copy and disk ceilings are
# measured in the same run. Then the F16 model held by `hoist serve` on cuda:0: hoist_llama_load
# takes every byte from the holder (logits bit-equal; the copy within the GPU <= 50 ms).
# Results: $OUT/log.txt, $OUT/loads.jsonl, $OUT/summary.txt.
set -uo pipefail
STEP=${1:?usage: bench/llama/device.sh build|run}
OUT=${OUT:-/tmp/hoist-device-out}
WORK=${HOIST_LLAMA_WORK:-/root/hoist-llama-cpp}
MODELS=${HOIST_MODEL_DIR:-/root/hoist-gguf}
ROUNDS=${ROUNDS:-2}
# WRITE_ARGS (the writer's shape flags) and HOLD_DEVICE (cuda:0) let the script run small on a
# machine without a GPU, to check the script itself; TYPES ("f16 q4_k") and NGLS ("999 16")
# choose the models and offloads.
BIN=$PWD/.device
mkdir -p "$OUT" "$WORK" "$MODELS"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
failed=0
expect() {  # EXIT-CODE WHAT
  if [ "$1" -eq 0 ]; then echo "ok: $2" | tee -a "$OUT/log.txt"; else
    echo "FAILED: $2" | tee -a "$OUT/log.txt"; failed=1; fi
}

if [ "$STEP" = build ]; then
  log "building llama.cpp (CUDA, sm_90, no flash attention) and hoist with hoist_llama"
  start=$(date +%s)
  hoist_cmake=(-DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DHOIST_CUDA=ON
    -DCMAKE_CUDA_ARCHITECTURES=90 -DHOIST_HOST_HEADER_ONLY_DEPS=ON
    -DHOIST_HEADER_ONLY_DEPS_DIR="$BIN/include")
  # hoist's library beside llama.cpp's build, then hoist_llama once libllama is installed.
  (cmake -S . -B "$WORK/hoist" "${hoist_cmake[@]}" >"$OUT/build-hoist.txt" 2>&1 &&
    cmake --build "$WORK/hoist" -j 4 --target hoist >>"$OUT/build-hoist.txt" 2>&1) &
  bash scripts/build-llama.sh "$WORK/llama" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DGGML_CUDA_FA=OFF >"$OUT/build-llama.txt" 2>&1
  expect $? "llama.cpp built ($(( $(date +%s) - start )) s)"
  wait
  cmake -S . -B "$WORK/hoist" "${hoist_cmake[@]}" -DHOIST_LLAMA=ON -DCMAKE_PREFIX_PATH="$WORK/llama" \
    >>"$OUT/build-hoist.txt" 2>&1 &&
    cmake --build "$WORK/hoist" -j "$(nproc)" --target hoist_llama_load_bench hoist_cli \
      >>"$OUT/build-hoist.txt" 2>&1
  expect $? "hoist_llama_load_bench built ($(( $(date +%s) - start )) s)"
  [ "$failed" = 0 ] || tail -30 "$OUT"/build-*.txt
  exit "$failed"
fi

TOOL=$WORK/hoist/bench/hoist_llama_load_bench
VOCAB=$WORK/llama/src/models/ggml-vocab-llama-spm.gguf
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
for type in ${TYPES:-f16 q4_k}; do
  if [ ! -f "$MODELS/llama-8b-$type.gguf" ]; then
    log "writing an 8B llama-shaped GGUF ($type)"
    # shellcheck disable=SC2086
    "$TOOL" write "$MODELS/llama-8b-$type.gguf" "$VOCAB" --type "$type" ${WRITE_ARGS:-} | tee -a "$OUT/log.txt"
  fi
done
ls -la "$MODELS" | tee -a "$OUT/log.txt"
log "ceilings"
cat "$MODELS/llama-8b-f16.gguf" >/dev/null
"$BIN/hoist_ceilings" h2d | tee -a "$OUT/log.txt" "$OUT/ceilings.jsonl"
"$BIN/hoist_ceilings" read "$MODELS/llama-8b-f16.gguf" --threads 16 | tee -a "$OUT/log.txt" "$OUT/ceilings.jsonl"
drop
"$BIN/hoist_ceilings" read "$MODELS/llama-8b-f16.gguf" --threads 8 --direct | tee -a "$OUT/log.txt" "$OUT/ceilings.jsonl"

: >"$OUT/loads.jsonl"
load() {  # TYPE NGL MODE TEMPERATURE [--logits FILE]
  local line
  line=$("$TOOL" load "$3" "$MODELS/llama-8b-$1.gguf" --ngl "$2" "${@:5}" 2>>"$OUT/stderr.txt")
  expect $? "$1 ngl=$2 $3 $4 loads"
  echo "$line" | sed "s/^{/{\"type\":\"$1\",\"temperature\":\"$4\",/" | tee -a "$OUT/loads.jsonl" "$OUT/log.txt"
}
for type in ${TYPES:-f16 q4_k}; do
  for ngl in ${NGLS:-999 16}; do
    log "$type, n_gpu_layers $ngl: logits of llama.cpp's no-mmap load and hoist's"
    cat "$MODELS/llama-8b-$type.gguf" >/dev/null
    load "$type" "$ngl" own-read warm --logits "$WORK/logits-own.bin"
    load "$type" "$ngl" hoist warm --logits "$WORK/logits-hoist.bin"
    cmp -s "$WORK/logits-own.bin" "$WORK/logits-hoist.bin"
    expect $? "$type ngl=$ngl: hoist's logits bit-equal to llama.cpp's"
    [ "$type $ngl" = "f16 999" ] && cp "$WORK/logits-own.bin" "$WORK/logits-own-f16.bin"
    tail -2 "$OUT/loads.jsonl" | python3 -c 'import json,sys; a,b=[json.loads(l)["greedy"] for l in sys.stdin]; sys.exit(0 if a==b and len(a)==8 else 1)'
    expect $? "$type ngl=$ngl: the greedy tokens equal"
    for round in $(seq "$ROUNDS"); do
      for mode in own-mmap own-read hoist; do load "$type" "$ngl" "$mode" warm; done
    done
    for mode in own-mmap own-read hoist; do drop; load "$type" "$ngl" "$mode" cold; done
  done
done

log "f16 from a holder: hoist serve on cuda:0, then hoist_llama_load in fresh processes"
export XDG_RUNTIME_DIR=$WORK/run
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
"$WORK/hoist/hoist" serve "$MODELS/llama-8b-f16.gguf" --device "${HOLD_DEVICE:-cuda:0}" --name f16 --json \
  >"$OUT/holder.json" 2>"$OUT/holder.err" &
holder=$!
for _ in $(seq 600); do grep -q '"ready":true' "$OUT/holder.json" 2>/dev/null && break; sleep 0.2; done
grep -q '"ready":true' "$OUT/holder.json"
expect $? "the holder is ready: $(head -c 300 "$OUT/holder.json")"
: >"$OUT/stderr.txt"
load f16 999 hoist held --logits "$WORK/logits-held.bin"
cmp -s "$WORK/logits-own-f16.bin" "$WORK/logits-held.bin"
expect $? "f16 from the holder: logits bit-equal to llama.cpp's own load"
for _ in 1 2 3; do load f16 999 hoist held; done
grep -h "from the holder of the file" "$OUT/stderr.txt" | tee -a "$OUT/log.txt" >"$OUT/holder-loads.txt"
[ "$(grep -c "from the holder of the file" "$OUT/holder-loads.txt")" -ge 4 ]
expect $? "every load from the holder took its bytes from it"
kill -TERM "$holder"; wait "$holder"

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, statistics, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/loads.jsonl") if l.strip()]
ceil = [json.loads(l) for l in open(f"{out}/ceilings.jsonl") if l.strip().startswith("{")]
for c in ceil:
    print("ceiling:", json.dumps(c))
best, problems = {}, []
for r in rows:
    if r["greedy"]:
        continue  # the evaluated loads are timed with the prompt's graph warming up
    key = (r["type"], r["ngl"], r["temperature"], r["mode"])
    best.setdefault(key, []).append(r["gb_per_s"])
print(f"{'model':6} {'ngl':>4} {'cache':5} {'own-mmap':>9} {'own-read':>9} {'hoist':>9} {'hoist/best':>10}  GB/s, best of the rounds")
for t in ("f16", "q4_k"):
    for ngl in (999, 16):
        for temp in ("warm", "cold"):
            m = {mode: max(best.get((t, ngl, temp, mode), [0])) for mode in ("own-mmap", "own-read", "hoist")}
            if not any(m.values()):
                continue  # not run (TYPES, NGLS)
            own = max(m["own-mmap"], m["own-read"])
            ratio = m["hoist"] / own if own else 0
            print(f"{t:6} {ngl:>4} {temp:5} {m['own-mmap']:9.2f} {m['own-read']:9.2f} {m['hoist']:9.2f} {ratio:10.2f}")
            if ngl == 999 and temp == "warm" and ratio < 5:
                problems.append(f"{t} warm, all layers on the GPU: hoist {ratio:.2f}x llama.cpp's best, aim 5x")
            if ngl == 999 and temp == "cold" and ratio < 1:
                problems.append(f"{t} cold: hoist {ratio:.2f}x llama.cpp's best, aim >= 1x")
import re
held = [float(x) for x in re.findall(r"from the holder of the file in ([0-9.]+) s",
                                     open(f"{out}/holder-loads.txt").read())]
loads = [r["seconds"] for r in rows if r["temperature"] == "held" and not r["greedy"]]
if held and loads:
    print(f"f16 from the holder: the copy within the GPU {min(held):.4f}-{max(held):.4f} s, "
          f"the whole hoist_llama_load {min(loads):.3f}-{max(loads):.3f} s (aim: the bytes in <= 0.05 s)")
    if min(held) > 0.05:
        problems.append(f"from the holder: {min(held):.4f} s for the bytes, aim 0.05")
else:
    problems.append("no load took its bytes from the holder")
for p in problems:
    print("FAILED:", p)
sys.exit(1 if problems else 0)
PY
expect "${PIPESTATUS[0]}" "the aims: warm >= 5x llama.cpp's best, cold >= its best (all layers on the GPU)"
log "$([ "$failed" = 0 ] && echo "every expectation held" || echo "an expectation FAILED")"
exit "$failed"
