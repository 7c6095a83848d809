"""The re-hashed tampers on a real run: the embedded candidate (SmolLM2-135M on llama.cpp) as
``python -m pytest -k smollm2-135m-local`` recorded it (``data/smollm2-135m-local-run``, its
README says how it was made). Each tamper changes one raw response, re-writes the manifest so
every hash is consistent, and verify must fail naming the record.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tp2qual.artifacts.layout import write_manifest
from tp2qual.evidence.verify import verify_run

DATA = Path(__file__).with_name("data") / "smollm2-135m-local-run"
NAME = "smollm2-135m-local"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (recorded,) = [p for p in DATA.iterdir() if p.is_dir()]
    return Path(shutil.copytree(recorded, tmp_path / "results" / recorded.name, symlinks=True))


def tamper(run_dir: Path, artifact: str, tag: str, change: Callable[[dict], None]) -> None:
    path = run_dir / NAME / artifact
    records = [json.loads(line) for line in path.read_text().splitlines()]
    (hit,) = [r for r in records if r.get("tag") == tag]
    change(hit)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    write_manifest(run_dir, run_id=run_dir.name, final=True, interrupted=False)


def named(run_dir: Path, record: str) -> list[str]:
    result = verify_run(run_dir)
    assert not result.ok
    assert not [p for p in result.problems if p.kind in ("tampered", "missing", "unlisted")]
    found = [p.detail for p in result.problems if p.where == f"{NAME}/{record}"]
    assert found, [p.line() for p in result.problems]
    return found


def _content(record: dict) -> dict:
    return record["response"]["choices"][0]["message"]


def test_the_real_run_verifies_with_every_functional_gate_rederived(run_dir: Path) -> None:
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert set(result.rechecked) == {
        "model_list",
        "deterministic",
        "repetition",
        "tool_calls",
        "capacity",
        "agreement",
        "throughput",
    }
    # seven prompts decoded, reread and decoded warm; the near-bound prompt sized, decoded and
    # reread; ten arithmetic items
    assert result.rechecked["agreement"] == 34
    assert result.rechecked["deterministic"] == 15  # five prompts, three repeats each
    assert result.rechecked["model_list"] == 2  # the list, and the list asked for its context


def test_a_decoded_logprob_moved_is_named_in_gate_07(run_dir: Path) -> None:
    """The transcript line no longer matches its raw exchange: gate 07 wrote about itself."""

    def moved(record: dict) -> None:
        record["response"]["choices"][0]["logprobs"]["token_logprobs"][20] -= 1.0

    tamper(run_dir, "agreement.jsonl", "decode:code", moved)
    found = named(run_dir, "agreement.jsonl")
    assert any("decode:code tokens" in line for line in found), found


def test_paris_becomes_lyon(run_dir: Path) -> None:
    def lyon(record: dict) -> None:
        message = _content(record)
        assert "Paris" in message["content"]
        message["content"] = message["content"].replace("Paris", "Lyon")

    tamper(run_dir, "deterministic.jsonl", "capital-of-france#0", lyon)
    found = named(run_dir, "deterministic.jsonl capital-of-france#0")
    assert any("correct recorded True, raw exchanges give False" in d for d in found)


def test_a_loop_spliced_into_a_repetition_output(run_dir: Path) -> None:
    def loop(record: dict) -> None:
        message = _content(record)
        message["content"] = message["content"][:400] + " and so the story goes on." * 40

    tamper(run_dir, "repetition.jsonl", "long#1", loop)
    found = named(run_dir, "repetition.jsonl long#1")
    assert any(
        "repetition_metrics.jsonl ok recorded True, raw exchanges give False" in d for d in found
    )


def test_a_tool_calls_arguments(run_dir: Path) -> None:
    def lyon(record: dict) -> None:
        function = _content(record)["tool_calls"][0]["function"]
        arguments = json.loads(function["arguments"])
        function["arguments"] = json.dumps({**arguments, "city": "Lyon"})

    tamper(run_dir, "tool_calls.jsonl", "auto", lyon)
    found = named(run_dir, "tool_calls.jsonl auto")
    assert any(
        "tool_calls_verdicts.jsonl ok recorded True, raw exchanges give False" in d for d in found
    )


def test_a_throughput_samples_timestamps(run_dir: Path) -> None:
    def later(record: dict) -> None:
        for chunk in record["chunks"]:
            chunk["t"] += 0.25

    tamper(run_dir, "throughput.jsonl", "sample#2", later)
    found = named(run_dir, "throughput.jsonl sample#2")
    assert any("throughput_samples.jsonl ttft_s recorded" in d for d in found)


def _transcript_line(run_dir: Path, item: str, change: Callable[[dict], None]) -> None:
    path = run_dir / NAME / "agreement_transcript.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    (hit,) = [r for r in records if r.get("kind") == "accuracy" and r.get("id") == item]
    change(hit)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    write_manifest(run_dir, run_id=run_dir.name, final=True, interrupted=False)


def test_a_tampered_correct_on_an_accuracy_line_is_named_by_its_item(run_dir: Path) -> None:
    """arith-002's reply ends "20" (the answer is 11): a line rewritten to say correct is
    re-scored from the raw reply and named (beside the claims' stamps, which the rewritten
    transcript no longer matches)."""
    _transcript_line(run_dir, "arith-002", lambda line: line.update(correct=True))
    result = verify_run(run_dir)
    assert not result.ok
    found = [p.detail for p in result.problems if p.where == f"{NAME}/agreement.jsonl"]
    assert any("item:arith-002 correct" in line for line in found), [
        p.line() for p in result.problems
    ]


def test_a_reply_rewritten_to_a_wrong_number_under_a_correct_line_is_named(run_dir: Path) -> None:
    """arith-000 was answered 6, correctly: its raw reply now says 43, the line still correct."""

    def wrong(record: dict) -> None:
        _content(record)["content"] = "The answer is 43"

    tamper(run_dir, "agreement.jsonl", "item:arith-000", wrong)
    found = named(run_dir, "agreement.jsonl")
    assert any("item:arith-000 correct" in line for line in found), found
