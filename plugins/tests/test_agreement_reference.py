"""Where gate 07's reference comes from: a named reference must exist (one clear line otherwise),
it runs before the candidates that name it, and its transcript is taken only from a PASS of the
same prompt set, the newest first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_candidate_bad_inputs import BASE, changed
from test_faults import dump_toml
from test_verify import NAME, write_run

from tp2qual.candidate import Candidate, load_candidates
from tp2qual.evidence.reference import TRANSCRIPT, Reference, find_reference
from tp2qual.evidence.run import RunState
from tp2qual.exceptions import CandidateError
from tp2qual.hooks.gating import rank_after_reference


def _write(folder: Path, spec: dict) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{spec['name']}.toml").write_text(dump_toml(spec))


def test_a_reference_that_is_no_candidate_is_one_clear_line(tmp_path: Path) -> None:
    _write(tmp_path, changed({"reference": {"candidate": "nowhere"}}))
    with pytest.raises(CandidateError) as raised:
        load_candidates([tmp_path])
    assert str(raised.value) == (
        f"{tmp_path / 'cand.toml'}: reference.candidate: 'nowhere' is not a candidate in {tmp_path}"
    )


def test_a_reference_that_exists_loads(tmp_path: Path) -> None:
    _write(tmp_path, BASE)
    _write(tmp_path, changed({"name": "other", "reference": {"candidate": "cand"}}))
    found = {c.name: c for c in load_candidates([tmp_path])}
    assert found["other"].reference == "cand" and found["cand"].reference is None


def test_references_run_first() -> None:
    """b names d, d names a lane baseline c; e and c name each other (a loop keeps its order)."""
    specs = {
        "a": {},
        "b": {"reference": {"candidate": "d"}},
        "c": {"reference": {"candidate": "e"}},
        "d": {"lane": {"after": "c"}},
        "e": {"reference": {"candidate": "c"}},
    }
    met = {n: Candidate(Path(f"{n}.toml"), {"name": n, **s}) for n, s in specs.items()}
    order: dict[str, int] = {}
    for name in met:
        rank_after_reference(name, met, order)
    assert sorted(order, key=order.__getitem__) == ["a", "e", "c", "d", "b"]


def _passed_run(root: Path, run_id: str, prompt_set: str) -> Path:
    run_dir = write_run(root, run_id=run_id)
    line = {"kind": "transcript", "id": "factual", "prompt_set_sha256": prompt_set, "tokens": []}
    (run_dir / NAME / TRANSCRIPT).write_text(json.dumps(line) + "\n")
    return run_dir


def test_the_newest_pass_of_the_same_prompt_set(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _passed_run(root, "20260101T000000Z-aaaa", "s1")
    _passed_run(root, "20260102T000000Z-bbbb", "s1")
    _passed_run(root, "20260103T000000Z-cccc", "s2")  # another prompt set: never compared
    found = find_reference(RunState(root, []), NAME, "s1")
    assert isinstance(found, Reference)
    assert (found.run, found.source) == ("20260102T000000Z-bbbb", str(root / found.run))
    assert [r["id"] for r in found.records] == ["factual"]


def test_no_pass_anywhere_says_so(tmp_path: Path) -> None:
    root = tmp_path / "results"
    run_dir = _passed_run(root, "20260101T000000Z-aaaa", "s1")
    finding = json.loads((run_dir / NAME / "finding.json").read_text())
    finding["verdict"] = "FAIL"
    (run_dir / NAME / "finding.json").write_text(json.dumps(finding))
    why = find_reference(RunState(root, []), NAME, "s1")
    assert isinstance(why, str)
    assert why.startswith(f"reference {NAME!r} has no PASS with an agreement transcript")
    assert str(root) in why
