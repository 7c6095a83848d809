"""Where a candidate's reference transcript comes from (gate ``agreement``), and who made it.

A reference is another candidate's own agreement transcript, taken only from a finding whose
verdict is PASS, in this order:

- **this run**: the reference ran earlier in it (the ordering puts it first) and every gate
  passed. A reference that ran in this run and FAILED, or broke the suite (ERROR), is no
  reference: the candidate is not judged, naming it — never compared with an older PASS in its
  place. This run's folder written by another worker (``--hosts``) counts as this run, and one
  not settled there yet is not waited for: not judged.
- else **the newest dated run folder** under the results folder that holds one. ``latest`` (a
  link that moves with the next run) is never a source; the dated folder is recorded. A PASS
  whose recorded model revision or image pin is not what the reference's file pins today is about
  other bytes: it is skipped, and said when nothing else is found.

A transcript made from another prompt set (its ``prompt_set_sha256`` differs) is never compared.
``Reference.identity`` says who made the transcript, read from the reference's own evidence
folder (see ``reference_identity``); ``record_reference`` writes it into the judged candidate's
finding (``identity/reference.json``), which the report shows.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tp2qual
from tp2qual.artifacts.claims import read_records
from tp2qual.artifacts.finding import CandidateRecord, Finding, Verdict, read_finding
from tp2qual.artifacts.layout import FINDING
from tp2qual.candidate import Candidate
from tp2qual.checks.agreement import ACCURACY, OWN
from tp2qual.evidence.run import RunState
from tp2qual.evidence.suite import SUITE

TRANSCRIPT = "agreement_transcript.jsonl"
REFERENCE_IDENTITY = "identity/reference.json"  # in the judged candidate's folder
PROMPT_SET = Path(tp2qual.__file__).parent / "data" / "agreement_prompts.json"
RUN_FOLDER = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]+$")  # a run's dated folder (run.new_run_id)
NOT_JUDGED = (Verdict.FAIL, Verdict.ERROR)


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


def dated_runs(results_root: Path) -> list[Path]:
    """The results folder's run folders, newest first: dated names only, links left out."""
    if not results_root.is_dir():
        return []
    runs = [p for p in results_root.iterdir() if RUN_FOLDER.match(p.name) and not p.is_symlink()]
    return sorted(runs, key=lambda p: p.name, reverse=True)


def find_reference(state: RunState, name: str, prompt_set_sha256: str) -> Reference | str:
    """The reference transcript, or one line saying why there is none to judge against."""
    found = _this_run(state, name, prompt_set_sha256)
    if found is not None:
        return found
    skipped: list[str] = []
    wanted = next((c for c in state.candidates if c.name == name), None)
    for run_dir in dated_runs(state.results_root):
        if run_dir.name == state.run_id:
            continue  # this run's record was judged above
        finding = read_finding(run_dir / name / FINDING, state.results_root)
        if finding is None or not _passed(finding):
            continue
        if wanted is not None and (other := _other_bytes(run_dir / name, wanted)):
            skipped.append(f"{run_dir.name}: {other}")
            continue
        if records := _transcript(run_dir / name / TRANSCRIPT, prompt_set_sha256):
            identity = reference_identity(run_dir / name, finding)
            return Reference(name, run_dir.name, str(run_dir), records, identity)
    why = (
        f"reference {name!r} has no PASS with an agreement transcript of this prompt set "
        f"(sha256 {prompt_set_sha256[:12]}) in this run or under {state.results_root}"
    )
    return why + (f"; PASSes about other bytes skipped: {'; '.join(skipped)}" if skipped else "")


def _this_run(state: RunState, name: str, prompt_set_sha256: str) -> Reference | str | None:
    """This run's reference, why this run's record rules one out, or None to look further."""
    here = state.records.get(name)
    if here is not None:
        verdict, root = here.verdict(settled=True), here.evidence.root
        finding = Finding.from_dict(here.as_dict() | {"verdict": str(verdict)})
    else:  # written by another worker of this run (--hosts), or not at all
        root = state.run_dir / name
        if (found := read_finding(root / FINDING, state.run_dir)) is None:
            return None
        finding, verdict = found, Verdict(found.verdict or Verdict.INCOMPLETE)
        if verdict not in NOT_JUDGED and not found.finished:
            return f"reference {name!r} runs in this run on another worker and has not settled"
    if verdict in NOT_JUDGED:
        what = "FAILED" if verdict == Verdict.FAIL else "ended in a suite ERROR"
        return (
            f"reference {name!r} {what} in this run ({_cause(finding)}); an earlier PASS of it "
            "does not stand in for it"
        )
    if verdict == Verdict.PASS and (records := _transcript(root / TRANSCRIPT, prompt_set_sha256)):
        return Reference(name, state.run_id, "this run", records, reference_identity(root, finding))
    return None


def _cause(finding: Finding) -> str:
    gate = finding.failed_gate or finding.suite_error_gate or finding.first("failed")
    gate = gate or finding.first("error")
    reason = finding.gates[gate].reason if gate and gate in finding.gates else ""
    return f"gate {gate}: {reason}"[:300] if gate else "no gate named"


def _passed(finding: Finding) -> bool:
    """PASS as the file states it and as its gates give it (a hand-edited verdict is none)."""
    return finding.verdict == Verdict.PASS and finding.derived_verdict() == Verdict.PASS


def _other_bytes(cand_dir: Path, wanted: Candidate) -> str | None:
    """Why a recorded PASS is about other bytes than the reference's file pins today, or None."""
    model = _json(cand_dir / "identity" / "model.json")
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
    pin = (_json(cand_dir / "launch.json").get("pin") or {}).get("value")
    if today and pin and pin != today:
        return f"image {pin}, the file now pins {today}"
    return None


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
    model = finding.identity.get("model") or _json(cand_dir / "identity" / "model.json")
    engine = finding.identity.get("engine") or _json(cand_dir / "identity" / "engine.json")
    launch = _json(cand_dir / "launch.json") or finding.identity.get("launch") or {}
    suite = finding.identity.get("suite") or _json(cand_dir / SUITE)
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


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
