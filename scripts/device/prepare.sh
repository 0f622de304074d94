#!/usr/bin/env bash
# Prepares .device/ (git-ignored) for a device call: the portable hoist and hoist_ceilings
# binaries (scripts/device/build.sh) and the header-only dependencies that the Python module's
# build there needs (the GPU machine has no Debian packages). Then call the device tool with
# carry [".device"] and command: bash bench/gpu/suite.sh python|sweep|bench...
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/device/build.sh
mkdir -p .device/include
mkdir -p .device/bench
cp build-device/hoist build-device/bench/hoist_ceilings build-device/bench/hoist_stream_probe \
  build-device/bench/hoist_decode_bench .device/
cp build-device/bench/hoist_ceilings .device/bench/  # where bench/gpu/engine.sh looks
cp -r /usr/include/nlohmann /usr/include/CLI /usr/include/xxhash.h .device/include/
du -sh .device
