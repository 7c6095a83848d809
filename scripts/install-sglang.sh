#!/usr/bin/env bash
# Install SGLang 0.5.23 from PyPI into its own venv, to serve on the CPU, and the SmolLM2-135M
# folders the SGLang candidates serve (the same ones the vLLM candidates serve: converted by
# scripts/install-vllm.sh's steps, shared under models/). Idempotent: a venv whose stamp matches
# the lock file and a model folder that is present are left as they are.
#
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/venvs/sglang-0.5.23                 the engine's venv
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/models/SmolLM2-135M-Instruct-hf      the model folder
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/models/SmolLM2-135M-Instruct-hf-tp2  its heads padded for TP2
#
# What the venv holds and why:
# - torch==2.14.1 from PyPI: its CUDA build, which runs on the CPU (SGLANG_USE_CPU_ENGINE=1 in
#   the candidates). The +cpu build does not do: PyPI's torchvision is built against the CUDA
#   torch, and SGLang always imports torchvision (sglang/srt/multimodal/internvl_utils.py).
# - sglang==0.5.23 --no-deps, with the packages the CPU serve imports (the lock), not its GPU
#   kernels (flashinfer, flash-attn-4, sglang-kernel, deep-ep/gemm, flash-mla, tilelang…).
# - sgl_kernel: PyPI has no CPU build, so scripts/sgl-kernel-stand-in/sgl_kernel is copied in:
#   every *_cpu name SGLang imports from it is a function that logs and raises when called (its
#   docstring says why none is called on this path, and how the gates' self-test shows it).
#
# Every package comes from the lock (scripts/sglang-0.5.23.lock.txt: `pip freeze` of a working
# venv) and is installed --no-deps, so pip resolves nothing.
#
# Environment: TP2QUAL_CACHE (default ~/.cache/tp2qual), PYTHON (default python3.11: the SGLang
# wheel is cp311), TP2QUAL_SGLANG_REBUILD=1 to rebuild the venv.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}"
version="0.5.23"
lock="$here/sglang-$version.lock.txt"
venv="$cache/venvs/sglang-$version"
stand_in="$here/sgl-kernel-stand-in/sgl_kernel"
stamp="$venv/.tp2qual-lock.sha256"

python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
log() { printf '[install-sglang] %s\n' "$*"; }

# The stamp covers the lock and the stand-in: a changed stand-in is copied in again.
lock_sum="$(cat "$lock" "$stand_in/__init__.py" | sha256sum | cut -d' ' -f1)"
start="$(now)"
if [[ "${TP2QUAL_SGLANG_REBUILD:-0}" != 1 && -x "$venv/bin/python" && -f "$stamp" \
      && "$(cat "$stamp")" == "$lock_sum" ]]; then
    log "venv present and matches the lock: $venv"
else
    "$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
        || { log "need Python 3.11: the sglang 0.5.23 wheel is cp311 (set PYTHON)"; exit 1; }
    log "creating $venv with $("$python" --version)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
    pip=("$venv/bin/python" -m pip --disable-pip-version-check)
    "${pip[@]}" install -q --no-deps -r <(grep -vE '^sglang==' "$lock")
    # sglang last, --no-deps: its metadata asks for the GPU kernels and pins torchaudio.
    "${pip[@]}" install -q --no-deps "$(grep -E '^sglang==' "$lock")"
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    rm -rf "$site/sgl_kernel"
    cp -r "$stand_in" "$site/sgl_kernel"
    find "$site/sgl_kernel" -name __pycache__ -prune -exec rm -rf {} +
    SGLANG_USE_CPU_ENGINE=1 "$venv/bin/python" -c 'import importlib.metadata as m, sglang.srt.server_args, torch; print(*(f"{d} {m.version(d)}" for d in ("sglang", "torch", "transformers", "xgrammar")))'
    echo "$lock_sum" > "$stamp"
    log "venv installed in $(since "$start")"
fi
log "venv size: $(du -sh "$venv" | cut -f1) ($(du -sch "$venv"/lib/python*/site-packages/nvidia* | tail -1 | cut -f1) of it NVIDIA libraries)"

"$here/smollm2-hf-models.sh" "$venv/bin/python" install-sglang
