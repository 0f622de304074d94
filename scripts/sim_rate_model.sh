#!/usr/bin/env bash
# The rate model of docs/MULTI_GPU.md run on simulated devices, no GPU needed: N sims with a
# link each (LINK), one host side they share (HOST) and peer links (PEER), scaled down so that
# the modelled time, not this machine's memcpy, bounds the load. Prints, per device count and
# split, the model's bytes per second of wall time and the bound the model predicts.
# Usage: bash scripts/sim_rate_model.sh [HOIST_BINARY]   (default build/hoist)
set -euo pipefail
HOIST=${1:-build/hoist}
LINK=${LINK:-100MB/s}
HOST=${HOST:-400MB/s}
PEER=${PEER:-1GB/s}
MODEL=$(mktemp -d)/model.safetensors
"$HOIST" make-sample "$MODEL" --format safetensors --size 256MiB --seed 7 >/dev/null
spec="sim:bandwidth=$LINK,host_bandwidth=$HOST,peer_bandwidth=$PEER,latency_us=0"
printf '%-8s %-10s %12s %12s %s\n' devices split "GB/s" "wall s" "fallbacks"
for n in 1 2 4 8; do
  devices=$(printf "$spec,%.0s" $(seq "$n")); devices=${devices%,}
  for split in layer tensor replicate; do
    [ "$n" = 1 ] && [ "$split" != layer ] && continue
    "$HOIST" load "$MODEL" --device "$devices" --split "$split" --json --quiet |
      python3 -c "import json,sys; j=json.load(sys.stdin); print('%-8s %-10s %12.3f %12.3f %s' % ($n, '$split', j['read_bytes']/j['wall_s']/1e9, j['wall_s'], '; '.join(j['fallbacks'])))"
  done
done
rm -rf "$(dirname "$MODEL")"
