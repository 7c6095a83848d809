"""The image recipes under images/ (nothing is built here: the SGLang images need a registry).

Every Dockerfile's bases are pinned by digest or exact tag, never ``latest`` or no tag; the
campaign's SGLang images (images/anvil-sglang/) are built on the SGLang version their candidates
state and name only edits that edits.py has; and where SGLang 0.5.23's package is at hand
(``TP2QUAL_SGLANG_SRC``, else an installed ``sglang``) every edit applies to it exactly once.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tp2qual.candidate import load_candidates

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile*"))
DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
SGLANG_VERSION = "0.5.23"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def bases(text: str) -> tuple[list[str], list[str]]:
    """Each FROM's image reference with the ARG defaults before it filled in, and what is
    wrong with any of them (not pinned by digest or exact tag; ``latest``)."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    refs: list[str] = []
    problems: list[str] = []
    for word, rest in instructions(text):
        if word == "ARG" and "=" in rest and not refs:
            name, _, default = rest.partition("=")
            args[name] = default.strip('"')
        if word != "FROM":
            continue
        parts = rest.split()
        ref = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), parts[0])
        earlier_stage = ref in stages
        if len(parts) == 3 and parts[1].upper() == "AS":
            stages.add(parts[2])
        refs.append(ref)
        if earlier_stage or DIGEST.match(ref):
            continue
        tag = ref.rpartition(":")[2] if ":" in ref.rpartition("/")[2] else ""
        if "$" in ref or not tag or tag == "latest":
            problems.append(f"FROM {parts[0]} -> {ref}: not pinned by digest or exact tag")
    return refs, problems


@pytest.mark.parametrize(
    "dockerfile", DOCKERFILES, ids=[str(p.relative_to(IMAGES)) for p in DOCKERFILES]
)
def test_every_base_is_pinned(dockerfile: Path) -> None:
    refs, problems = bases(dockerfile.read_text())
    assert refs and not problems, problems


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("FROM lmsysorg/sglang\n", "not pinned"),
        ("FROM lmsysorg/sglang:latest\n", "not pinned"),
        ("ARG B=lmsysorg/sglang:latest\nFROM ${B}\n", "-> lmsysorg/sglang:latest"),
        ("FROM ${UNSET}\n", "not pinned"),
        ("FROM localhost:5000/sglang\n", "not pinned"),  # a registry port is no tag
    ],
)
def test_an_unpinned_base_is_caught(text: str, problem: str) -> None:
    _refs, problems = bases(text)
    assert problems and problem in problems[0], problems


def test_pinned_bases_pass() -> None:
    assert bases(f"FROM repo@sha256:{'a' * 64}\nFROM x:1 AS b\nFROM b\n")[1] == []


def _edits() -> ModuleType:
    spec = importlib.util.spec_from_file_location("anvil_edits", IMAGES / "anvil-sglang/edits.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while it loads
    spec.loader.exec_module(module)
    return module


def named_edits(dockerfile: Path) -> list[str]:
    runs = [rest for word, rest in instructions(dockerfile.read_text()) if word == "RUN"]
    found = re.findall(r"tp2qual-edits\.py ((?:[a-z0-9-]+ ?)+)", " ".join(runs))
    return [name for group in found for name in group.split()]


SGLANG_IMAGES = {
    c.launch["docker"]["image"]: c
    for c in load_candidates([ROOT / "candidates"])
    if c.launcher_kind == "docker" and c.launch["docker"]["image"].startswith("anvil-sglang:")
}


@pytest.mark.parametrize("image", sorted(SGLANG_IMAGES))
def test_each_campaign_sglang_image_has_its_recipe(image: str) -> None:
    candidate = SGLANG_IMAGES[image]
    dockerfile = IMAGES / "anvil-sglang" / f"Dockerfile.{image.partition(':')[2]}"
    text = dockerfile.read_text()
    (base,), _ = bases(text)
    version = candidate.spec["engine"]["version"]
    assert base.startswith("lmsysorg/sglang:v" + version + "-") or DIGEST.match(base), base
    assert f'tp2qual.engine.version="{version}"' in text
    assert f"assert v == '{version}'" in text  # the build checks the image's own SGLang
    names = named_edits(dockerfile)
    assert names and set(names) <= set(_edits().EDITS), names
    assert "images/anvil-sglang" in candidate.launch["docker"]["how_to_pin"]


def _sglang_source() -> Path | None:
    if given := os.environ.get("TP2QUAL_SGLANG_SRC"):
        return Path(given)
    # scripts/install-sglang-wheel.sh: the wheel without its dependencies, enough to read
    cache = Path(os.environ.get("TP2QUAL_CACHE", Path.home() / ".cache" / "tp2qual"))
    wheel = sorted(
        (cache / f"venvs/sglang-{SGLANG_VERSION}-nodeps").glob("lib/python*/site-packages/sglang")
    )
    if wheel:
        return wheel[0]
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    if importlib.metadata.version("sglang") != SGLANG_VERSION:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def test_every_edit_applies_once_to_sglang_0_5_23(tmp_path: Path) -> None:
    source = _sglang_source()
    if source is None:
        pytest.skip(f"no SGLang {SGLANG_VERSION} package here (set TP2QUAL_SGLANG_SRC to one)")
    edits = _edits()
    files = {rep.file for edit in edits.EDITS.values() for rep in edit.replaces}
    for rel in files:  # a copy of just the edited files
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, tmp_path / rel)
    assert edits.apply(list(edits.EDITS), tmp_path) == []
    for rel in files:
        compile((tmp_path / rel).read_text(), rel, "exec")  # still Python
    # applied twice: every edit finds its text gone and nothing is written
    again = edits.apply(list(edits.EDITS), tmp_path)
    assert len(again) == sum(len(e.replaces) for e in edits.EDITS.values()), again
