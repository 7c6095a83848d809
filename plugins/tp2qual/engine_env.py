"""The shipped table of engine environment variables per engine version (``engine_env.json``,
written from the engines' wheels by scripts/engine-env-table.py), and its use on a candidate."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.checks.engine_env import unknown_engine_env
from tp2qual.engines import engine_for

TABLE = Path(__file__).with_name("engine_env.json")


@cache
def _table() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(TABLE.read_text(encoding="utf-8"))
    return loaded


def known_env(engine: str, version: str) -> tuple[frozenset[str], str] | None:
    """The names ``engine`` ``version`` knows and where they were read; None without a table."""
    entry = _table().get(engine, {}).get(version)
    if entry is None:
        return None
    return frozenset(entry["names"]), entry["source"]


def env_basis(candidate: Candidate) -> str:
    """What the candidate's engine variables are checked against, in words (for --plan)."""
    engine, version = candidate.engine, candidate.spec["engine"].get("version")
    if engine_for(engine).env_prefix is None:
        return f"{engine}: no engine variables to check"
    if not version:
        return f"{engine}: not checked (engine.version is unset)"
    found = known_env(engine, version)
    if found is None:
        tables = ", ".join(sorted(_table().get(engine, {})))
        return f"{engine} {version}: not checked (tables for {tables or 'none'})"
    return f"{engine} {version}: {found[1]}"


def candidate_env_problems(candidate: Candidate) -> list[str]:
    """Engine variables in ``launch.env`` that the pinned engine version does not know."""
    version = candidate.spec["engine"].get("version")
    found = known_env(candidate.engine, version) if version else None
    if found is None:
        return []
    known, source = found
    return unknown_engine_env(candidate.engine, version, candidate.env(), known, source)


def source_mentions(engine: str, version: str | None) -> dict[str, list[str]]:
    """Other programs' variables (NCCL_*, HF_*, …) -> the engine's source lines naming them."""
    entry = _table().get(engine, {}).get(version or "")
    return dict(entry.get("mentions", {})) if entry else {}
