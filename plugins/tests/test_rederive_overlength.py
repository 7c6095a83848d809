"""verify re-derives gate 06's over-bound check with the gate's own rule (checks/overlength.py):
a rejection inside a 200 stream re-derives as one, and a stream turned into an answer fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tp2qual.checks.overlength import classify
from tp2qual.engines import engine_for
from tp2qual.evidence.rederive import GateRun, capacity, supports_pass

DATA = Path(__file__).with_name("data") / "over-bound"
SETTINGS = {"fill": 0.9, "needle_max_tokens": 16, "stream_over_bound": True}


def _exchanges(stream_chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    plain = json.loads((DATA / "sglang-0.5.23-plain-400.json").read_text())
    return [
        {"tag": "over-bound", "status": 400, "response": plain["body"]},
        {
            "tag": "over-bound-stream",
            "status": 200,
            "error_body": None,
            "chunks": [{"t": 0.01 * i, "data": c} for i, c in enumerate(stream_chunks)],
        },
        {"tag": "after-over-bound", "status": 200, "response": {"choices": []}},
    ]


def _run(root: Path, exchanges: list[dict[str, Any]], row: dict[str, Any]) -> GateRun:
    root.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(x) + "\n" for x in exchanges)
    (root / "capacity.jsonl").write_text(lines)
    (root / "capacity_results.jsonl").write_text(json.dumps(row) + "\n")
    return GateRun(root, SETTINGS, "sglang", 2048)


def _gate_row(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The row gate 06 writes for these answers."""
    known = engine_for("sglang").over_length
    streamed = classify(200, None, chunks, known)
    return {
        "check": "over_bound",
        "status": 400,
        "after_status": 200,
        "stream": streamed.as_dict(),
        "ok": streamed.ok,
    }


def test_a_rejection_in_the_stream_rederives_as_the_gate_recorded_it(tmp_path: Path) -> None:
    chunks = json.loads((DATA / "sglang-0.5.23-stream-200.json").read_text())["chunks"]
    row = _gate_row(chunks)
    got = capacity(_run(tmp_path, _exchanges(chunks), row))
    assert got.mismatches == [] and got.failures == ["check needle: no result"], got
    assert got.rows["capacity_results.jsonl"][0]["stream"]["outcome"] == "rejected_in_stream"
    assert supports_pass("over_bound_stream", row["stream"]["outcome"], SETTINGS) is True


def test_a_stream_that_answered_fails_and_contradicts_a_recorded_rejection(tmp_path: Path) -> None:
    chunks = json.loads((DATA / "sglang-0.5.23-stream-200.json").read_text())["chunks"]
    row = _gate_row(chunks)  # the gate said: rejected in the stream
    answered = [{"choices": [{"index": 0, "delta": {"content": "Lisbon"}}]}]
    got = capacity(_run(tmp_path, _exchanges(answered), row))
    assert "capacity.jsonl over-bound: check over_bound fails" in got.failures
    assert {m.what for m in got.mismatches} == {
        "capacity_results.jsonl stream",
        "capacity_results.jsonl ok",
    }
    silent = _gate_row(answered)["stream"]
    assert silent["outcome"] == "accepted" and "silently" in silent["said"]
    assert supports_pass("over_bound_stream", silent["outcome"], SETTINGS) is False


def test_a_row_from_before_the_stream_record_is_judged_on_its_verdict(tmp_path: Path) -> None:
    answered = [{"choices": [{"index": 0, "delta": {"content": "Lisbon"}}]}]
    old = {"check": "over_bound", "status": 400, "after_status": 200, "ok": True}
    got = capacity(_run(tmp_path, _exchanges(answered), old))
    assert [m.what for m in got.mismatches] == ["capacity_results.jsonl ok"]
    assert "stream" not in got.rows["capacity_results.jsonl"][0]
