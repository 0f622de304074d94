#!/usr/bin/env bash
# Installs what hoist's build and tests need on Debian 12 (run as root, or with sudo available).
# --core: only what building hoist needs (the demo), not the cross-compilers, wine, ROCm,
# torch and the reference readers that the tests use. --python: the core and what the Python
# package's build and its own tests need (the README's pip line), nothing else.
set -euo pipefail
core=false
python=false
[ "${1:-}" = --core ] && core=true
[ "${1:-}" = --python ] && { core=true; python=true; }
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
packages=(
  cmake g++ clang libclang-rt-14-dev make pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libxxhash-dev liburing-dev
  # models over HTTP(S); OpenSSL's libcrypto signs a Google service account's token requests
  libcurl4-openssl-dev libssl-dev
)
if ! $core; then
  packages+=(
    # the HTTP source's tests: a real web server on loopback, a self-signed certificate
    nginx openssl
    # the S3 source's tests: AWS's command-line client uploads the models (the reference client)
    awscli
    # the formatting and lint checks
    clang-format clang-tidy
    # the llama.cpp snapshot that integrations/llama.cpp is tested against (scripts/build-llama.sh)
    patch xz-utils
    # Windows cross-build and its test runner; the HIP backend's build check
    g++-mingw-w64-x86-64-posix wine wine64 libamdhip64-dev hipcc
    # the Python module and its tests (Debian's torch is CPU-only)
    python3-dev python3-venv python3-setuptools python3-wheel python3-pip pybind11-dev python3-numpy
    python3-torch python3-xxhash python3-tqdm
    # the CLI's --json documents checked against docs/schemas; the stubs under mypy --strict;
    # pyflakes over the Python code
    python3-jsonschema mypy python3-pyflakes
  )
fi
if $python; then
  packages+=(python3-dev python3-venv python3-setuptools python3-wheel python3-pip pybind11-dev
             python3-numpy python3-torch python3-xxhash python3-tqdm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js and npm for the test-only reference tools; a Node.js from elsewhere (which bundles
# npm and conflicts with Debian's npm package) is used as it is.
if ! $core; then
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The reference tools from npm (test-only, pinned): the GGUF reader of the differential test,
# the S3 server and AWS's Signature V4 signer of the S3 source's tests, Azurite of the Azure
# source's, and the real trained weights (an fp16 ONNX model) that packing is tested on.
if ! $core && { [ ! -d tests/reference/node_modules/@huggingface/gguf ] ||
                [ ! -d tests/reference/node_modules/s3rver ] ||
                [ ! -d tests/reference/node_modules/azurite ] ||
                [ ! -d tests/reference/node_modules/@imgly/background-removal-data ] ||
                [ ! -d tests/reference/node_modules/@smithy/signature-v4 ]; }; then
  npm ci --prefix tests/reference --no-audit --no-fund --loglevel=error
fi
echo "hoist: build dependencies are installed"
