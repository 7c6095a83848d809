"""One module per engine (as testcontainers-python keeps one per technology), looked up by a
candidate's ``engine.kind``. Everything engine-specific the suite uses is read from here: the
request builder (``gates.py``), identity (``serving/identity.py``), tool-call finish rules
(``checks/toolcalls.py``), server metrics (``perf/``), KV capacity and over-length behaviour
(gate 06, ``checks/overlength.py``), the environment prefix (``checks/engine_env.py``) and the
log lines ``checks/ranks.py`` and ``perf/metrics.py`` read. Data and pure functions only.

Adding an engine: a module beside these with one ``ENGINE``, listed in ``ENGINES``, and its kind
in ``candidate.schema.json`` (a self-test keeps the two lists equal).
"""

from __future__ import annotations

from tp2qual.engines import llamacpp, sglang, vllm
from tp2qual.engines.engine import (
    ENVELOPES,
    OBJECT_ERROR,
    OPENAI_ERROR,
    Engine,
    ErrorEnvelope,
    KernelLine,
    KvCapacity,
    OverLength,
)

__all__ = [
    "ENGINES",
    "ENVELOPES",
    "OBJECT_ERROR",
    "OPENAI_ERROR",
    "Engine",
    "ErrorEnvelope",
    "KernelLine",
    "KvCapacity",
    "OverLength",
    "engine_for",
]

ENGINES: dict[str, Engine] = {e.kind: e for e in (vllm.ENGINE, sglang.ENGINE, llamacpp.ENGINE)}


def engine_for(kind: str) -> Engine:
    """The engine a candidate's ``engine.kind`` names (the schema admits only these kinds)."""
    try:
        return ENGINES[kind]
    except KeyError:
        raise KeyError(f"engine.kind {kind!r}: no such engine (known: {sorted(ENGINES)})") from None
