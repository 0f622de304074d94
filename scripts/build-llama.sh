#!/usr/bin/env bash
# Builds the llama.cpp snapshot in third_party/llama.cpp (libllama and ggml, no tools) with the
# patches kept beside it applied, and installs it under PREFIX, where hoist's build finds it:
#   bash scripts/build-llama.sh PREFIX [CMAKE_ARGS...]
#   cmake -S . -B build -DHOIST_LLAMA=ON -DCMAKE_PREFIX_PATH=PREFIX
# The sources are unpacked to PREFIX/src (the llama.cpp tests read its internal headers there).
# Extra arguments go to llama.cpp's configure: -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
# -DGGML_CUDA_FA=OFF on a GPU machine; -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON for
# llama-server, llama-completion and llama-bench (common, which hoist_llama does not need, is
# off otherwise), which load through hoist with -DLLAMA_HOIST=HOIST_SOURCE
# -DLLAMA_HOIST_LIBRARY=.../libhoist.so (tools-load-through-hoist.patch says how).
# A PREFIX already built from the same snapshot, patches and arguments is kept as it is.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:?usage: scripts/build-llama.sh PREFIX [CMAKE_ARGS...]}
shift
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
vendor=$here/third_party/llama.cpp
stamp=$( (cat "$vendor"/*.tar.xz "$vendor"/*.patch "$0"; echo "$*") | sha256sum | cut -c1-16)
if [ -f "$prefix/.built-$stamp" ]; then
  echo "llama.cpp already built in $prefix"
  exit 0
fi
rm -rf "$prefix/src" "$prefix/build" "$prefix"/.built-*
mkdir -p "$prefix/src"
tar xJf "$vendor"/llama.cpp-*.tar.xz -C "$prefix/src" --strip-components=1
for p in "$vendor"/*.patch; do
  patch -d "$prefix/src" -p1 --quiet --forward <"$p"
done
cmake -S "$prefix/src" -B "$prefix/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_INSTALL_RPATH='$ORIGIN' \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF -DLLAMA_BUILD_COMMON=OFF "$@" >"$prefix/configure.log"
cmake --build "$prefix/build" -j "$(nproc)" >"$prefix/build.log" \
  || { tail -40 "$prefix/build.log" >&2; exit 1; }
cmake --install "$prefix/build" >/dev/null
touch "$prefix/.built-$stamp"
echo "llama.cpp built and installed in $prefix"
