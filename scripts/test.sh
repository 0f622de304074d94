#!/usr/bin/env bash
# Builds hoist and runs every test: the main build (with the CUDA backend when nvcc is
# present), the suite again under AddressSanitizer + UndefinedBehaviorSanitizer and under
# ThreadSanitizer, a short run of each fuzzer, and the benchmarks in their short mode.
# Usage: scripts/test.sh [main|asan|tsan|fuzz]...   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(main asan tsan fuzz)
cuda_flags=()
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  cuda_flags=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi

banner() { printf '\n==== %s ====\n' "$*"; }

for stage in "${stages[@]}"; do
  case "$stage" in
    main)
      banner "main build and tests"
      cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda_flags[@]}" >/dev/null
      cmake --build build -j "$jobs"
      ctest --test-dir build --output-on-failure -j "$jobs"
      ;;
    asan)
      banner "AddressSanitizer + UndefinedBehaviorSanitizer"
      cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DHOIST_CUDA=OFF -DHOIST_BUILD_BENCH=OFF \
        -DHOIST_SANITIZE=address,undefined >/dev/null
      cmake --build build-asan -j "$jobs"
      HOIST_TEST_TIME_SCALE=3 HOIST_TEST_LARGE_MIB=256 ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs"
      ;;
    tsan)
      banner "ThreadSanitizer"
      cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_CUDA=OFF \
        -DHOIST_BUILD_BENCH=OFF -DHOIST_SANITIZE=thread >/dev/null
      cmake --build build-tsan -j "$jobs"
      HOIST_TEST_TIME_SCALE=5 HOIST_TEST_LARGE_MIB=128 TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -j "$jobs"
      ;;
    fuzz)
      banner "fuzzers (short bounded runs)"
      CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_CUDA=OFF \
        -DHOIST_BUILD_TESTS=OFF -DHOIST_BUILD_BENCH=OFF -DHOIST_BUILD_FUZZERS=ON >/dev/null
      cmake --build build-fuzz -j "$jobs"
      seconds=${HOIST_FUZZ_SECONDS:-30}
      for target in gguf safetensors index; do
        seeds=$(mktemp -d)
        case $target in
          gguf) cp ../shared/corpus/gguf/dummy-10-tensors.gguf ../shared/corpus/gguf/llama-2-tiny-random.gguf "$seeds"/ ;;
          safetensors) head -c 65536 ../shared/corpus/safetensors/hadamards.safetensors >"$seeds"/head ;;
          index) printf '{"metadata":{"total_size":8},"weight_map":{"a":"x.safetensors"}}' >"$seeds"/index.json ;;
        esac
        echo "fuzzing ${target} for ${seconds}s"
        if ! build-fuzz/fuzz/${target}_fuzzer -max_total_time="$seconds" -max_len=65536 \
            -malloc_limit_mb=64 -rss_limit_mb=2048 -print_final_stats=1 "$seeds" >"$seeds.log" 2>&1; then
          tail -60 "$seeds.log"
          echo "fuzzer ${target} found a failure" >&2
          exit 1
        fi
        grep -E "stat::number_of_executed_units|stat::peak_rss_mb|Done" "$seeds.log"
        rm -rf "$seeds" "$seeds.log"
      done
      ;;
    *) echo "unknown stage $stage" >&2; exit 1 ;;
  esac
done
banner "all stages passed: ${stages[*]}"
