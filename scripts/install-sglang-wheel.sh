#!/usr/bin/env bash
# Install SGLang 0.5.23's own wheel, without its dependencies, into a venv of its own: what the
# engine-check self-test (plugins/tests/test_engine_check.py) asks SGLang's environment registry
# with. No server can run from it: `import sglang` needs torch, numpy and more (its first failing
# import is numpy, at sglang/srt/utils/common.py:84, then torch at :89), so SGLang's argument
# parser does not import here and gate 00 says so; sglang/srt/environ.py (the registry of its
# variables and of those it deprecated) is stdlib-only and is read from this wheel. Idempotent.
#
#   ${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}/venvs/sglang-0.5.23-nodeps
#
# Environment: TP2QUAL_CACHE, PYTHON (default python3.11: the hash below is of the cp311 wheel).
set -euo pipefail

version="0.5.23"
# sha256 of sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl, from PyPI (2026-12-02)
sha256="00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
cache="${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}"
venv="$cache/venvs/sglang-$version-nodeps"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
log() { printf '[install-sglang-wheel] %s\n' "$*"; }

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c \
    "import importlib.metadata as m, sys; sys.exit(m.version('sglang') != '$version')" 2>/dev/null; then
    log "present: $venv"
    exit 0
fi
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps --require-hashes \
    -r <(echo "sglang==$version --hash=sha256:$sha256")
log "installed sglang $version (no dependencies) in $venv ($(du -sh "$venv" | cut -f1))"
