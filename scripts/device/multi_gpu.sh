#!/usr/bin/env bash
# Runs on the two-GPU machine: one model loaded across both GPUs by layers (`--device
# cuda:0,cuda:1`), against the one-GPU load and the both-links copy ceiling measured in the same
# run, warm and cold, every two-GPU load verified byte-exact once. Prepare here with
# `bash scripts/device/prepare.sh`, then the device tool (kind nvidia-h200-x2) with carry
# [".device"]: bash scripts/device/multi_gpu.sh
# Results under $OUT: log.txt, *.json (one `hoist load --json` each), summary.txt.
set -uo pipefail
OUT=${OUT:-/tmp/hoist-device-out}
MODEL_DIR=${HOIST_MODEL_DIR:-/root/hoist-model}
SIZE=${HOIST_SIZE:-20GiB}
MODEL=$MODEL_DIR/model.safetensors
BIN=.device
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT" "$MODEL_DIR"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
settle() { sleep 2; }  # the driver finishes with the previous load's freed memory

log "machine"
{ nvidia-smi --query-gpu=index,name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
  nvidia-smi topo -m; nproc; free -g; } 2>&1 | tee -a "$OUT/log.txt"
if [ ! -f "$MODEL" ]; then
  log "writing a $SIZE safetensors sample model"
  $BIN/hoist make-sample "$MODEL" --format safetensors --size "$SIZE" --seed 11 2>&1 | tee -a "$OUT/log.txt"
  sync
fi
$BIN/hoist inspect "$MODEL" --device cuda:0,cuda:1 | tail -3 | tee -a "$OUT/log.txt"

log "ceilings"
$BIN/hoist_ceilings read "$MODEL" --threads 16 --chunk-mib 8 >/dev/null  # warms the page cache
$BIN/hoist_ceilings read "$MODEL" --threads 16 --chunk-mib 8 | tee "$OUT/ceiling-read.json" | tee -a "$OUT/log.txt"
$BIN/hoist_ceilings h2d --mib-per-copy 64 --total-gib 16 | tee "$OUT/ceiling-h2d-1.json" | tee -a "$OUT/log.txt"
$BIN/hoist_ceilings h2d --mib-per-copy 64 --total-gib 16 --gpus 2 | tee "$OUT/ceiling-h2d-2.json" | tee -a "$OUT/log.txt"

for round in 1 2 3; do
  log "warm round $round: one GPU, then both by layers"
  settle; $BIN/hoist load "$MODEL" --device cuda:0 --json --quiet >"$OUT/one-$round.json" 2>>"$OUT/log.txt"
  echo "exit $?" | tee -a "$OUT/log.txt"
  settle; $BIN/hoist load "$MODEL" --device cuda:0,cuda:1 --json --quiet >"$OUT/two-$round.json" 2>>"$OUT/log.txt"
  echo "exit $?" | tee -a "$OUT/log.txt"
done
log "verify across both"
settle; $BIN/hoist verify "$MODEL" --device cuda:0,cuda:1 --json --quiet >"$OUT/two-verify.json" 2>>"$OUT/log.txt"
echo "exit $?" | tee -a "$OUT/log.txt"

log "cold: the raw O_DIRECT read, then one GPU and both, --io direct, each after drop_caches"
$BIN/hoist_ceilings read "$MODEL" --threads 16 --chunk-mib 8 --direct | tee "$OUT/ceiling-direct.json" | tee -a "$OUT/log.txt"
for which in one two; do
  dev=cuda:0; [ "$which" = two ] && dev=cuda:0,cuda:1
  sync; echo 3 >/proc/sys/vm/drop_caches
  settle; $BIN/hoist load "$MODEL" --device "$dev" --io direct --json --quiet >"$OUT/cold-$which.json" 2>>"$OUT/log.txt"
  echo "exit $?" | tee -a "$OUT/log.txt"
done

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt" | tee -a "$OUT/log.txt"
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    try:
        with open(p) as f:
            text = f.read().strip()
        try:
            return json.loads(text)
        except ValueError:
            return json.loads(text.splitlines()[-1])
    except Exception as e:
        return {"error": str(e)}
c1, c2 = load("ceiling-h2d-1.json"), load("ceiling-h2d-2.json")
print(f"ceiling: pinned H2D one GPU {c1.get('gbps', 0):.2f} GB/s, both at once {c2.get('gbps', 0):.2f} GB/s")
print(f"ceiling: page-cache read {load('ceiling-read.json').get('gbps', 0):.2f} GB/s, "
      f"O_DIRECT read {load('ceiling-direct.json').get('gbps', 0):.2f} GB/s")
for name in [f"one-{r}.json" for r in (1, 2, 3)] + [f"two-{r}.json" for r in (1, 2, 3)] + \
        ["two-verify.json", "cold-one.json", "cold-two.json"]:
    j = load(name)
    if "gbps" not in j:
        print(f"{name}: {j}")
        continue
    per = ", ".join(f"{d['device']} {d['bytes']/2**30:.2f} GiB by {d['threads']} readers "
                    f"{d['stream_gbps']:.2f} GB/s" for d in j.get("devices", []))
    extra = f" verified={j['verified']}" if "verified" in j else ""
    print(f"{name}: {j['gbps']:.2f} GB/s over {j['wall_s']:.3f} s (stream {j['stream_gbps']:.2f}); {per}{extra}")
PY
