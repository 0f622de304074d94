#!/usr/bin/env bash
# Runs on the GPU machine: `--device auto` picks the GPU and reports no fallback, and doctor
# lists no GPU backend as unusable (a machine without a GPU gets both, with the reason: the
# suite's ConventionsCliTest checks that side). Every expectation is checked; exit 1 when one
# does not hold.
#   bash bench/gpu/auto_device.sh .device      (results under $OUT: auto.json, doctor.json)
set -euo pipefail
bin=${1:?usage: auto_device.sh DIR_WITH_HOIST}
out=${OUT:-/tmp/auto_device}
mkdir -p "$out"
model=$(mktemp -d)/sample.safetensors
"$bin/hoist" make-sample "$model" --size 64MiB >/dev/null
"$bin/hoist" load "$model" --device auto --json >"$out/auto.json"
"$bin/hoist" doctor --device auto --json >"$out/doctor.json"
rm -rf "$(dirname "$model")"
python3 - "$out/auto.json" "$out/doctor.json" <<'EOF'
import json, sys
load, doctor = (json.load(open(p)) for p in sys.argv[1:3])
failed = []
def expect(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failed.append(what)
expect(load["device"].startswith(("cuda:", "hip:")), f"--device auto loads to the GPU ({load['device']})")
fell = [f for f in load["fallbacks"] if f.startswith("--device auto")]
expect(not fell, f"no fallback from --device auto ({fell})")
expect(not doctor.get("unusable_backends"),
       f"doctor lists no unusable GPU backend ({doctor.get('unusable_backends')})")
expect(doctor["machine"]["device"].startswith(("cuda:", "hip:")),
       f"doctor measures the GPU ({doctor['machine']['device']})")
sys.exit(1 if failed else 0)
EOF
