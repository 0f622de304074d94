#!/usr/bin/env bash
# Runs on the GPU machine: two builds of hoist on the same model in one run, alternated
# (A B A B) so that drift of the machine falls on both, each `hoist bench --cold --repeat 3
# --strategies none` (ceilings, warm median of 3, cold direct and buffered, every load
# verified). A change to the pipeline or a backend is judged by this: within 2% of the build
# before it. Prepare here:
#   bash scripts/device/prepare.sh                      # this tree's binaries in .device/
#   git worktree add /tmp/before REV && (cd /tmp/before && bash scripts/device/build.sh)
#   mkdir -p .device/before && cp /tmp/before/build-device/hoist .device/before/
# then on the GPU machine, with .device/ in the repository's root: bash bench/gpu/ab.sh .device/before .device
# ROUNDS (default 2) rounds of A then B; COLD=0 measures warm loads alone (a pipeline change that
# touches no read path, judged on more warm rounds in the same time).
# Results under $OUT: log.txt, bench-{A,B}-ROUND.json, ab.txt (each row's medians side by side).
# Exits 1 unless every bench exits 0 with every load verified and the warm B/A is at least
# AB_MIN_WARM (0.98: the 2% bar).
set -uo pipefail
A=${1:?usage: $0 DIR_A DIR_B (each holding a hoist binary)}
B=${2:?usage: $0 DIR_A DIR_B}
OUT=${OUT:-/tmp/hoist-device-out}
MODEL_DIR=${HOIST_MODEL_DIR:-/root/hoist-model}
DEVICE=${HOIST_DEVICE:-cuda:0}
SIZE=${HOIST_SIZE:-20GiB}
ROUNDS=${ROUNDS:-2}
cold=(--cold)
[ "${COLD:-1}" = 0 ] && cold=()
MODEL=$MODEL_DIR/model.safetensors
failed=""
mkdir -p "$OUT" "$MODEL_DIR"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }

log "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
  nproc; free -g; uname -r; } 2>&1 | tee -a "$OUT/log.txt"
for dir in "$A" "$B"; do "$dir/hoist" --version | sed "s|^|$dir: |" | tee -a "$OUT/log.txt"; done
if [ ! -f "$MODEL" ]; then
  log "writing a $SIZE safetensors sample model"
  "$B/hoist" make-sample "$MODEL" --format safetensors --size "$SIZE" --seed 11 2>&1 | tee -a "$OUT/log.txt"
  sync
fi
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    dir=$A; [ "$side" = B ] && dir=$B
    log "round $round, $side ($dir): hoist bench ${cold[*]} --repeat 3 --strategies none"
    "$dir/hoist" bench "$MODEL" --device "$DEVICE" "${cold[@]}" --repeat 3 --strategies none \
      --json "$OUT/bench-$side-$round.json" 2>&1 | tee -a "$OUT/log.txt"
    code=${PIPESTATUS[0]}
    echo "exit $code" | tee -a "$OUT/log.txt"
    [ "$code" = 0 ] || failed="$failed $side-$round:exit-$code"
  done
done
python3 - "$OUT" "${AB_MIN_WARM:-0.98}" "$ROUNDS" <<'PY' | tee "$OUT/ab.txt" | tee -a "$OUT/log.txt"
import json, os, statistics, sys
out, min_warm, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
problems = []
rows, ceilings = {}, {}
for side in "AB":
    for rnd in range(1, rounds + 1):
        path = os.path.join(out, f"bench-{side}-{rnd}.json")
        if not os.path.exists(path):
            problems.append(f"bench-{side}-{rnd}.json was not written")
            continue
        j = json.load(open(path))
        for r in j["results"]:
            if r["gbps"] > 0 and not r.get("verified"):
                problems.append(f"{side} round {rnd}: {r['strategy']} {r['mode']} not verified")
        for k, v in j["ceilings"].items():
            ceilings.setdefault(k, {}).setdefault(side, []).append(v)
        for r in j["results"]:
            rows.setdefault((r["strategy"], r["mode"]), {}).setdefault(side, []).append(
                (r["gbps"], r.get("ratio_to_ceiling")))
def fmt(vals):
    return ", ".join("n/a" if v is None else f"{v:.2f}" for v in vals)
for name, sides in sorted(ceilings.items()):
    print(f"ceiling {name:22s}  A: {fmt(sides.get('A', []))}  B: {fmt(sides.get('B', []))}")
for (name, mode), sides in sorted(rows.items()):
    a = [g for g, _ in sides.get("A", [])]
    b = [g for g, _ in sides.get("B", [])]
    ra = [r for _, r in sides.get("A", []) if r is not None]
    rb = [r for _, r in sides.get("B", []) if r is not None]
    line = f"{name:16s} {mode:5s}  A: {fmt(a)} GB/s  B: {fmt(b)} GB/s"
    if ra and rb:
        line += f"  of ceiling A {statistics.mean(ra):.3f} B {statistics.mean(rb):.3f}"
    if a and b:
        ratio = statistics.mean(b) / statistics.mean(a)
        line += f"  B/A {ratio:.3f}"
        if mode == "warm" and ratio < min_warm:
            problems.append(f"{name} warm B/A {ratio:.3f} is below {min_warm}")
    print(line)
if not any(mode == "warm" and len(s.get("A", [])) == rounds and len(s.get("B", [])) == rounds
           for (_, mode), s in rows.items()):
    problems.append(f"no warm row with all {rounds} rounds of A and B")
for p in problems:
    print("FAIL " + p)
if problems:
    sys.exit(1)
print(f"every bench wrote its results, every load verified, warm B/A at least {min_warm}: ok")
PY
checked=${PIPESTATUS[0]}
if [ -n "$failed" ] || [ "$checked" != 0 ]; then
  echo "FAIL:${failed:- } (a bench exited non-zero, or a check above failed)" | tee -a "$OUT/log.txt"
  exit 1
fi
