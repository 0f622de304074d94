#!/usr/bin/env bash
# Prepares .device/ (git-ignored) for a device call: the portable hoist and hoist_ceilings
# binaries (scripts/device/build.sh), the header-only dependencies that the Python module's
# build there needs (the GPU machine has no Debian packages), and this machine's nginx with its
# libraries and loader (.device/bin/nginx, for bench/http/device.sh). Then run, on the GPU machine
# with .device/ in the repository's root: bash bench/gpu/suite.sh python|sweep|bench...,
# bash bench/http/device.sh, or bash bench/gpu/packed.sh .device 16.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/device/build.sh
mkdir -p .device/include
mkdir -p .device/bench
cp build-device/hoist build-device/bench/hoist_ceilings build-device/bench/hoist_stream_probe \
  build-device/bench/hoist_decode_bench .device/
cp build-device/bench/hoist_ceilings .device/bench/  # where bench/gpu/engine.sh looks
cp -r /usr/include/nlohmann /usr/include/CLI /usr/include/xxhash.h .device/include/
if nginx=$(command -v nginx || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; }); then
  mkdir -p .device/bin .device/lib
  cp "$nginx" .device/lib/nginx.bin
  # Its libraries and the loader itself: the GPU machine's C library may be older.
  ldd "$nginx" | awk '$3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' |
    xargs -I{} cp -L {} .device/lib/
  cat >.device/bin/nginx <<'WRAP'
#!/bin/sh
d=$(dirname "$(readlink -f "$0")")/../lib
exec "$d/ld-linux-x86-64.so.2" --library-path "$d" "$d/nginx.bin" "$@"
WRAP
  chmod +x .device/bin/nginx
  .device/bin/nginx -v
fi
du -sh .device
