"""Which suite judged: the commit of the checkout the package runs from, recorded in every
finding's identity (``identity/suite.json``), so a verdict can be traced to the rules that gave
it, and a reference's transcript to the suite that recorded it."""

from __future__ import annotations

import importlib.metadata
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import tp2qual

SUITE = "identity/suite.json"
CHECKOUT = Path(tp2qual.__file__).resolve().parents[2]  # plugins/tp2qual -> the repository


@cache
def suite_identity(checkout: Path = CHECKOUT) -> dict[str, Any]:
    """``commit`` (40 hex, or None with ``why``), ``dirty`` (tracked files changed since it)
    and the package version. Read once per process: the checkout does not change under a run."""
    facts: dict[str, Any] = {"checkout": str(checkout), "version": _version()}
    try:
        commit = _git(checkout, "rev-parse", "HEAD")
        changed = _git(checkout, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError) as exc:
        return facts | {"commit": None, "why": f"not a git checkout here ({exc})"}
    return facts | {
        "commit": commit,
        "dirty": bool(changed),
        "changed_files": len(changed.split("\n")) if changed else 0,
    }


def _git(checkout: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), *args],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return done.stdout.strip()


def _version() -> str | None:
    try:
        return importlib.metadata.version("tp2qual")
    except importlib.metadata.PackageNotFoundError:
        return None
