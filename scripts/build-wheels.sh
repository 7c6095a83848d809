#!/usr/bin/env bash
# Build the portable llama-cpp-python wheel once into .cache/wheelhouse.
# Why not pip's default build: it compiles llama.cpp with -march=native, and on VMs that report
# AMX/AVX-512 that build segfaults at the first token. GGML_NATIVE=OFF with AVX2 runs on any
# x86-64 host of the last decade, and the same wheel goes into the Docker image.
set -euo pipefail
cd "$(dirname "$0")/.."
house=.cache/wheelhouse
version=0.3.36
mkdir -p "$house"
if ls "$house"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "wheelhouse: llama-cpp-python $version already built"
  exit 0
fi
start=$(date +%s)
CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_OPENMP=OFF" \
  python -m pip wheel --no-cache-dir --no-deps "llama-cpp-python==$version" -w "$house"
echo "wheelhouse: built llama-cpp-python $version in $(( $(date +%s) - start ))s"
