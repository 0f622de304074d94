# Sourced by the device scripts: build_python builds hoist's Python module on the GPU machine
# (into build-py/python) unless it is there and REBUILD is unset. Needs BIN (the carried
# .device/ with the header-only dependencies), OUT and log().
build_python() {
  [ -f build-py/python/hoist/__init__.py ] && [ -z "${REBUILD:-}" ] && return 0
  log "building the Python module here"
  local start
  start=$(date +%s)
  cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DHOIST_PYTHON=ON -DHOIST_BUILD_TESTS=OFF \
    -DHOIST_BUILD_BENCH=OFF -DHOIST_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DHOIST_HOST_HEADER_ONLY_DEPS=ON -DHOIST_HEADER_ONLY_DEPS_DIR="$BIN/include" \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v python3)" \
    >"$OUT/cmake.txt" 2>&1 || { tail -30 "$OUT/cmake.txt"; return 1; }
  cmake --build build-py -j "$(nproc)" --target hoist_python_native >"$OUT/build.txt" 2>&1 \
    || { tail -40 "$OUT/build.txt"; return 1; }
  echo "built in $(( $(date +%s) - start )) s" | tee -a "$OUT/log.txt"
}
