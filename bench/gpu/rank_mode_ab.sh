#!/usr/bin/env bash
# Runs on the GPU machine with .device/include (the header-only dependencies: scripts/device/
# prepare.sh copies them) and .device/ab/old.tar.gz an earlier tree (`git archive --prefix=old/
# REV | gzip > .device/ab/old.tar.gz`): rank mode of that tree (A) and of this one (B), each
# Python module built here. Writes an 8 GiB llama-shaped safetensors model, measures the pinned
# host-to-device copy ceiling, then runs `torchrun --nproc-per-node 1 bench/gpu/rank_mode.py`
# alternated A B A B (warm, split by tensor and replicated, three loads each, the first checked
# bit-equal to safetensors' get_slice). Then, with B only, a job of two ranks over gloo on the
# one GPU (the checks before and after the gather carried by gloo's CUDA all-gather), bit-equal,
# and the same job with the last rank refusing its load: every rank must fail, the others naming
# it. Exits 1 unless every run is bit-equal and B's replicated and tensor-split rates are each
# within 2% of A's (medians of the rounds' best loads), and the refused job fails every rank.
set -uo pipefail
BIN=$PWD/.device
OUT=${OUT:-/tmp/hoist-device-out}
MODEL=${HOIST_MODEL_DIR:-/root/hoist-model}/rank.safetensors
mkdir -p "$OUT" "$(dirname "$MODEL")"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }
failed=""
# shellcheck source=scripts/device/build_python.sh
. scripts/device/build_python.sh
rm -rf /tmp/ab && mkdir -p /tmp/ab && tar xzf .device/ab/old.tar.gz -C /tmp/ab
log "building A (the old tree) and B (this one)"
(build_python_tree /tmp/ab/old /tmp/ab/build-a) & (build_python_tree "$PWD" /tmp/ab/build-b) & wait
for side in a b; do
  [ -f /tmp/ab/build-$side/python/hoist/__init__.py ] || { tail -30 /tmp/ab/build-$side/*.txt; exit 1; }
done
if [ ! -f "$MODEL" ]; then
  log "writing an 8 GiB llama-shaped model"
  python3 - "$MODEL" <<'PY' 2>&1 | tee -a "$OUT/log.txt"
import sys, torch
from safetensors.torch import save_file
g = torch.Generator().manual_seed(11)
h, f, v = 4096, 14336, 32000
def w(*shape):
    return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)
t = {"model.embed_tokens.weight": w(v, h), "lm_head.weight": w(v, h), "model.norm.weight": w(h)}
for i in range(6):
    p = f"model.layers.{i}."
    for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
        t[p + f"self_attn.{n}.weight"] = w(h, h) if n in ("q_proj", "o_proj") else w(1024, h)
    t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"] = w(f, h), w(f, h)
    t[p + "mlp.down_proj.weight"] = w(h, f)
    t[p + "input_layernorm.weight"], t[p + "post_attention_layernorm.weight"] = w(h), w(h)
save_file(t, sys.argv[1])
print(f"{sum(x.nbytes for x in t.values()) / 1e9:.2f} GB in {len(t)} tensors")
PY
fi
cat "$MODEL" >/dev/null
python3 - <<'PY' 2>&1 | tee -a "$OUT/log.txt"
import time, torch
src = torch.empty(4 << 30, dtype=torch.uint8).pin_memory()
dst = torch.empty_like(src, device="cuda")
for _ in range(2):
    torch.cuda.synchronize(); s = time.perf_counter(); dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize(); e = time.perf_counter()
print(f"ceiling: pinned host-to-device copy {src.numel() / (e - s) / 1e9:.2f} GB/s")
PY
for round in 1 2; do
  for side in a b; do
    log "round $round, ${side^^}: torchrun --nproc-per-node 1 bench/gpu/rank_mode.py"
    PYTHONPATH=/tmp/ab/build-$side/python python3 -m torch.distributed.run --nproc-per-node 1 bench/gpu/rank_mode.py "$MODEL" \
      2>&1 | sed "s/^/${side^^} $round /" | tee -a "$OUT/log.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || failed="$failed ${side}-$round"
  done
done
log "B: two ranks over gloo on the one GPU"
RANK_MODE_BACKEND=gloo PYTHONPATH=/tmp/ab/build-b/python python3 -m torch.distributed.run --nproc-per-node 2 \
  bench/gpu/rank_mode.py "$MODEL" 2>&1 | sed "s/^/gloo /" | tee -a "$OUT/log.txt"
[ "${PIPESTATUS[0]}" = 0 ] || failed="$failed gloo"
log "B: two ranks over gloo, the last refusing its load"
RANK_MODE_BACKEND=gloo RANK_MODE_REFUSE=1 PYTHONPATH=/tmp/ab/build-b/python python3 -m torch.distributed.run \
  --nproc-per-node 2 bench/gpu/rank_mode.py "$MODEL" 2>&1 | sed "s/^/refuse /" | tee -a "$OUT/log.txt"
[ "${PIPESTATUS[0]}" = 0 ] || failed="$failed refuse"
python3 - "$OUT/log.txt" "$failed" <<'PY' | tee -a "$OUT/log.txt"
import json, re, statistics, sys
text, failed = open(sys.argv[1]).read(), sys.argv[2].split()
rates, problems = {}, [f"run {f} exited non-zero" for f in failed]
for side, rnd, line in re.findall(r"^([AB]) (\d) (\{.*\})$", text, re.M):
    row = json.loads(line)
    if row["mismatches"]:
        problems.append(f"{side} round {rnd} {row['split']}: {row['mismatches']} parts differ")
    rates.setdefault((row["split"], side, rnd), []).append(row["gbps"])
for split in ("tensor", "replicate"):
    best = {s: [max(rates.get((split, s, r), [0])) for r in "12"] for s in "AB"}
    a, b = statistics.median(best["A"]), statistics.median(best["B"])
    ok = a > 0 and b >= 0.98 * a
    print(f"{'ok' if ok else 'FAIL'}: {split}: B/A = {b / a if a else 0:.3f} (B {best['B']}, "
          f"A {best['A']} GB/s; within 2% expected)")
    if not ok:
        problems.append(f"{split} B/A below 0.98")
gloo = [json.loads(l) for l in re.findall(r"^gloo (\{.*\})$", text, re.M)]
if len(gloo) != 6 or any(r["mismatches"] for r in gloo):
    problems.append(f"gloo job: {len(gloo)} rounds, mismatches {[r['mismatches'] for r in gloo]}")
else:
    print(f"ok: two ranks over gloo on one GPU bit-equal, {[round(r['gbps'], 2) for r in gloo]} GB/s")
refusals = [json.loads(l) for l in re.findall(r"^refuse (\{.*\})$", text, re.M)]
if len(refusals) != 2 or not all(r["ok"] for r in refusals):
    problems.append(f"refused job: {refusals}")
else:
    print("ok: the refused job failed every rank: " +
          "; ".join(f"rank {r['rank']} in {r['seconds']:.2f} s: {r['outcome'][:120]}" for r in refusals))
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
PY
