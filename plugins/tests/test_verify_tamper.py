"""verify re-derives each functional verdict from the raw exchanges, so a changed raw response
is caught even when the manifest is re-written to match it (every hash consistent).

Each tamper changes one raw record of a consistent run (``test_verify.write_run``: raw exchanges
judged by the real checks, through the real core), re-writes the manifest, and expects verify to
fail naming that record. Also: outcomes the claims do not support, and settings read from the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from test_verify import NAME, edit_finding, rehash, story, write_run

from tp2qual.__main__ import main
from tp2qual.evidence.rederive import RESOLVED_CANDIDATE
from tp2qual.evidence.verify import Problem, verify_run


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "results")


def edit_record(run_dir: Path, artifact: str, tag: str, change: Callable[[dict], None]) -> None:
    """Change the raw record ``tag`` of ``artifact``, then re-hash the whole run."""
    path = run_dir / NAME / artifact
    records = [json.loads(line) for line in path.read_text().splitlines()]
    hits = [r for r in records if r.get("tag") == tag]
    assert len(hits) == 1, f"{tag} in {artifact}"
    change(hits[0])
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    rehash(run_dir)


def naming(run_dir: Path, record: str) -> list[Problem]:
    """verify fails, tampered nothing (the manifest matches), and names ``record``."""
    result = verify_run(run_dir)
    assert not result.ok
    assert not [p for p in result.problems if p.kind in ("tampered", "missing", "unlisted")]
    named = [p for p in result.problems if p.where == f"{NAME}/{record}"]
    assert named, [p.line() for p in result.problems]
    return named


def test_the_healthy_run_is_rederived_and_counted(run_dir: Path) -> None:
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert dict(result.rechecked) == {
        "model_list": 1,
        "deterministic": 6,
        "repetition": 3,
        "tool_calls": 1,
        "capacity": 2,
        "throughput": 6,
    }
    # model.json, engine.json; and each answering gate's reasoning-control proof
    # (<gate>_control.jsonl), judged again from the answers
    proofs = dict.fromkeys(
        ("deterministic", "repetition", "tool_calls", "capacity", "throughput"), 1
    )
    assert dict(result.rejudged) == {"preflight": 1, "model_list": 1} | proofs
    assert "raw exchanges re-checked: model_list 1, deterministic 6, repetition 3" in (
        result.summary()
    )


def test_paris_becomes_lyon(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def lyon(record: dict) -> None:
        record["response"]["choices"][0]["message"]["content"] = "Lyon."

    edit_record(run_dir, "deterministic.jsonl", "capital#0", lyon)
    details = [p.detail for p in naming(run_dir, "deterministic.jsonl capital#0")]
    correct = "deterministic_verdicts.jsonl correct recorded True, raw exchanges give False"
    assert f"deterministic: {correct}" in details
    assert main(["verify", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "REDERIVE  fake-local/deterministic.jsonl capital#0" in out
    assert "deterministic passed, but claim known_answers_correct" not in out  # claim says True
    assert "[deterministic.known_answers_correct]: claims True; the raw exchanges give False" in out


def test_a_loop_spliced_into_a_repetition_output(run_dir: Path) -> None:
    def loop(record: dict) -> None:
        message = record["response"]["choices"][0]["message"]
        message["content"] = story(1, 200) + " and the bell rang again." * 60

    edit_record(run_dir, "repetition.jsonl", "long#1", loop)
    details = [p.detail for p in naming(run_dir, "repetition.jsonl long#1")]
    assert any(
        "repetition_metrics.jsonl ok recorded True, raw exchanges give False" in d for d in details
    )


def test_a_tool_calls_arguments(run_dir: Path) -> None:
    def elsewhere(record: dict) -> None:
        call = record["response"]["choices"][0]["message"]["tool_calls"][0]
        call["function"]["arguments"] = '{"city": "Lyon"}'

    edit_record(run_dir, "tool_calls.jsonl", "auto", elsewhere)
    details = [p.detail for p in naming(run_dir, "tool_calls.jsonl auto")]
    assert (
        "tool_calls: tool_calls_verdicts.jsonl ok recorded True, raw exchanges give False"
        in details
    )


def test_a_throughput_samples_timestamps(run_dir: Path) -> None:
    def later(record: dict) -> None:
        for chunk in record["chunks"]:
            chunk["t"] += 0.5  # the first token half a second later than recorded

    edit_record(run_dir, "throughput.jsonl", "sample#2", later)
    details = [p.detail for p in naming(run_dir, "throughput.jsonl sample#2")]
    assert any(
        d.startswith("throughput: throughput_samples.jsonl ttft_s recorded 0.22") for d in details
    )


def test_a_pass_whose_claim_shows_a_failure(tmp_path: Path) -> None:
    """The raw answer is wrong, the row and claim say so, yet the gate says passed."""
    run_dir = write_run(tmp_path / "results", capital="Lyon.")

    def passed(finding: dict) -> None:
        finding["gates"]["deterministic"]["outcome"] = "passed"
        finding.update(verdict="PASS", failed_gate=None)

    edit_finding(run_dir, passed)
    rehash(run_dir)
    found = {(p.kind, p.where): p.detail for p in verify_run(run_dir).problems}
    where = f"{NAME}/finding.json [deterministic.known_answers_correct]"
    assert found[("unsupported", where)] == (
        "deterministic passed, but claim known_answers_correct = False does not support a pass"
    )


def test_a_failure_its_evidence_does_not_show(run_dir: Path) -> None:
    def failed(finding: dict) -> None:
        finding["gates"]["tool_calls"]["outcome"] = "failed"
        finding.update(verdict="FAIL", failed_gate="tool_calls")

    edit_finding(run_dir, failed)
    rehash(run_dir)
    details = [p.detail for p in verify_run(run_dir).problems]
    assert details == [
        "tool_calls failed, but neither its claims nor its raw exchanges show a failure"
    ]


def test_the_settings_are_the_runs_not_todays(run_dir: Path) -> None:
    """Re-derived with the expectation recorded at the run's start: change it and the rows
    no longer follow; remove it and nothing can be re-derived."""
    path = run_dir / NAME / RESOLVED_CANDIDATE
    resolved = json.loads(path.read_text())
    resolved["gates"]["deterministic"]["prompts"][0]["expect"] = ["Lyon"]
    path.write_text(json.dumps(resolved))
    rehash(run_dir)
    naming(run_dir, "deterministic.jsonl capital#0")
    path.unlink()
    rehash(run_dir)
    assert [(p.kind, p.where) for p in verify_run(run_dir).problems] == [
        ("rederive", f"{NAME}/{RESOLVED_CANDIDATE}")
    ]


def test_a_deleted_raw_exchange_file_is_named_even_when_unlisted(run_dir: Path) -> None:
    (run_dir / NAME / "repetition.jsonl").unlink()
    rehash(run_dir)
    details = [p.detail for p in verify_run(run_dir).problems]
    assert "repetition: repetition.jsonl is not on disk: nothing to re-derive from" in details


def test_a_gate_that_failed_before_any_exchange_stands_on_its_reason(tmp_path: Path) -> None:
    """A server that died before the gate's first answer leaves no raw exchange to re-derive:
    the failure is the finding's reason, not a verify problem."""
    run_dir = write_run(tmp_path / "results", capital="Lyon.")
    for name in ("deterministic.jsonl", "deterministic_verdicts.jsonl"):
        (run_dir / NAME / name).unlink()
    edit_finding(run_dir, lambda f: f["gates"]["deterministic"].update(claims=[]))
    rehash(run_dir)
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert "deterministic" not in result.rechecked
