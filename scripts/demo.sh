#!/usr/bin/env bash
# Sets everything up, builds hoist, writes a sample model (256 MiB, shaped like a llama
# checkpoint, mixed dtypes) and loads it onto the best device present (the first GPU if one is
# usable, else host memory), verifying every byte. Usage: scripts/demo.sh [MODEL] [DEVICE]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --core
# Its own build tree and sample, so that it neither disturbs the test script's build/ nor
# picks up some other file that happens to sit where the sample goes.
# The tool alone: no tests (whose CMake warns about what only the test script installs).
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_BUILD_TESTS=OFF \
  -DHOIST_BUILD_BENCH=OFF >/dev/null
echo "building hoist (a few minutes on 2 cores; the compiler's lines go to build-demo/build.log)"
cmake --build build-demo -j "$(nproc)" --target hoist_cli >build-demo/build.log 2>&1 \
  || { tail -40 build-demo/build.log; exit 1; }
model=${1:-}
if [ -z "$model" ]; then
  model=build-demo/hoist-sample.gguf
  [ -f "$model" ] || ./build-demo/hoist make-sample "$model" --size 256MiB --dtypes F16,BF16,Q8_0,Q4_K
fi
summary=$(mktemp)
./build-demo/hoist inspect "$model" >"$summary"
head -12 "$summary" && echo "  ..." && tail -7 "$summary"
rm -f "$summary"
echo
./build-demo/hoist verify "$model" --device "${2:-auto}"
echo
echo "the hoist command is $PWD/build-demo/hoist; to type it as 'hoist', put it on PATH:"
echo "  export PATH=\"$PWD/build-demo:\$PATH\"     # this shell"
echo "  install -D build-demo/hoist ~/.local/bin/hoist  # installed (~/.local/bin is on PATH)"
