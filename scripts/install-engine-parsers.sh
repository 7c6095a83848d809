#!/usr/bin/env bash
# Install the campaign engines' own argument parsers from their PyPI wheels, one venv per pinned
# engine version, with no GPU: what gate 00's self-test (plugins/tests/
# test_campaign_engine_check.py) and scripts/record-engine-answers.py ask about every shipped
# campaign launch. Nothing here can serve: each venv holds the engine's wheel (--no-deps, by
# sha256) and only the packages importing its parser, its tool/reasoning parser registries and
# its variable registry needs, on PyTorch 2.13.0's CPU build. Idempotent: a venv whose stamp
# matches its lock file is left as it is.
#
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/venvs/parser-vllm-0.22.1     vLLM 0.22.1 (NGC 26.06's)
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/venvs/parser-vllm-0.25.1     vLLM 0.25.1 (Laguna)
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/venvs/parser-sglang-0.5.23   SGLang 0.5.23
#
# What each parser needs to import, found by importing it until nothing was missing
# (2026-12-02): vLLM 0.22.1 and 0.25.1: torch, transformers, pydantic, msgspec, openai,
# openai-harmony, fastapi (0.25.1) and a dozen small ones (the lock files); SGLang 0.5.23: torch, triton (imported
# at sglang/srt/utils/common.py:91; 1 GB installed, the largest part), numpy, pydantic, msgspec,
# pyzmq, IPython, aiohttp and a few more. vLLM's CUDA build detects no platform without a GPU:
# the entry file forces its CPU platform (serving/engine_check_entry.py says why that is sound).
#
# Every package comes from the lock (scripts/parser-<engine>-<version>.lock.txt, `pip freeze`
# of a working venv) and is installed --no-deps, so pip resolves nothing. TP2QUAL_PARSERS_RELOCK=1
# resolves the top-level list below afresh (with the engine wheel's own version ranges) and
# rewrites the lock.
#
#   scripts/install-engine-parsers.sh                 all three
#   scripts/install-engine-parsers.sh vllm-0.25.1     one
#
# --no-compile: the parsers import once per check; compiling every file of torch and the engine
# at install would cost more than it saves.
#
# Environment: TP2QUAL_CACHE, PYTHON (default python3.11: the SGLang wheel is cp311).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
log() { printf '[install-engine-parsers] %s\n' "$*"; }

# engine-version -> the wheel's sha256 (PyPI, 2026-12-02)
declare -A WHEEL=(
    [vllm-0.22.1]="cc50536c93827a577b2bc45f038b8b866c31ed220631008521a337c9b2558f4d"
    [vllm-0.25.1]="16fc7a28df1576eb6f7ca0455026551b8f9adb674c19c66059359ef3e964bd1e"
    [sglang-0.5.23]="00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
)
# engine -> what importing its parser needs (TP2QUAL_PARSERS_RELOCK=1 resolves these)
VLLM_NEEDS="numpy packaging pydantic regex cbor2 psutil pyzmq urllib3 transformers gguf aiohttp
  openai-harmony openai msgspec cloudpickle pillow pybase64 cachetools uvloop py-cpuinfo
  prometheus-client partial-json-parser fastapi"
SGLANG_NEEDS="numpy orjson psutil pybase64 requests triton packaging pillow starlette msgspec
  pydantic pyzmq tqdm IPython aiohttp"

install_one() {
    local id="$1" engine="${1%-*}" version="${1##*-}"
    local venv="$cache/venvs/parser-$id" lock="$here/parser-$id.lock.txt"
    local stamp="$venv/.tp2qual-lock.sha256" began=$SECONDS
    [[ -n "${WHEEL[$id]:-}" ]] || { log "unknown engine version $id (known: ${!WHEEL[*]})"; exit 2; }
    local pin="$engine==$version --hash=sha256:${WHEEL[$id]}"
    if [[ "${TP2QUAL_PARSERS_RELOCK:-0}" != 1 && -x "$venv/bin/python" && -f "$stamp" \
          && "$(cat "$stamp")" == "$(sha256sum "$lock" | cut -d' ' -f1)" ]]; then
        log "present and matches its lock: $venv"
        return
    fi
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
    local pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
    "${pip[@]}" install --no-compile --no-deps --require-hashes -r <(echo "$pin")
    if [[ "${TP2QUAL_PARSERS_RELOCK:-0}" == 1 ]]; then
        local needs ranges
        needs="$VLLM_NEEDS"; [[ "$engine" == sglang ]] && needs="$SGLANG_NEEDS"
        # the engine wheel's own version ranges for those packages (its METADATA)
        ranges="$("$venv/bin/python" - "$engine" $needs <<'PY'
import importlib.metadata as m, re, sys
engine, names = sys.argv[1], {n.lower().replace("_", "-") for n in sys.argv[2:]}
for req in m.requires(engine) or []:
    spec = re.sub(r"\[[^]]*\]", "", req.split(";")[0]).strip()  # no extras: only what imports
    name = re.split(r"[<>=!~\[ ]", spec, maxsplit=1)[0].lower().replace("_", "-")
    if name in names and "extra ==" not in req:
        print(spec)
        names.discard(name)
print("\n".join(sorted(names)))
PY
)"
        "${pip[@]}" install --no-compile torch==2.13.0 $ranges
        "$venv/bin/python" -m pip freeze --exclude "$engine" | grep -v '^pip==' > "$lock"
        log "wrote $lock ($(wc -l < "$lock") packages)"
    else
        "${pip[@]}" install --no-compile --no-deps "$(grep -E '^torch==' "$lock")"
        "${pip[@]}" install --no-compile --no-deps -r <(grep -vE '^torch==' "$lock")
    fi
    sha256sum "$lock" | cut -d' ' -f1 > "$stamp"
    log "installed $id in $venv in $((SECONDS - began)) s ($(du -sh "$venv" | cut -f1))"
}

ids=("$@")
[[ ${#ids[@]} -gt 0 ]] || ids=(vllm-0.22.1 vllm-0.25.1 sglang-0.5.23)
for id in "${ids[@]}"; do
    install_one "$id"
done
