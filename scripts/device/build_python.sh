# Sourced by the device scripts: build_python builds hoist's Python module on the GPU machine
# (into build-py/python) unless it is there and REBUILD is unset. Needs BIN (the carried
# .device/ with the header-only dependencies), OUT and log().
# Builds the Python module of the tree at SOURCE into BUILD (its python/ the package), logs
# in BUILD/cmake.txt and BUILD/build.txt; the one configuration every device script uses.
build_python_tree() {  # SOURCE BUILD
  mkdir -p "$2"
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DHOIST_PYTHON=ON -DHOIST_BUILD_TESTS=OFF \
    -DHOIST_BUILD_BENCH=OFF -DHOIST_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DHOIST_HOST_HEADER_ONLY_DEPS=ON -DHOIST_HEADER_ONLY_DEPS_DIR="$BIN/include" \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v python3)" \
    >"$2/cmake.txt" 2>&1 || { tail -30 "$2/cmake.txt"; return 1; }
  cmake --build "$2" -j "$(nproc)" --target hoist_python_native >"$2/build.txt" 2>&1 \
    || { tail -40 "$2/build.txt"; return 1; }
}

build_python() {
  [ -f build-py/python/hoist/__init__.py ] && [ -z "${REBUILD:-}" ] && return 0
  log "building the Python module here"
  local start
  start=$(date +%s)
  build_python_tree . build-py || return 1
  echo "built in $(( $(date +%s) - start )) s" | tee -a "$OUT/log.txt"
}
