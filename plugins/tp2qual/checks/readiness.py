"""Whether a server's start-up ended ready, judged from its record (``readiness.json``).

Ready means alive + model listed + one real token (``serving.readiness``); the record keeps
when each stage was reached and how the wait ended (``exited`` with the exit status,
``timeout`` after the bound). ``verify`` judges a start-up failure again from this record:
the gate that needed the server failed because the record shows no ready server. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tp2qual.checks.verdict import Verdict


def judge_readiness(record: Mapping[str, Any]) -> Verdict:
    """Ready iff the wait ended ready: the model listed and one token generated."""
    outcome = record.get("outcome")
    listed = record.get("listed_models") or []
    if outcome in (None, "ready") and record.get("first_token_s") is not None and listed:
        return Verdict.passed(first_token_s=record["first_token_s"], listed_models=listed)
    if outcome == "exited":
        return Verdict.failed(
            f"server exited during start-up after {record.get('waited_s')}s ({record.get('exit')})"
        )
    if outcome == "timeout":
        return Verdict.failed(
            f"not ready after {record.get('timeout_s')}s (stage: {stage(record)})"
        )
    return Verdict.failed(f"the start-up wait ended {outcome or 'without an outcome'}, not ready")


def stage(record: Mapping[str, Any]) -> str:
    """How far a start-up got, in words."""
    if record.get("listed_s") is not None:
        return "model listed, no token yet"
    if record.get("answered_s") is not None:
        return f"HTTP up, {record.get('listed_models') or 'no models'} listed"
    return "no HTTP answer yet"
