#!/usr/bin/env bash
# Install the suite (editable) with the given extras, e.g. `scripts/install.sh local,dev`.
# llama-cpp-python is built once into a wheelhouse shared by checkouts (TP2QUAL_CACHE, default
# ~/.cache/tp2qual) and by the local Docker image. Why not pip's own build: it compiles llama.cpp
# with -march=native, and on VMs that report AMX/AVX-512 that build segfaults at the first token;
# GGML_NATIVE=OFF with AVX2 runs on any x86-64 host of the last decade.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-local}
house=${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/wheelhouse
version=0.3.36
mkdir -p "$house"
if [[ ,$extras, == *,local,* ]] && ! compgen -G "$house/llama_cpp_python-$version-*.whl" >/dev/null; then
  start=$(date +%s)
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_OPENMP=OFF" \
    python -m pip wheel --no-cache-dir --no-deps "llama-cpp-python==$version" -w "$house"
  echo "install: built llama-cpp-python $version in $(( $(date +%s) - start ))s into $house"
fi
python -m pip install --disable-pip-version-check -q --find-links "$house" -e ".[$extras]"
echo "install: tp2qual[$extras] installed"
