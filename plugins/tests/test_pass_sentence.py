"""One sentence for a PASS (issue 40): the finding, the terminal line, the report's overview
and verify say the same thing, built by ``artifacts.pass_sentence``; "agrees with its
reference" only where gate 07 judged one.

Four cases, each read in the four places: a PASS with a reference judged; one with no
reference (the real embedded run, ``data/smollm2-135m-local-run``); one with parts not judged
(teacher forcing, accuracy with no power); one whose named reference FAILed in the same run.
The finding's sentence is stated by ``CandidateRecord`` (the writer every gate saves through).
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from test_verify import write_run

from tp2qual.__main__ import main
from tp2qual.artifacts.claims import Claim
from tp2qual.artifacts.finding import PASSED, CandidateRecord, Finding, GateResult
from tp2qual.artifacts.layout import FINDING, Evidence, write_manifest
from tp2qual.artifacts.pass_sentence import pass_sentence
from tp2qual.candidate import Candidate
from tp2qual.evidence.overview import summarize_run
from tp2qual.evidence.verify import verify_run
from tp2qual.hooks.evidence import _why
from tp2qual.redact import Redactor

ROOT = Path(__file__).resolve().parents[2]
LOCAL = Path(__file__).with_name("data") / "smollm2-135m-local-run"
RUN = "20260101T000000Z-aaaa"
EARLIER = "20251201T000000Z-0000"
TP1, TP2 = "pair-tp1", "pair-tp2"
HEAD = "PASS: every gate passed or did not apply; "
JUDGED = {  # gate 07's claims against a reference, as evaluate() names them
    "greedy_not_argmax": 0, "self_judgement": "agrees", "near_bound_judgement": "agrees",
    "cached_prefix_agrees": True, "agrees_with_reference": True, "reference_candidate": TP1,
    "reference_run": RUN, "reference_source": "this run", "exact_share": 0.6,
    "tf_judgement": "agrees", "accuracy_judged": True,
    "accuracy_judgement": "no drop detected (D 0.094 at 80 % power)",
}  # fmt: skip


def state_sentence(cand_dir: Path) -> None:
    """The finding as the run's writer states it: ``CandidateRecord`` over its gates."""
    path = cand_dir / FINDING
    data = json.loads(path.read_text())
    found = Finding.from_dict(data)
    candidate = Candidate(Path(data["candidate_file"]), data["candidate_spec"])
    record = CandidateRecord(candidate, Evidence(cand_dir, Redactor()), found.run_id)
    record.gates, record.finished = dict(found.gates), bool(found.finished)
    data["pass_sentence"] = record.as_dict()["pass_sentence"]
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    write_manifest(cand_dir.parent, run_id=cand_dir.parent.name, final=True)


def four_places(run_dir: Path, name: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The sentence the finding, the terminal, the overview and verify show; all the same."""
    finding = Finding.read(run_dir / name / FINDING)
    row = next(r for r in summarize_run(run_dir) if r.candidate == name)
    main(["verify", str(run_dir)])
    printed = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(f"{name}: ")]
    places = {
        "finding": finding.stated_sentence,
        "terminal": _why(finding, run_dir / name),
        "overview": row.rests_on.rpartition("; throughput")[0],
        "verify": printed[0].removeprefix(f"{name}: ") if printed else None,
    }
    assert len(set(places.values())) == 1, places
    assert verify_run(run_dir).sentences[name] == places["finding"]
    return str(places["finding"])


def _agreement(run_dir: Path, name: str, claims: dict[str, Any],
               skipped: dict[str, str] | None = None) -> None:  # fmt: skip
    path = run_dir / name / FINDING
    data = json.loads(path.read_text())
    data["candidate_spec"]["reference"] = {"candidate": TP1}
    data["gates"]["agreement"] = {
        "outcome": "passed", "skipped": skipped or {},
        "claims": [{"name": k, "value": v, "artifact": "agreement_transcript.jsonl"}
                   for k, v in claims.items()],
    }  # fmt: skip
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    state_sentence(run_dir / name)


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    """A reference and a serve naming it, one run (test_verify's writer)."""
    write_run(tmp_path / "results", run_id=RUN, name=TP1)
    return write_run(tmp_path / "results", run_id=RUN, name=TP2)


def test_a_pass_with_its_reference_judged(pair: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _agreement(pair, TP2, JUDGED)
    assert four_places(pair, TP2, capsys) == HEAD + (
        f"gate 07 agrees with its reference {TP1} (this run); judged: closeness walk, teacher "
        "forcing, greedy is argmax, self-consistency, self-consistency near the bound, cached "
        "prefix, accuracy"
    )


def test_a_pass_with_no_reference_the_real_embedded_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (recorded,) = [p for p in LOCAL.iterdir() if p.is_dir()]
    run_dir = Path(shutil.copytree(recorded, tmp_path / "results" / recorded.name))
    state_sentence(run_dir / "smollm2-135m-local")
    said = four_places(run_dir, "smollm2-135m-local", capsys)
    assert said == HEAD + (
        "gate 07 no reference (none named); judged: greedy is argmax, self-consistency, "
        "self-consistency near the bound, cached prefix; not judged: accuracy (no reference: no "
        "drop claimed)"
    )
    assert verify_run(run_dir).ok  # the stated sentence is the one its gates give


def test_a_pass_with_parts_not_judged(pair: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_power = "not judged: no power (n 30, reference accuracy 0.33, D 0.25)"
    claims = JUDGED | {"tf_judgement": "not judged", "accuracy_judged": False,
                       "accuracy_judgement": no_power}  # fmt: skip
    skipped = {"teacher forcing": "not judged: 12 of 40 positions aligned (< 50 %)",
               "accuracy": no_power}  # fmt: skip
    _agreement(pair, TP2, claims, skipped)
    said = four_places(pair, TP2, capsys)
    assert said == HEAD + (
        f"gate 07 agrees with its reference {TP1} (this run); judged: closeness walk, greedy is "
        "argmax, self-consistency, self-consistency near the bound, cached prefix; not judged: "
        "teacher forcing (12 of 40 positions aligned (< 50 %)); accuracy (no power (n 30, "
        "reference accuracy 0.33, D 0.25))"
    )


def test_a_pass_whose_named_reference_failed(
    pair: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pair / TP1 / FINDING
    data = json.loads(path.read_text())
    data["gates"]["deterministic"].update(outcome="failed", reason="capital: expected 'Paris'")
    data.update(verdict="FAIL", failed_gate="deterministic")
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    own = {k: v for k, v in JUDGED.items() if not k.startswith(("agrees", "reference", "tf"))}
    why = f"not judged: reference {TP1!r} FAILED in this run (deterministic: capital)"
    _agreement(pair, TP2, own | {"accuracy_judged": False, "accuracy_judgement": "no reference"},
               {"agreement with a reference": why})  # fmt: skip
    said = four_places(pair, TP2, capsys)
    assert said == HEAD + (
        f"gate 07 reference {TP1} FAILED in this run: not held against it; judged: greedy is "
        "argmax, self-consistency, self-consistency near the bound, cached prefix; not judged: "
        "accuracy (no reference)"
    )
    assert "agrees with its reference" not in said and "not applicable" not in said


def test_agrees_only_where_a_reference_was_judged() -> None:
    """The pure function alone: a gate 07 that claims no agreement never reads as agreeing; one
    judged against an earlier run of a reference that FAILed in this one says so."""
    gate = GateResult(PASSED, skipped={"agreement with a reference": "not judged: x"})
    spec = {"reference": {"candidate": TP1}}
    said = pass_sentence("PASS", spec, gate)
    assert said is not None and "agrees" not in said and f"reference {TP1}: x" in said
    assert pass_sentence("FAIL", spec, gate) is None
    claims = JUDGED | {"reference_source": "/results/" + EARLIER, "reference_run": EARLIER}
    gate = GateResult(PASSED, claims=[Claim(k, v, "t") for k, v in claims.items()])
    said = pass_sentence("PASS", spec, gate, reference_verdict="FAIL")
    assert said is not None and f"{TP1} (run {EARLIER}), which FAILED in this run;" in said


def test_a_lane_passes_while_its_baseline_failed(
    pair: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The path a run takes today: a lane whose gate 07 does not apply runs once its baseline
    has an earlier PASS (``baseline_passed``), and passes while the baseline FAILs here."""
    path = pair / TP1 / FINDING
    data = json.loads(path.read_text())
    data["gates"]["deterministic"].update(outcome="failed", reason="capital: expected 'Paris'")
    data.update(verdict="FAIL", failed_gate="deterministic")
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    path = pair / TP2 / FINDING
    data = json.loads(path.read_text())
    data["candidate_spec"]["lane"] = {"after": TP1, "kind": "optional"}
    data["gates"]["agreement"]["reason"] = "not applicable: its template opens <think>"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    state_sentence(pair / TP2)
    assert four_places(pair, TP2, capsys) == HEAD + (
        f"gate 07 not applicable (its template opens <think>); reference {TP1} FAILED in this "
        "run: not held against it"
    )


def test_no_reference_says_the_candidate_files_why() -> None:
    """DeepSeek names no reference and says why (``[reference] not_applicable``): its headline."""
    spec = tomllib.loads((ROOT / "candidates" / "deepseek-v4-flash-0731.toml").read_text())
    gate = GateResult(PASSED, claims=[Claim("self_judgement", "agrees", "t")])
    said = pass_sentence("PASS", spec, gate)
    assert said == HEAD + (
        "gate 07 no reference (No TP1 serve of this model fits one GPU); judged: self-consistency"
    )
