"""Gate 00 (preflight): the engine's answer on the launch judged again.

``engine_check.json`` records what the engine's own parser said of the launch; its answer runs
through ``checks.engine_answer.judge`` again. The pins are re-checked by verify's own pin checks.
"""

from __future__ import annotations

import json

from tp2qual.checks.engine_answer import judge as judge_engine_answer
from tp2qual.evidence.rederive.common import GateRun, Rederived, Unrederivable

ENGINE_CHECK = "engine_check.json"  # gate 00's engine answer (tests/test_00_preflight.py)


def preflight(run: GateRun) -> Rederived:
    """Gate 00's engine check: the engine's recorded answer judged again. (Its pins are
    re-checked by verify's own pin checks; a run whose engine was never asked has no answer.)"""
    out = Rederived()
    path = run.root / ENGINE_CHECK
    if not path.is_file():
        return out
    try:
        recorded = json.loads(path.read_text())
        verdict = judge_engine_answer(recorded["answer"], platform=recorded["platform"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Unrederivable(f"{ENGINE_CHECK} does not hold an engine answer: {exc!r}") from None
    new = {"accepted": verdict.ok, **verdict.measures}
    out.records = 1
    out.compare(ENGINE_CHECK, ENGINE_CHECK, recorded, **new)
    out.rows[ENGINE_CHECK] = [{**recorded, **new}]
    out.failures += [f"{ENGINE_CHECK}: {r}" for r in verdict.measures["refusals"]]
    return out
