"""verify, for a run that took the GPUs over from named serves: "restored" is judged again from
``handover.json``'s before- and after-state (``checks.handover.judge_restored``), never trusted.

A run whose serves did not come back is a problem, said with the container, both states and the
commands to restore it by hand; so is a record whose ``restored`` its own states do not give.
"""

from __future__ import annotations

import json
from pathlib import Path

from tp2qual.checks.handover import SCHEMA, judge_restored
from tp2qual.evidence.problem import Problem

RECORD = "handover.json"


def check_handover(run_dir: Path) -> list[Problem]:
    path = run_dir / RECORD
    if not path.is_file():
        return []  # nothing was handed over
    try:
        record = json.loads(path.read_text())
    except ValueError as exc:
        return [Problem("handover", RECORD, f"unreadable: {exc}")]
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        return [Problem("handover", RECORD, f"not a {SCHEMA} record")]
    verdict = judge_restored(record)
    problems = []
    if "restored" in record and record["restored"] is not verdict.ok:
        problems.append(
            Problem(
                "rederive",
                RECORD,
                f"records restored={record['restored']}, its before/after states give {verdict.ok}",
            )
        )
    if not verdict.ok:
        hint = "" if record.get("after") is not None else f" (python -m tp2qual restore {run_dir})"
        problems.append(Problem("handover", RECORD, verdict.reason + hint))
    return problems
