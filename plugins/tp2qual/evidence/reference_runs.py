"""The facts evidence/reference_rule.py chooses a reference's run from, read from the results
folder: the reference's record in this run (its live record, else this run's folder) and in each
earlier dated run, newest first. Gate 07, gate 08, the overview and verify call ``choose_run``,
so they name the same run; each then reads what it needs (a transcript, samples) from that run
alone, and says so when it is not there, rather than looking in another run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tp2qual.artifacts.claims import read_records
from tp2qual.artifacts.finding import CandidateRecord, Finding, Verdict, read_finding
from tp2qual.artifacts.layout import FINDING
from tp2qual.candidate import Candidate
from tp2qual.checks.agreement import OWN
from tp2qual.evidence.reference_rule import Chosen, RunSeen, Standing, choose_reference

TRANSCRIPT = "agreement_transcript.jsonl"
RUN_FOLDER = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]+$")  # a run's dated folder (run.new_run_id)
VETO = {Verdict.FAIL: Standing.FAIL, Verdict.ERROR: Standing.ERROR}


def dated_runs(results_root: Path) -> list[Path]:
    """The results folder's run folders, newest first: dated names only, links left out."""
    if not results_root.is_dir():
        return []
    runs = [p for p in results_root.iterdir() if RUN_FOLDER.match(p.name) and not p.is_symlink()]
    return sorted(runs, key=lambda p: p.name, reverse=True)


def choose_run(
    results_root: Path,
    run_id: str,
    name: str,
    *,
    here: CandidateRecord | None = None,
    wanted: Candidate | None = None,
    prompt_set: str | None = None,
) -> Chosen:
    """The run ``name``'s evidence is taken from, for a candidate judged in run ``run_id``.

    ``here``: the reference's live record in this run (while it is under way); ``wanted``: the
    reference's candidate as its file stands today (its pins; None where it is not at hand,
    as for a run read back later: the pins are then not compared); ``prompt_set``: the prompt
    set's sha256 a transcript must be of (None: not compared)."""
    this = seen_here(here, results_root / run_id / name, run_id)
    earlier = _seen_earlier(results_root, run_id, name, wanted, prompt_set)
    return choose_reference(name, this, earlier, str(results_root))


def seen_here(here: CandidateRecord | None, cand_dir: Path, run_id: str) -> RunSeen | None:
    """The reference's record in run ``run_id`` as the rule sees it: its live ``here`` record,
    else its folder ``cand_dir`` of that run; None when it has neither."""
    if here is not None:
        verdict = here.verdict(settled=True)
        finding = Finding.from_dict(here.as_dict() | {"verdict": str(verdict)})
        return RunSeen(run_id, _standing(verdict, finished=True), _cause(finding))
    found = read_finding(cand_dir / FINDING, cand_dir.parent)
    if found is None:
        return None
    try:
        verdict = Verdict(found.verdict or Verdict.INCOMPLETE)
    except ValueError:
        verdict = Verdict.INCOMPLETE  # a verdict no run writes: neither a reference nor a veto
    if verdict == Verdict.PASS and found.derived_verdict() != Verdict.PASS:
        verdict = Verdict.INCOMPLETE  # a hand-edited PASS is none
    return RunSeen(run_id, _standing(verdict, finished=bool(found.finished)), _cause(found))


def _standing(verdict: Verdict, *, finished: bool) -> Standing:
    if verdict in VETO:
        return VETO[verdict]
    if not finished:
        return Standing.UNSETTLED  # another worker of this run is still on it
    return Standing.PASS if verdict == Verdict.PASS else Standing.OTHER


def _seen_earlier(
    results_root: Path, run_id: str, name: str, wanted: Candidate | None, prompt_set: str | None
) -> Iterator[RunSeen]:
    """Each earlier dated run's record of ``name``, newest first, read only as far as the rule
    looks (it stops at the first PASS about the same bytes)."""
    for run_dir in dated_runs(results_root):
        if run_dir.name >= run_id:
            continue  # this run, or one made after it: never the run a candidate was judged by
        finding = read_finding(run_dir / name / FINDING, results_root)
        if finding is None:
            continue
        if finding.verdict != Verdict.PASS or finding.derived_verdict() != Verdict.PASS:
            yield RunSeen(run_dir.name, Standing.OTHER)  # a hand-edited PASS is none either
            continue
        cand_dir = run_dir / name
        other = _other_bytes(cand_dir, wanted) or _other_prompt_set(cand_dir, prompt_set)
        yield RunSeen(run_dir.name, Standing.PASS, other_bytes=other or "")


def _cause(finding: Finding) -> str:
    gate = finding.failed_gate or finding.suite_error_gate
    first = finding.first("failed") or finding.first("error")
    gate = gate or (first[0] if first else None)
    reason = finding.gates[gate].reason if gate and gate in finding.gates else ""
    return f"gate {gate}: {reason}"[:300] if gate else "no gate named"


def _other_bytes(cand_dir: Path, wanted: Candidate | None) -> str | None:
    """Why a recorded PASS is about other bytes than the reference's file pins today, or None."""
    if wanted is None:
        return None
    model = read_json(cand_dir / "identity" / "model.json")
    recorded = model.get("requested_revision")
    if recorded and recorded != wanted.model["revision"]:
        return f"model revision {recorded}, the file now pins {wanted.model['revision']}"
    if wanted.launcher_kind != "docker":
        return None
    from tp2qual.exceptions import CandidateError
    from tp2qual.serving.launchers.docker.pins import resolve_pin

    try:
        today = resolve_pin(wanted).value
    except CandidateError:
        today = None
    pin = (read_json(cand_dir / "launch.json").get("pin") or {}).get("value")
    if today and pin and pin != today:
        return f"image {pin}, the file now pins {today}"
    return None


def _other_prompt_set(cand_dir: Path, prompt_set: str | None) -> str | None:
    """A transcript made from another prompt set is about other prompts: never compared."""
    path = cand_dir / TRANSCRIPT
    if prompt_set is None or not path.is_file():
        return None
    try:
        own = [r for r in read_records(path) if r.get("kind") == OWN]
    except (OSError, ValueError):
        return None  # unreadable: the consumer says so (verify reports the damaged run itself)
    stamped = {str(r.get("prompt_set_sha256")) for r in own}
    if stamped and stamped != {prompt_set}:
        return f"transcript of another prompt set (sha256 {', '.join(sorted(stamped))[:40]})"
    return None


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
