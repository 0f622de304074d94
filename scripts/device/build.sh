#!/usr/bin/env bash
# Builds the binaries carried to the GPU machine: Release, CUDA backend with the CUDA runtime
# linked statically, libstdc++ and libgcc static, so they run on the GPU machine's distribution.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DHOIST_CUDA=ON -DHOIST_STATIC_RUNTIME=ON \
  -DHOIST_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90 -DHOIST_GPU_KERNELS=ON \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc >/dev/null
cmake --build build-device -j "$(nproc)" --target hoist_cli hoist_ceilings hoist_stream_probe \
  hoist_decode_bench
ls -la build-device/hoist build-device/bench/hoist_ceilings
