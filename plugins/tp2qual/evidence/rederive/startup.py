"""The server's start-up judged again from its record: ``readiness.json`` (how the wait for a
ready server ended) by ``checks.readiness.judge_readiness``.

``verify`` asks this of the gate a start-up failure was charged to (the first gate that needed
the server): its failure is re-derived when the record shows no ready server.
"""

from __future__ import annotations

from pathlib import Path

from tp2qual.checks.readiness import judge_readiness
from tp2qual.evidence.rederive.common import GateRun, Rederived

READINESS = "readiness.json"  # serving/managed.py writes it, a failed start too


def startup(root: Path) -> Rederived | None:
    """The start-up re-derived, or None when no record of it is on disk."""
    record = GateRun(root, {}, "", 1).json(READINESS)
    if record is None:
        return None
    out = Rederived()
    out.judged("start-up", judge_readiness(record), READINESS)
    return out
