"""Where a candidate's reference transcript comes from (gate ``agreement``), and who made it.

A reference is another candidate's own agreement transcript, taken from the run the one rule
names (evidence/reference_rule.py, read by evidence/reference_runs.py; gate 08's floors, the
overview and verify take the same run): this run's PASS; none when it FAILED or ended in a
suite ERROR in this run, or is still running on another worker; else the newest earlier dated
PASS about the same bytes (model revision, image pin, prompt set). ``latest`` is never a
source; the dated folder is recorded. A run so named without a transcript of this prompt set
leaves the candidate not judged, naming it.

``Reference.identity`` says who made the transcript, read from the reference's own evidence
folder (see ``reference_identity``); ``record_reference`` writes it into the judged candidate's
finding (``identity/reference.json``), which the report shows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tp2qual
from tp2qual.artifacts.claims import read_records
from tp2qual.artifacts.finding import CandidateRecord, Finding, Verdict, read_finding
from tp2qual.artifacts.layout import FINDING
from tp2qual.checks.agreement import ACCURACY, OWN
from tp2qual.evidence.reference_runs import TRANSCRIPT, choose_run, read_json
from tp2qual.evidence.run import RunState
from tp2qual.evidence.suite import SUITE

REFERENCE_IDENTITY = "identity/reference.json"  # in the judged candidate's folder
PROMPT_SET = Path(tp2qual.__file__).parent / "data" / "agreement_prompts.json"


@dataclass(frozen=True)
class Reference:
    candidate: str
    run: str  # the dated run folder's name, never "latest"
    source: str  # "this run" or the dated run folder's path, said in the evidence
    records: list[dict[str, Any]]  # its transcript lines and its scored accuracy items
    identity: dict[str, Any]  # who made them: reference_identity()


def prompt_set_sha256(path: Path = PROMPT_SET) -> str:
    """The sha256 of the shipped prompt set's bytes, as gate 07 stamps its transcript lines."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def find_reference(state: RunState, name: str, prompt_set_sha256: str) -> Reference | str:
    """The reference transcript, or one line saying why there is none to judge against. The
    run is the one rule's (evidence/reference_rule.py), as gate 08's floors take it."""
    wanted = next((c for c in state.candidates if c.name == name), None)
    here = state.records.get(name)
    chosen = choose_run(
        state.results_root, state.run_id, name,
        here=here, wanted=wanted, prompt_set=prompt_set_sha256,
    )  # fmt: skip
    if chosen.run is None:
        return chosen.why
    cand_dir = state.results_root / chosen.run / name
    source = "this run" if chosen.this_run else str(cand_dir.parent)
    records = _transcript(cand_dir / TRANSCRIPT, prompt_set_sha256)
    if not records:
        return (
            f"reference {name!r} passed in {'this run' if chosen.this_run else chosen.run} "
            f"without an agreement transcript of this prompt set (sha256 {prompt_set_sha256[:12]})"
        )
    if chosen.this_run and here is not None:
        finding = Finding.from_dict(here.as_dict() | {"verdict": str(Verdict.PASS)})
    else:
        finding = read_finding(cand_dir / FINDING, state.results_root) or Finding.from_dict({})
    return Reference(name, chosen.run, source, records, reference_identity(cand_dir, finding))


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


# ---------------------------------------------------------------------------------------------
# Who made the transcript


def reference_identity(cand_dir: Path, finding: Finding) -> dict[str, Any]:
    """The reference's identity, from its own evidence folder; a fact it did not record is None.

    Keys: ``candidate``, ``run`` (dated folder name), ``run_dir``, ``verdict``;
    ``model_revision`` (the pin) and ``model_resolved`` (what it resolved to); ``engine`` and
    ``engine_version`` (the server's own answer); ``image``, ``image_id``, ``image_digests``
    (Docker only); ``launch_sha256`` (``launch_digest`` of its ``launch.json``);
    ``suite_commit`` and ``suite_dirty`` (``identity/suite.json``)."""
    model = finding.identity.get("model") or read_json(cand_dir / "identity" / "model.json")
    engine = finding.identity.get("engine") or read_json(cand_dir / "identity" / "engine.json")
    launch = read_json(cand_dir / "launch.json") or finding.identity.get("launch") or {}
    suite = finding.identity.get("suite") or read_json(cand_dir / SUITE)
    return {
        "candidate": cand_dir.name,
        "run": cand_dir.parent.name,
        "run_dir": str(cand_dir.parent),
        "verdict": finding.verdict or None,
        "model_revision": model.get("requested_revision"),
        "model_resolved": model.get("resolved_revision") or model.get("file_sha256"),
        "engine": engine.get("kind"),
        "engine_version": engine.get("version"),
        "image": launch.get("image"),
        "image_id": launch.get("image_id"),
        "image_digests": launch.get("repo_digests"),
        "launch_sha256": launch_digest(launch) if launch.get("argv") else None,
        "suite_commit": suite.get("commit"),
        "suite_dirty": suite.get("dirty"),
    }


def launch_digest(launch: Mapping[str, Any]) -> str:
    """sha256 of a recorded launch's argv and environment (as ``launch.json`` holds them,
    secrets already redacted), canonical JSON. The port the run picked is written ``{port}``:
    it is the one value that changes between two runs of the same launch."""
    port = str(launch.get("base_url") or "").rpartition(":")[2]
    argv = [("{port}" if port and arg == port else str(arg)) for arg in launch.get("argv") or ()]
    env = {str(k): str(v) for k, v in (launch.get("env") or {}).items()}
    canonical = json.dumps({"argv": argv, "env": env}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def record_reference(record: CandidateRecord, reference: Reference) -> None:
    """The reference's identity into the judged candidate's finding, and beside it as an
    artifact (``identity/reference.json``): the report's candidate section shows it."""
    facts = reference.identity | {"source": reference.source}
    record.identity["reference"] = facts
    record.evidence.write_json(REFERENCE_IDENTITY, facts)
    record.save()
