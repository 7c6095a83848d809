"""Engine environment variables the pinned engine version does not know: set, but silently
ignored (SGLang) or only warned about (vLLM's "Unknown vLLM environment variable detected").
Pure: the caller passes the known names (``tp2qual.engine_env`` reads the shipped table)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from tp2qual.engines import engine_for


def unknown_engine_env(
    engine: str, version: str, env: Mapping[str, str], known: Collection[str], source: str
) -> list[str]:
    """One problem per variable with the engine's prefix that ``known`` lacks, sorted by name."""
    prefix = engine_for(engine).env_prefix  # a variable with it the engine never reads: inert
    if prefix is None:
        return []
    return [
        f"launch.env.{name}: {engine} {version} has no such variable ({source}); "
        "it would be ignored: remove it, or pin the engine version that reads it"
        for name in sorted(env)
        if name.startswith(prefix) and name not in known
    ]
