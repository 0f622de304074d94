#!/usr/bin/env bash
# Runs on the GPU machine: a packed model against its plain original in one run (the figures of
# docs/PERFORMANCE.md, "Packed models"). Weights ~ N(0, 0.02) in BF16 (as initialised LLM
# layers; written with torch on the GPU when it is there, else `hoist make-sample --normal`),
# packed with `hoist pack`; then the GPU decoder alone against the pinned link, warm and cold
# loads of both files with the machine's ceilings (`hoist bench --cold`, every load verified),
# `hoist verify` of the packed file on the GPU (a second decode by the CPU, compared byte for
# byte), and one bit flipped in each part of the file (bench/gpu/flip_packed_bit.py), loaded on
# the GPU: exit 2 naming the tensor and block. Every expectation is checked; the script exits
# 1 when one does not hold.
# Then, where a third argument names the directory of another build (the build before a change),
# warm loads of both files with each build alternated (ROUNDS, default 3), each load's `--json`
# kept and its stream rate and readers' time (reading, waiting on copies, on staging buffers, on
# destinations) printed side by side: where the packed load's time goes, before and after. The
# mean stream rate of this build must be at least AB_MIN_WARM (0.98) of the other's on each file.
# Prepare here: bash scripts/device/prepare.sh; then on the GPU machine, with .device/ in the repository's root:
#   bash bench/gpu/packed.sh .device 16 [.device/before]
# Results under $OUT: log.txt, bench-{plain,packed}.json, decode.txt, warm-BUILD-FILE-ROUND.json,
# warm.txt.
set -uo pipefail
BIN=${1:-.device}
GIB=${2:-16}
BEFORE=${3:-}
ROUNDS=${ROUNDS:-3}
DEVICE=${HOIST_DEVICE:-cuda:0}
OUT=${OUT:-/tmp/hoist-device-out}
WORK=${HOIST_MODEL_DIR:-/root/hoist-packed}
PYTHON=${PYTHON:-$( [ -x /opt/torch/.venv/bin/python ] && echo /opt/torch/.venv/bin/python || echo python3)}
PLAIN=$WORK/normal-bf16.safetensors
PACKED=$WORK/normal-bf16.hoistpack
mkdir -p "$OUT" "$WORK"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }

log "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; free -g
  "$BIN/hoist" --version; } 2>&1 | tee -a "$OUT/log.txt"
if [ ! -f "$PLAIN" ]; then
  log "writing $GIB GiB of BF16 weights ~ N(0, 0.02)"
  start=$SECONDS
  if ! "$PYTHON" - "$PLAIN" "$GIB" <<'PY' 2>&1 | tee -a "$OUT/log.txt"; then
import sys, torch
from safetensors.torch import save_file
path, gib = sys.argv[1], int(sys.argv[2])
dev = "cuda" if torch.cuda.is_available() else "cpu"
g = torch.Generator(device=dev).manual_seed(27)
tensors = {f"layers.{i}.weight": (torch.randn(4096, 32768, generator=g, device=dev) * 0.02)
           .to(torch.bfloat16).cpu() for i in range(gib * 4)}
tensors["norm.weight"] = torch.ones(4096, dtype=torch.bfloat16)
save_file(tensors, path)
PY
    "$BIN/hoist" make-sample "$PLAIN" --format safetensors --dtypes BF16 --normal --size "${GIB}GiB" 2>&1 | tee -a "$OUT/log.txt"
  fi
  log "written in $((SECONDS - start)) s"
fi
if [ ! -f "$PACKED" ]; then
  log "hoist pack"
  start=$SECONDS
  "$BIN/hoist" pack "$PLAIN" -o "$PACKED" 2>&1 | tail -3 | tee -a "$OUT/log.txt"
  log "packed in $((SECONDS - start)) s"
fi
ls -l "$PLAIN" "$PACKED" | tee -a "$OUT/log.txt"
sync

failures=0
# expect WHAT CONDITION...: records a failed expectation (the script then exits 1 at the end).
expect() {
  local what=$1; shift
  if "$@"; then echo "ok: $what" | tee -a "$OUT/log.txt"
  else echo "FAILED: $what" | tee -a "$OUT/log.txt"; failures=$((failures + 1)); fi
}

log "the GPU decoder alone, against the pinned link"
"$BIN/hoist_decode_bench" "$PACKED" 10 2>&1 | tee "$OUT/decode.txt" | tee -a "$OUT/log.txt"
expect "hoist_decode_bench: every byte equal to the CPU's" test "${PIPESTATUS[0]}" -eq 0

for name in plain packed; do
  file=$PLAIN; [ "$name" = packed ] && file=$PACKED
  log "$name: hoist bench --cold --repeat 3 --strategies none"
  "$BIN/hoist" bench "$file" --device "$DEVICE" --cold --repeat 3 --strategies none \
    --json "$OUT/bench-$name.json" 2>&1 | tee -a "$OUT/log.txt"
  expect "$name: hoist bench exit 0 (every load verified)" test "${PIPESTATUS[0]}" -eq 0
done

log "hoist verify of the packed file on $DEVICE"
"$BIN/hoist" verify "$PACKED" --device "$DEVICE" --json > "$OUT/verify.json" 2>&1
expect "verify of the packed file exit 0" test $? -eq 0
tail -c 600 "$OUT/verify.json" | tee -a "$OUT/log.txt"
grep -qE '"decoded_on_device_bytes": *[1-9]' "$OUT/verify.json"
expect "verify decoded on the device" test $? -eq 0

# One bit flipped in place in each place a packed file can be damaged, loaded on the GPU, then
# flipped back: each load must fail with exit 2 naming the tensor (and the block, where the
# damage is in one).
for place in coded-first coded-last kept-first kept-last checksum-last unit-bits group-start \
             table raw; do
  read -r tensor block where < <("$PYTHON" bench/gpu/flip_packed_bit.py "$PACKED" "$place")
  log "one bit flipped ($place: tensor $tensor, block $block, byte $where), loaded on $DEVICE"
  err=$("$BIN/hoist" load "$PACKED" --device "$DEVICE" --quiet 2>&1)
  rc=$?
  "$PYTHON" bench/gpu/flip_packed_bit.py "$PACKED" "$place" >/dev/null  # flipped back
  echo "$err" | tail -2 | tee -a "$OUT/log.txt"
  expect "$place: exit 2 (was $rc)" test "$rc" -eq 2
  expect "$place: the error names tensor $tensor" grep -qF "tensor $tensor" <<<"$err"
  if [ "$block" != - ]; then
    expect "$place: the error names block $block" grep -qE "block ${block}[^0-9]" <<<"$err"
  fi
done
log "the packed file restored: loads again"
"$BIN/hoist" load "$PACKED" --device "$DEVICE" --quiet >/dev/null 2>&1
expect "the restored packed file loads (exit 0)" test $? -eq 0

if [ -n "$BEFORE" ]; then
  log "warm loads alternated: before ($BEFORE) and this build ($BIN), $ROUNDS rounds"
  for file in "$PLAIN" "$PACKED"; do
    "$BIN/hoist" load "$file" --device "$DEVICE" --quiet >/dev/null 2>&1  # the page cache warm
    for round in $(seq "$ROUNDS"); do
      for build in before this; do
        dir=$BIN; [ "$build" = before ] && dir=$BEFORE
        json=$OUT/warm-$build-${file##*.}-$round.json
        "$dir/hoist" load "$file" --device "$DEVICE" --quiet --json >"$json" 2>>"$OUT/log.txt"
        expect "warm $build ${file##*.} round $round: exit 0" test $? -eq 0
      done
    done
  done
  "$PYTHON" - "$OUT" "$ROUNDS" "${AB_MIN_WARM:-0.98}" <<'PY' | tee "$OUT/warm.txt" | tee -a "$OUT/log.txt"
import json, os, statistics, sys
out, rounds, min_ratio = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
failed = False
for ext in ("safetensors", "hoistpack"):
    means = {}
    for build in ("before", "this"):
        runs = []
        for rnd in range(1, rounds + 1):
            try:
                runs.append(json.load(open(os.path.join(out, f"warm-{build}-{ext}-{rnd}.json"))))
            except (OSError, ValueError):
                print(f"FAILED: {ext} {build} round {rnd}: no result")
                failed = True
        if not runs:
            continue
        rates = [j["stream_gbps"] for j in runs]
        means[build] = statistics.mean(rates)
        line = f"{ext:11s} {build:6s} stream " + ", ".join(f"{g:.2f}" for g in rates) + " GB/s"
        r = runs[-1].get("reader_seconds")  # the build before may not report it
        if r and r["total_s"] > 0:
            share = lambda k: 100 * r.get(k, 0) / r["total_s"]
            line += (f"; readers {r['total_s']:.2f} thread-s: read {share('read_s'):.0f}%,"
                     f" copy wait {share('copy_wait_s'):.0f}%, buffer wait {share('buffer_wait_s'):.0f}%,"
                     f" destinations {share('destination_wait_s'):.0f}%"
                     f" (settling {share('destination_settle_s'):.0f}%)")
        d = runs[-1].get("decode")
        if d and d["tensors"]:
            line += f"; {d['tensors']} decodes, busy {d['busy_s']:.3f} s, after streaming {d['after_stream_s']:.3f} s"
        print(line)
    if len(means) == 2:
        ratio = means["this"] / means["before"]
        verdict = "ok" if ratio >= min_ratio else f"FAILED: below {min_ratio}"
        print(f"{ext:11s} this/before {ratio:.3f} ({verdict})")
        failed = failed or ratio < min_ratio
sys.exit(1 if failed else 0)
PY
  expect "warm: every load has a result, this/before at least ${AB_MIN_WARM:-0.98} on both files" \
    test "${PIPESTATUS[0]}" -eq 0
fi

"$PYTHON" - "$OUT" <<'PY' | tee "$OUT/summary.txt" | tee -a "$OUT/log.txt"
import json, os, sys
out = sys.argv[1]
for name in ("plain", "packed"):
    path = os.path.join(out, f"bench-{name}.json")
    if not os.path.exists(path):
        print(f"{name}: no result"); continue
    j = json.load(open(path))
    # direct_read_gbps is null where O_DIRECT could not be measured; read_bytes a count.
    print(f"{name}: ceilings " + ", ".join(
        f"{k} {'not measured' if v is None else (v if isinstance(v, int) else f'{v:.2f}')}"
        for k, v in j["ceilings"].items()))
    for r in j["results"]:
        print(f"{name}: {r['strategy']} {r['mode']} {r['gbps']:.2f} GB/s")
PY
log "$failures expectation(s) failed"
[ "$failures" -eq 0 ]
