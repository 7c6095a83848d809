"""One module per engine (as testcontainers-python keeps one per technology), looked up by a
candidate's ``engine.kind``. Everything engine-specific the suite uses is read from here: the
request builder (``gates.py``), identity (``serving/identity.py``), tool-call finish rules
(``checks/toolcalls.py``), server metrics (``perf/``), KV capacity and over-length behaviour
(gate 06, ``checks/overlength.py``), the environment prefix (``checks/engine_env.py``) and the
log lines ``checks/ranks.py``, the diagnosis and ``perf/`` read. Data and pure functions only.
Nothing outside this package imports an engine module or tests a kind against an engine's name
(``plugins/tests/test_engine_facts_one_way.py``): a candidate's engine is ``engine_for(kind)``,
and a log whose engine is not known is read with every engine's lines (``all_engines``,
``any_engine_line``).

Adding an engine: a module beside these with one ``ENGINE``, listed in ``ENGINES``, and its kind
in ``candidate.schema.json`` (a self-test keeps the two lists equal).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from tp2qual.engines import llamacpp, sglang, vllm
from tp2qual.engines.engine import (
    ENVELOPES,
    OBJECT_ERROR,
    OPENAI_ERROR,
    Engine,
    ErrorEnvelope,
    Evidence,
    KernelLine,
    KvCapacity,
    OverLength,
    StepWatch,
)

__all__ = [
    "ENGINES",
    "ENVELOPES",
    "OBJECT_ERROR",
    "OPENAI_ERROR",
    "AnyEngineLine",
    "Engine",
    "ErrorEnvelope",
    "Evidence",
    "KernelLine",
    "KvCapacity",
    "OverLength",
    "StepWatch",
    "all_engines",
    "any_engine_line",
    "engine_for",
]

ENGINES: dict[str, Engine] = {e.kind: e for e in (vllm.ENGINE, sglang.ENGINE, llamacpp.ENGINE)}


def engine_for(kind: str) -> Engine:
    """The engine a candidate's ``engine.kind`` names (the schema admits only these kinds)."""
    try:
        return ENGINES[kind]
    except KeyError:
        raise KeyError(f"engine.kind {kind!r}: no such engine (known: {sorted(ENGINES)})") from None


def all_engines() -> tuple[Engine, ...]:
    """Every known engine, in ``ENGINES``' order: for what is read without knowing the engine
    (a server log the diagnosis is given, a serve's last words)."""
    return tuple(ENGINES.values())


@dataclass(frozen=True)
class AnyEngineLine:
    """The log line ``name`` (an ``Engine.log_lines`` key) as every engine that logs one words
    it, read as one compiled pattern is: ``search`` and ``match`` give the first engine's match
    (in ``ENGINES``' order), ``finditer`` every engine's."""

    name: str
    patterns: tuple[re.Pattern[str], ...]

    def search(self, text: str) -> re.Match[str] | None:
        return next(filter(None, (p.search(text) for p in self.patterns)), None)

    def match(self, text: str) -> re.Match[str] | None:
        return next(filter(None, (p.match(text) for p in self.patterns)), None)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        for pattern in self.patterns:
            yield from pattern.finditer(text)


def any_engine_line(name: str) -> AnyEngineLine:
    """Line ``name`` of every engine that logs it (none: it matches nothing)."""
    return AnyEngineLine(
        name, tuple(e.log_line(name) for e in all_engines() if name in e.log_lines)
    )
