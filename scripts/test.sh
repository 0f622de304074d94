#!/usr/bin/env bash
# Checks the formatting (.clang-format), then builds hoist and runs every test: the main build (with the CUDA backend when nvcc is
# present, and integrations/llama.cpp against the llama.cpp snapshot that scripts/build-llama.sh builds), clang-tidy (.clang-tidy) over the library and the CLI, the suite again under AddressSanitizer + UndefinedBehaviorSanitizer and under
# ThreadSanitizer, a short run of each fuzzer, the Windows build (MinGW-w64) with its tests
# under wine, the HIP build, and the Python package installed with pip and tested.
# Usage: scripts/test.sh [format|main|tidy|asan|tsan|fuzz|windows|hip|python]...   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(format main tidy asan tsan fuzz windows hip python)
# Debian's python3 (with python3-torch), whatever python3 comes first on PATH.
python=/usr/bin/python3
cuda_flags=()
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  cuda_flags=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi

# integrations/llama.cpp against the snapshot scripts/build-llama.sh builds into build-llama/.
llama_flags=(-DHOIST_LLAMA=ON -DCMAKE_PREFIX_PATH="$PWD/build-llama")

banner() { printf '\n==== %s ====\n' "$*"; }
# Each stage's wall time, printed at the end (a failed run's too): CI has 90 minutes and should
# stay well inside them.
timings=()
stage=""
stage_start=0
print_timings() {
  [ -n "$stage" ] && [ "${#timings[@]}" -lt "${#stages[@]}" ] && timings+=("$stage $((SECONDS - stage_start))s (stopped)")
  printf '\nstage times: %s (total %ss)\n' "$(IFS=,; echo "${timings[*]}" | sed 's/,/, /g')" "$SECONDS"
}
trap print_timings EXIT

for stage in "${stages[@]}"; do
  stage_start=$SECONDS
  case "$stage" in
    format)
      banner "formatting (clang-format --dry-run --Werror)"
      if [ -d .git ]; then
        files=$(git ls-files '*.c' '*.cpp' '*.h' '*.hpp')
      else
        files=$(find src include tests bench examples python fuzz -name '*.[ch]' -o -name '*.cpp' -o -name '*.hpp' 2>/dev/null)
      fi
      # shellcheck disable=SC2086
      clang-format --dry-run --Werror $files
      echo "$(echo "$files" | wc -w) files formatted as .clang-format says"
      # A clone must pass alone: nothing the build or the tests read lies outside the repository.
      if [ -d .git ] && git grep -n '\.\./shar''ed/' -- ':!*.md'; then
        echo "the lines above reach outside the repository" >&2
        exit 1
      fi
      ;;
    main)
      banner "main build and tests"
      # llama.cpp (the snapshot in third_party/, patched) for integrations/llama.cpp's tests:
      # built once here, used again by the asan stage.
      bash scripts/build-llama.sh build-llama
      # Release: what users build; the sanitizer stages cover Debug and RelWithDebInfo.
      cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHOIST_WERROR=ON -DHOIST_PYTHON=ON \
        -DPython_EXECUTABLE="$python" "${cuda_flags[@]}" "${llama_flags[@]}" >/dev/null
      cmake --build build -j "$jobs"
      if grep -q "^HOIST_CUDA:BOOL=ON" build/CMakeCache.txt; then
        echo "CUDA backend compiled with $(grep -m1 '^CMAKE_CUDA_COMPILER:' build/CMakeCache.txt || echo nvcc)"
        build/hoist load tests/corpus/gguf/dummy-10-tensors.gguf --device cuda:0 --quiet || true
      else
        echo "no CUDA toolkit: the CUDA backend is not compiled in this build"
      fi
      # A failing test does not stop the stage: the checks after it run too, and the stage
      # fails at its end.
      main_tests=passed
      # The Python suite runs in the python stage, against the installed package. Two tests per
      # core: a third of the suite's time is spent waiting (servers, child processes, timeouts),
      # and the run took 73 s this way against 94 s with one per core.
      skip_python=()
      [[ " ${stages[*]} " == *" python "* ]] && skip_python=(-E '^Python\.Tests$')
      ctest --test-dir build --output-on-failure -j $((2 * jobs)) "${skip_python[@]}" || main_tests=failed
      # The C API as an engine uses it: installed, then examples/ configured alone as a C-only
      # CMake project against the install (find_package, hoist::hoist) and its test run, and
      # examples/load_model.c built by a plain cc with pkg-config.
      rm -rf build/install build/consumer
      cmake --install build --prefix "$PWD/build/install" >/dev/null
      cmake -S examples -B build/consumer -DCMAKE_PREFIX_PATH="$PWD/build/install;$PWD/build-llama" -DHOIST_WERROR=ON >/dev/null
      cmake --build build/consumer >/dev/null
      ctest --test-dir build/consumer --output-on-failure >/dev/null \
        || { ctest --test-dir build/consumer --output-on-failure; exit 1; }
      # shellcheck disable=SC2046
      cc -Wall -Werror examples/load_model.c -o build/consumer/load_model_pkg_config \
        $(PKG_CONFIG_PATH="$PWD/build/install/lib/pkgconfig" pkg-config --cflags --libs hoist)
      # Relocatable: the .pc file names libraries as -L${dir} -lname, no file of this machine.
      if grep '^Libs' build/install/lib/pkgconfig/hoist.pc | grep -qE '(^| )/[^ ]+\.(a|so)( |$)'; then
        echo "hoist.pc names a library file by its path on this machine:" >&2
        grep '^Libs' build/install/lib/pkgconfig/hoist.pc >&2
        exit 1
      fi
      # And against the shared library, which exports the C API alone.
      cc -Wall -Werror examples/load_model.c -o build/consumer/load_model_shared \
        -I build/install/include -L build/install/lib -lhoist -Wl,-rpath,"$PWD/build/install/lib"
      ldd build/consumer/load_model_shared | grep -q "libhoist.so" \
        || { echo "load_model_shared is not linked to libhoist.so" >&2; exit 1; }
      others=$(nm -D --defined-only build/install/lib/libhoist.so | awk '$2 ~ /[TDBRW]/ && $3 !~ /^hoist_/')
      [ -z "$others" ] || { echo "libhoist.so exports more than the C API:" >&2; echo "$others" | head >&2; exit 1; }
      for consumer in build/consumer/load_model build/consumer/load_model_pkg_config \
                      build/consumer/load_model_shared; do
        "$consumer" tests/corpus/gguf/dummy-10-tensors.gguf host | grep -q "xxh3 4722a534a9254fca" \
          || { echo "$consumer did not load the corpus model" >&2; exit 1; }
      done
      echo "a C-only CMake project, cc with pkg-config and cc with libhoist.so build and run examples/load_model.c"
      # The device harness that judges a change (bench/gpu/ab.sh), run on a sim with this build
      # as both sides: it must still run end to end and print every row side by side.
      rm -rf build/ab-smoke
      OUT=build/ab-smoke/out HOIST_MODEL_DIR=build/ab-smoke/model HOIST_DEVICE=sim HOIST_SIZE=16MiB \
        bash bench/gpu/ab.sh build build >/dev/null 2>&1 || true
      for row in "hoist            warm" "hoist            cold" "hoist-buffered   cold"; do
        grep -q "^$row .*B/A [0-9]" build/ab-smoke/out/ab.txt 2>/dev/null \
          || { echo "bench/gpu/ab.sh on a sim printed no '$row' row" >&2; cat build/ab-smoke/out/log.txt >&2; exit 1; }
      done
      echo "bench/gpu/ab.sh runs end to end on a sim"
      [ "$main_tests" = passed ] || { echo "main: the tests listed above failed" >&2; exit 1; }
      ;;
    tidy)
      banner "clang-tidy (.clang-tidy, warnings as errors) on src/"
      # The files of src/ in the bundles the unity build compiles together, each bundle
      # analysed as its files would be alone (scripts/tidy_bundles.py says how): clang-tidy 14
      # matches in every system header of a unit, which made one unit per file cost 833 s
      # here. build-tidy lies inside the repository so that .clang-tidy applies.
      cmake -S . -B build-tidy -DCMAKE_BUILD_TYPE=Release -DHOIST_WERROR=ON -DHOIST_PYTHON=ON \
        -DPython_EXECUTABLE="$python" "${cuda_flags[@]}" -DCMAKE_UNITY_BUILD=ON \
        -DCMAKE_UNITY_BUILD_BATCH_SIZE=12 >/dev/null
      "$python" scripts/tidy_bundles.py build-tidy >/dev/null
      # -Wthread-safety: clang's analysis of the HOIST_GUARDED_BY/HOIST_REQUIRES annotations
      # (src/base/mutex.h), reported as clang-diagnostic-thread-safety-* errors.
      run-clang-tidy -p build-tidy -j "$jobs" -quiet -extra-arg=-Wthread-safety \
        "$PWD/build-tidy/src/.*\.cxx|$PWD/src/.*\.cpp" >build-tidy/tidy.log 2>&1 \
        || { grep -E "(error|warning):" build-tidy/tidy.log | sed 's/\x1b\[[0-9;]*m//g' \
               | "$python" scripts/tidy_bundles.py --explain; exit 1; }
      bundled=$(grep -h -c '^// tidy bundle: ' build-tidy/src/CMakeFiles/*/Unity/*.cxx | awk '{n += $1} END {print n}')
      alone=$(grep '^clang-tidy' build-tidy/tidy.log | grep -o "$PWD/src/[^ ]*\.cpp" | sort -u | wc -l)
      echo "$((bundled + alone)) files of src/ in $(grep -c '^clang-tidy' build-tidy/tidy.log) units clean under .clang-tidy"
      ;;
    asan)
      banner "AddressSanitizer + UndefinedBehaviorSanitizer"
      # hoist_llama and its tests under the sanitizers; libllama itself uninstrumented (the
      # main stage's build), its allocations still watched by LeakSanitizer.
      bash scripts/build-llama.sh build-llama
      cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DHOIST_WERROR=ON -DHOIST_CUDA=OFF -DHOIST_BUILD_BENCH=OFF \
        -DHOIST_SANITIZE=address,undefined -DCMAKE_UNITY_BUILD=ON "${llama_flags[@]}" >/dev/null
      cmake --build build-asan -j "$jobs"
      # PackRealWeights packs 88 MB of real weights through the CLI: the packed code paths it
      # takes are PackedTest's, which run here; under a sanitizer it would only cost minutes.
      HOIST_TEST_TIME_SCALE=3 HOIST_TEST_LARGE_MIB=256 ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" -E PackRealWeights
      ;;
    tsan)
      banner "ThreadSanitizer"
      # -O1 -g1 (line tables, which is all a race report prints): half the compile time of
      # RelWithDebInfo's -O2 -g, and ThreadSanitizer's own advice.
      cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_WERROR=ON -DHOIST_CUDA=OFF \
        -DHOIST_BUILD_BENCH=OFF -DHOIST_SANITIZE=thread -DCMAKE_UNITY_BUILD=ON \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
      cmake --build build-tsan -j "$jobs"
      # Huge pages for the shadow: a test touching a fresh 64 MiB buffer faults in four times
      # as much shadow, and page by page (each fault a copy-on-write with a TLB flush on every
      # core) that made a doctor run take 30 s here, 7 s with them.
      HOIST_TEST_TIME_SCALE=5 HOIST_TEST_LARGE_MIB=128 TSAN_OPTIONS=halt_on_error=1:no_huge_pages_for_shadow=0 \
        ctest --test-dir build-tsan --output-on-failure -j "$jobs" -E PackRealWeights
      ;;
    fuzz)
      banner "fuzzers (short bounded runs)"
      # -O1 with line tables, as libFuzzer's documentation builds: a crash's stack names lines.
      CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_WERROR=ON -DHOIST_CUDA=OFF \
        -DHOIST_BUILD_TESTS=OFF -DHOIST_BUILD_BENCH=OFF -DHOIST_BUILD_FUZZERS=ON -DCMAKE_UNITY_BUILD=ON \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
        -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" >/dev/null
      cmake --build build-fuzz -j "$jobs"
      # One fuzzer per core at a time (each one process), 45 s each: two at once run fewer
      # inputs a second than one alone, so 45 s beside another is about 30 s alone (2026-12-03:
      # gguf 0.79 M inputs against 1.06 M, index 1.04 M against 1.30 M, safetensors 95 k
      # against 74 k, options 91 k against 55 k).
      seconds=${HOIST_FUZZ_SECONDS:-45}
      fuzz_dir=$(mktemp -d)
      targets=(gguf safetensors index options packed exponent_code)
      for target in "${targets[@]}"; do
        seeds="$fuzz_dir/$target"
        mkdir "$seeds"
        case $target in
          gguf) cp tests/corpus/gguf/dummy-10-tensors.gguf tests/corpus/gguf/llama-2-tiny-random.gguf "$seeds"/ ;;
          safetensors) head -c 65536 tests/corpus/safetensors/hadamards.safetensors >"$seeds"/head ;;
          index) printf '{"metadata":{"total_size":8},"weight_map":{"a":"x.safetensors"}}' >"$seeds"/index.json ;;
          options) printf '\001--chunk\0003.3\000--staging\000nan\000--threads\0008' >"$seeds"/cli
                   head -c 96 /dev/urandom >"$seeds"/c_api ;;
          # A packed tensor of 16 Ki normal bf16 values (one coded tensor, one stored as it is).
          packed) "$python" -c "
import json, random, struct, sys
random.seed(1)
w = b''.join(struct.pack('<f', random.gauss(0, 0.02))[2:] for _ in range(16384))
h = json.dumps({'w': {'dtype': 'BF16', 'shape': [16384], 'data_offsets': [0, 32768]},
                'b': {'dtype': 'F32', 'shape': [4], 'data_offsets': [32768, 32784]}}).encode()
sys.stdout.buffer.write(struct.pack('<Q', len(h)) + h + w + bytes(16))" >"$seeds"/m.safetensors
                  build-fuzz/hoist pack "$seeds"/m.safetensors -o "$seeds"/m.hoistpack >/dev/null
                  rm "$seeds"/m.safetensors ;;
          exponent_code) head -c 4096 /dev/urandom >"$seeds"/values ;;
        esac
      done
      fuzz_failed=()
      for ((first = 0; first < ${#targets[@]}; first += jobs)); do
        pids=()
        for target in "${targets[@]:first:jobs}"; do
          echo "fuzzing ${target} for ${seconds}s"
          build-fuzz/fuzz/${target}_fuzzer -max_total_time="$seconds" -max_len=65536 \
            -malloc_limit_mb=64 -rss_limit_mb=2048 -print_final_stats=1 "$fuzz_dir/$target" \
            >"$fuzz_dir/$target.log" 2>&1 &
          pids+=($!)
        done
        for i in "${!pids[@]}"; do
          target=${targets[first + i]}
          if wait "${pids[i]}"; then
            echo "$target: $(grep -E "^Done" "$fuzz_dir/$target.log"), peak" \
              "$(grep -oE "stat::peak_rss_mb: *[0-9]+" "$fuzz_dir/$target.log" | grep -oE "[0-9]+$") MB"
          else
            tail -60 "$fuzz_dir/$target.log"
            fuzz_failed+=("$target")
          fi
        done
      done
      rm -rf "$fuzz_dir"
      [ ${#fuzz_failed[@]} -eq 0 ] || { echo "fuzzers that found a failure: ${fuzz_failed[*]}" >&2; exit 1; }
      ;;
    windows)
      banner "Windows: MinGW-w64 cross-build, tests under wine"
      # -O2: GCC 12's -O3 warns falsely (-Wrestrict, -Warray-bounds) inside libstdc++.
      cmake -S . -B build-windows -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/mingw-w64.cmake -DHOIST_WERROR=ON \
        -DHOIST_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=ON \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" >/dev/null
      cmake --build build-windows -j "$jobs"
      export WINEDEBUG=-all
      wine build-windows/hoist.exe --version
      ctest --test-dir build-windows --output-on-failure -j "$jobs"
      # The CLI end to end under wine: a sample model loaded with checksums and verified.
      sample=build-windows/sample.gguf
      wine build-windows/hoist.exe make-sample "$sample" --size 64MiB
      wine build-windows/hoist.exe load "$sample" --device host --checksum --quiet
      wine build-windows/hoist.exe verify "$sample" --device host --quiet
      ;;
    hip)
      banner "HIP backend build (Debian's ROCm; no AMD GPU here)"
      # Build-only check, unoptimised to keep it quick; the packed form's decoder compiled by
      # hipcc for AMD's GPUs (HOIST_GPU_KERNELS), the one build in CI that compiles the kernel.
      # HOIST_HIP=ON alone picks HIP (the CUDA backend's default turns off).
      # hoist_llama too, against the main stage's libllama: what llama.cpp's HIP build links.
      bash scripts/build-llama.sh build-llama
      cmake -S . -B build-hip -DHOIST_HIP=ON -DHOIST_GPU_KERNELS=ON -DHOIST_WERROR=ON \
        -DHOIST_BUILD_TESTS=OFF -DHOIST_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=None -DCMAKE_UNITY_BUILD=ON \
        "${llama_flags[@]}" >/dev/null
      cmake --build build-hip -j "$jobs"
      set +e
      out=$(build-hip/hoist load tests/corpus/gguf/dummy-10-tensors.gguf --device hip:0 2>&1)
      rc=$?
      set -e
      echo "$out"
      if [ "$rc" -ne 1 ] || ! grep -q "hip: no usable GPU" <<<"$out"; then
        echo "the HIP build should say plainly that no AMD GPU is present (exit 1)" >&2
        exit 1
      fi
      ;;
    python)
      banner "Python: pip install --no-build-isolation . and the tests against the installed package"
      target=$(mktemp -d)
      # pip builds with setup.py's CMake in the main stage's build folder: the package holds
      # what the main stage built and tested, and nothing is compiled twice (run alone, this
      # stage configures that folder as the main stage does).
      [ -f build/CMakeCache.txt ] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHOIST_WERROR=ON \
        -DHOIST_PYTHON=ON -DPython_EXECUTABLE="$python" "${cuda_flags[@]}" >/dev/null
      HOIST_CMAKE_BUILD_DIR="$PWD/build" HOIST_BUILD_JOBS=$jobs \
        "$python" -m pip install --no-build-isolation --no-deps --no-index --quiet --target "$target" .
      # The command-line tool that pip installs with the package, as a module and as a script.
      for tool in "$python -m hoist" "$target/bin/hoist"; do
        # shellcheck disable=SC2086
        version=$(cd /tmp && PYTHONPATH="$target" $tool --version)
        [[ $version == "hoist "* ]] || { echo "$tool --version gave '$version'" >&2; exit 1; }
      done
      echo "python -m hoist and the hoist script run the installed tool: $version"
      # The README's own install line, as written (into venv/, with the same build folder).
      readme_line=$(grep -m1 '^/usr/bin/python3 -m venv ' README.md)
      [ -n "$readme_line" ] || { echo "README.md has no Python install line" >&2; exit 1; }
      rm -rf venv
      HOIST_CMAKE_BUILD_DIR="$PWD/build" HOIST_BUILD_JOBS=$jobs bash -c "$readme_line --quiet"
      (cd /tmp && "$OLDPWD/venv/bin/python" -c "import hoist; print('the README line installs', hoist.__version__)")
      venv/bin/hoist --version >/dev/null
      rm -rf venv
      # One version: CMake's project(VERSION) in the package metadata, hoist.__version__ and the tool.
      (cd /tmp && PYTHONPATH="$target" "$python" -c "
import importlib.metadata, hoist, sys
meta = importlib.metadata.version('hoist')
tool = sys.argv[1].split()[1]
assert hoist.__version__ == meta == tool, (hoist.__version__, meta, tool)
print('one version everywhere:', meta)" "$version")
      # A Python linter over the package, its tests and the harnesses (the vendored safetensors
      # tests keep upstream's text).
      find python/hoist python/tests bench scripts -name '*.py' -not -path '*/safetensors_reference/*' \
        -print0 | xargs -0 "$python" -m pyflakes
      echo "pyflakes: the package, its tests and the harnesses are clean"
      (cd /tmp && PYTHONPATH="$target" HOIST_CORPUS_DIR="$OLDPWD/tests/corpus" \
        HOIST_CLI="$OLDPWD/build/hoist" "$python" -m unittest discover -s "$OLDPWD/python/tests")
      # The installed stubs type-check a user's code under mypy --strict, and catch a misuse.
      (cd /tmp && MYPYPATH="$target" "$python" -m mypy --strict --cache-dir "$target/.mypy" \
        "$OLDPWD/python/tests/typing_usage.py")
      echo 'import hoist; hoist.open(1.5)' >"$target/misuse.py"
      if (cd /tmp && MYPYPATH="$target" "$python" -m mypy --strict --cache-dir "$target/.mypy" \
        "$target/misuse.py" >/dev/null); then
        echo "mypy accepted hoist.open(1.5): the stubs check nothing" >&2
        exit 1
      fi
      echo "the stubs type-check typing_usage.py under mypy --strict and refuse a misuse"
      rm -rf "$target"
      ;;
    *) echo "unknown stage $stage" >&2; exit 1 ;;
  esac
  timings+=("$stage $((SECONDS - stage_start))s")
done
stage=""
banner "all stages passed: ${stages[*]}"
