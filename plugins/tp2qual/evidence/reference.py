"""Where a candidate's reference transcript comes from (gate ``agreement``).

A reference is another candidate's own agreement transcript, taken only from a finding whose
verdict is PASS: this run's (the reference ran earlier in it and every gate passed) or else the
newest dated run under the results folder that holds one. A transcript made from another prompt
set (its ``prompt_set_sha256`` differs) is never compared: the next older PASS is tried.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tp2qual.checks.agreement import ACCURACY, OWN
from tp2qual.evidence.claims import read_records
from tp2qual.evidence.finding import Verdict, read_finding
from tp2qual.evidence.layout import FINDING
from tp2qual.evidence.run import RunState

TRANSCRIPT = "agreement_transcript.jsonl"


@dataclass(frozen=True)
class Reference:
    candidate: str
    run: str
    source: str  # "this run" or the run's folder, said in the evidence
    records: list[dict[str, Any]]  # its transcript lines and its scored accuracy items


def find_reference(state: RunState, name: str, prompt_set_sha256: str) -> Reference | str:
    """The reference transcript, or one line saying why there is none to judge against."""
    here = state.records.get(name)
    if here is not None and here.verdict(settled=True) == Verdict.PASS:
        found = _transcript(here.evidence.root / TRANSCRIPT, prompt_set_sha256)
        if found:
            return Reference(name, state.run_id, "this run", found)
    for path in sorted(state.results_root.glob(f"*/{name}/{FINDING}"), reverse=True):
        run = path.parent.parent.name
        if run == state.run_id:
            continue  # this run's record, if any, was judged above as it settles
        finding = read_finding(path, state.results_root)
        if finding is None or finding.verdict != Verdict.PASS:
            continue
        found = _transcript(path.parent / TRANSCRIPT, prompt_set_sha256)
        if found:
            return Reference(name, run, str(path.parent.parent), found)
    return (
        f"reference {name!r} has no PASS with an agreement transcript of this prompt set "
        f"(sha256 {prompt_set_sha256[:12]}) in this run or under {state.results_root}"
    )


def _transcript(path: Path, prompt_set_sha256: str) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    try:
        records = read_records(path)
    except (OSError, ValueError):
        return []  # unreadable: not a reference (verify reports the damaged run itself)
    own = [r for r in records if r.get("kind") == OWN]
    if not own or any(r.get("prompt_set_sha256") != prompt_set_sha256 for r in own):
        return []
    return own + [r for r in records if r.get("kind") == ACCURACY]
