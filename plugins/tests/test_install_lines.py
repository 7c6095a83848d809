"""Every ``scripts/install.sh`` line the documentation gives, run by bash as written.

The real script runs with ``TP2QUAL_INSTALL_DRY_RUN=1``: it parses its extras, checks Python and
the wheelhouse as in a real install, and prints each command that would change something
instead of running it (a full install is minutes and gigabytes; CI runs ``local``, ``local,dev``
and ``local,dev,vllm`` for real). It runs from a copy of ``scripts/`` in a temporary checkout,
so the dry run is also proven to change nothing.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install.sh"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ENGINES = {"vllm", "sglang"}  # installed by scripts/install-<engine>.sh into a venv of their own
_LINE = re.compile(r"scripts/install\.sh(?:[ \t]+([a-z0-9_,-]+\b))?")


def documented_extras() -> list[str]:
    """The extras argument of every install line in the documentation ("" for none)."""
    found = {m.group(1) or "" for doc in DOCUMENTS for m in _LINE.finditer(doc.read_text())}
    return sorted(found)


def dry_install(checkout: Path, *args: str, venv: Path | None = None) -> tuple[int, list[str]]:
    """Run the real script by bash from ``checkout``; its exit status and printed lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TP2QUAL_LATEST")}
    env |= {"TP2QUAL_INSTALL_DRY_RUN": "1", "TP2QUAL_CACHE": str(checkout / "cache")}
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
    done = subprocess.run(
        ["bash", str(checkout / "scripts" / "install.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, (done.stdout + done.stderr).splitlines()


def would_run(lines: list[str]) -> list[list[str]]:
    prefix = "install: would run: "
    return [shlex.split(line[len(prefix) :]) for line in lines if line.startswith(prefix)]


def suite_install(commands: list[list[str]]) -> str:
    """The pip target of the suite's install (``.`` or ``.[a,b]``), exactly one."""
    targets = [c[c.index("-e") + 1] for c in commands if c[1:4] == ["-m", "pip", "install"]]
    assert len(targets) == 1, commands
    return targets[0]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    return tmp_path


def test_the_documentation_gives_the_lines_users_need() -> None:
    assert {"local", "local,dev", "vllm"} <= set(documented_extras())


@pytest.mark.parametrize(
    "extras", sorted({*documented_extras(), "vllm", "local,dev", "local,dev,vllm", "dev,vllm"})
)
def test_install_line_parses_and_would_install(checkout: Path, extras: str) -> None:
    rc, lines = dry_install(checkout, *([extras] if extras else []))
    assert rc == 0, lines
    asked = set((extras or "local").split(","))
    commands = would_run(lines)
    target = suite_install(commands)  # "." or ".[a,b]": the suite is always installed
    assert target == "." or (target.startswith(".[") and target.endswith("]")), target
    assert set(filter(None, target[2:-1].split(","))) == asked - ENGINES
    engines = [c[0] for c in commands if c[0].startswith("scripts/install-")]
    assert engines == [f"scripts/install-{e}.sh" for e in sorted(asked & ENGINES)]
    assert all(Path(checkout, e).is_file() for e in engines), engines  # the script it calls
    builds_wheel = any("wheel" in c for c in commands)
    assert builds_wheel == ("local" in asked)  # the wheelhouse in TP2QUAL_CACHE is empty
    # A dry run changes nothing: no venv, no wheelhouse.
    assert not (checkout / ".venv").exists() and not (checkout / "cache").exists()


def test_an_active_venv_is_used_not_made(checkout: Path, tmp_path: Path) -> None:
    rc, lines = dry_install(checkout, "vllm", venv=tmp_path / "active")
    assert rc == 0, lines
    commands = would_run(lines)
    assert not [c for c in commands if c[1:3] == ["-m", "venv"]], commands
    pip = next(c for c in commands if c[1:4] == ["-m", "pip", "install"])
    assert pip[0] == str(tmp_path / "active" / "bin" / "python")


@pytest.mark.parametrize("extras", ["vlm", "local,gpu", "LOCAL"])
def test_an_unknown_extra_is_refused_before_anything(checkout: Path, extras: str) -> None:
    rc, lines = dry_install(checkout, extras)
    assert rc == 2, lines
    assert not would_run(lines), lines
    assert any("unknown extra" in line and "known: local, dev, vllm" in line for line in lines)


def test_the_script_knows_every_extra_of_the_package(checkout: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = set(project["optional-dependencies"])
    rc, lines = dry_install(checkout, "nothing-of-that-name")
    known = re.search(r"known: ([a-z, ]+)\)", "\n".join(lines))
    assert rc == 2 and known, lines
    assert set(known.group(1).split(", ")) == declared | ENGINES
