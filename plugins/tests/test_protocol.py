"""The capacity protocol's definitions (perf/protocol.py), its records and the rule for dividing
by them (perf/protocol_compare.py): pure, on synthetic streams and on the user's copied raw JSON.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tp2qual.candidate import Candidate, load_candidates
from tp2qual.evidence.protocol_records import read_record
from tp2qual.perf.protocol import V3, V4, protocol_problems, request_figures, summary
from tp2qual.perf.protocol_compare import as_record, beside, differences, record_rows

ROOT = Path(__file__).resolve().parents[2]
QWEN = ROOT / "docs/records/2026-08-01/qwen35-capacity-32k-c1-sequential.json"
LANES = [c for c in load_candidates([ROOT / "candidates"]) if "protocol" in c.gate("throughput")]


def _chunk(**delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 11}}


def test_v3_times_from_the_first_visible_content() -> None:
    chunks = [_chunk(role="assistant"), _chunk(content="a"), _chunk(content="b"), USAGE]
    got = request_figures(chunks, [0.1, 0.5, 0.9, 1.0], e2e_s=1.5)
    assert got["ok"] and got["ttfo_s"] == got["ttft_s"] == 0.5
    assert got["effective_prefill_tok_s"] == pytest.approx(1000 / 0.5)
    assert got["decode_tok_s"] == pytest.approx(10 / (1.5 - 0.5))  # to the stream's end
    assert protocol_problems(V3, [got]) == []


def test_v4_keeps_first_output_and_first_visible_apart() -> None:
    chunks = [_chunk(reasoning_content="think"), _chunk(content="a"), USAGE]
    got = request_figures(chunks, [0.4, 2.0, 2.1], e2e_s=2.5)
    assert (got["ttfo_s"], got["ttft_s"]) == (0.4, 2.0)
    assert got["effective_prefill_tok_s"] == pytest.approx(1000 / 0.4)  # prefill ends at TTFO
    assert got["decode_tok_s"] == pytest.approx(10 / (2.5 - 0.4))  # reasoning tokens count
    assert protocol_problems(V3, [got]) and not protocol_problems(V4, [got])


@pytest.mark.parametrize(
    ("chunks", "why"),
    [
        ([_chunk(reasoning="only"), USAGE], "no visible content"),
        ([_chunk(content="a")], "no usage"),
    ],
)
def test_no_sample_without_visible_content_or_usage(chunks: list, why: str) -> None:
    got = request_figures(chunks, [0.1] * len(chunks), e2e_s=0.2)
    assert not got["ok"] and why in got["reason"]
    assert summary([got]) == {}


def _qwen() -> dict[str, Any]:
    return json.loads(QWEN.read_text())


def test_the_copied_record_gives_its_own_medians() -> None:
    body = _qwen()
    rows = record_rows(body)
    stats, metrics = summary(rows), body["metrics"]
    assert len(rows) == 12
    # Their p50 is a nearest rank (29,804), the suite's median the midpoint of the middle two.
    assert stats["prompt_tokens"]["median"] == pytest.approx(metrics["prompt_tokens_p50"], abs=1)
    assert stats["ttft_s"]["median"] * 1000 == pytest.approx(metrics["ttft_p50_ms"], rel=2e-3)
    assert stats["decode_tok_s"]["median"] == pytest.approx(metrics["decode_tok_s_p50"], rel=2e-3)


PROFILE = {"name": V3, "requests": 12, "prompt_tokens": 29804, "prompt_tolerance": 0.02,
           "max_tokens": 256}  # fmt: skip
ENTRY = {"serve": "qwen", "tp": 2, "date": "2026-08-01", "path": "x", "sha256": "0" * 64}


def test_like_for_like_is_divided_with_an_interval() -> None:
    body = _qwen()
    rows = record_rows(body)
    got = beside(PROFILE, ["qwen"], 2, rows, ENTRY, body)
    assert got["divided"] and got["not_divided_because"] == []
    decode = next(f for f in got["figures"] if f["figure"] == "decode_tok_s")
    assert decode["ratio"]["ratio"] == pytest.approx(1.0)
    assert decode["ratio"]["low"] < 1 < decode["ratio"]["high"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"serves": ["other"]}, "another serve"),
        ({"tp": 1}, "TP2 record, TP1 serve"),
        ({"max_tokens": 128}, "output cap 256"),
        ({"name": V4}, "protocol capacity-v3"),
        ({"scale": 1.05}, "outside 2%"),
    ],
)
def test_unlike_is_shown_not_divided(change: dict[str, Any], said: str) -> None:
    body = _qwen()
    rows = [
        {**r, "prompt_tokens": r["prompt_tokens"] * change.get("scale", 1)}
        for r in record_rows(body)
    ]
    profile = {**PROFILE, **{k: v for k, v in change.items() if k in PROFILE}}
    serves, tp = change.get("serves", ["qwen"]), change.get("tp", 2)
    why = differences(profile, serves, tp, rows, ENTRY, body)
    assert len(why) == 1 and said in why[0], why
    got = beside(profile, serves, tp, rows, ENTRY, body)
    assert not got["divided"] and all("ratio" not in f for f in got["figures"])


def test_a_run_written_as_a_record_reads_back() -> None:
    rows = record_rows(_qwen())
    for r in rows:
        r["output_tokens"] = 50
    back = record_rows(as_record(rows, PROFILE, {"model": "qwen"}))
    assert len(back) == len(rows)
    assert [r["decode_tok_s"] for r in back] == [r["decode_tok_s"] for r in rows]


@pytest.mark.parametrize("lane", LANES, ids=lambda c: c.name)
def test_each_lane_names_records_it_can_be_held_to(lane: Candidate) -> None:
    """Every record a shipped lane names is on disk with its pinned bytes; the one of its own
    serve is of its protocol, TP, cap and (within the tolerance) prompt: a run at the lane's
    sizes is like for like with it."""
    profile = lane.gate("throughput")["protocol"]
    assert profile["records"], lane.name
    own = 0
    for entry in profile["records"]:
        raw, why = read_record(entry, lane.path.parent)
        assert raw is not None, why
        assert hashlib.sha256(raw).hexdigest() == entry["sha256"]
        if entry["serve"] != lane.spec["lane"]["after"]:
            continue
        own += 1
        body = json.loads(raw)
        rows = [{**r, "prompt_tokens": profile["prompt_tokens"]} for r in record_rows(body)]
        assert differences(profile, [entry["serve"]], lane.tp, rows, entry, body) == []
    assert own or lane.name.startswith("smollm2"), f"{lane.name}: no record of its own serve"


def _stream(n: int, ttft: float) -> dict[str, Any]:
    chunks = [_chunk(content="a"), _chunk(content="b"), USAGE]
    timed = [{"t": ttft + d, "data": c} for d, c in zip((0, 0.5, 0.9), chunks, strict=True)]
    return {"tag": f"protocol#{n}", "status": 200, "e2e_s": ttft + 1.0, "chunks": timed}


def _protocol_run(tmp_path: Path, tamper: float = 0.0) -> Any:
    """A lane's run folder as gate 08 leaves it after two protocol requests, beside a record of
    its baseline's serve made of the same two requests (like for like: divided)."""
    from tp2qual.evidence.protocol_records import copy_name
    from tp2qual.evidence.rederive.common import GateRun

    profile: dict[str, Any] = {**PROFILE, "requests": 2, "prompt_tokens": 1000}
    streams = [_stream(0, 0.5), _stream(1, 0.6)]
    rows = [
        {"i": n, **request_figures([c["data"] for c in s["chunks"]], [c["t"] for c in s["chunks"]],
                                   s["e2e_s"])}
        for n, s in enumerate(streams)
    ]  # fmt: skip
    raw = json.dumps(as_record(rows, profile, {})).encode()
    entry = {**ENTRY, "serve": "cpu", "sha256": hashlib.sha256(raw).hexdigest()}
    profile["records"] = [entry]
    rows[0]["decode_tok_s"] += tamper
    (tmp_path / "throughput.jsonl").write_text("".join(json.dumps(s) + "\n" for s in streams))
    (tmp_path / "protocol_samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stats = {"profile": profile, "summary": summary(rows)}
    (tmp_path / "protocol_summary.json").write_text(json.dumps(stats))
    resolved = {"name": "cpu-lane", "lane_after": "cpu", "tp": 2, "gates": {}}
    written = beside(profile, ["cpu-lane", "cpu"], 2, rows, entry, json.loads(raw))
    assert written["divided"]
    (tmp_path / "protocol_beside.json").write_text(json.dumps([written]))
    (tmp_path / copy_name(entry)).parent.mkdir()
    (tmp_path / copy_name(entry)).write_bytes(raw)
    return GateRun(tmp_path, {"protocol": profile}, "vllm", 2048, resolved)


def test_verify_rederives_the_protocol_from_its_streams(tmp_path: Path) -> None:
    from tp2qual.evidence.rederive.throughput import throughput

    got = throughput(_protocol_run(tmp_path))
    assert (got.records, got.mismatches, got.failures) == (2, [], [])


def test_verify_names_a_figure_the_streams_do_not_give(tmp_path: Path) -> None:
    from tp2qual.evidence.rederive.throughput import throughput

    got = throughput(_protocol_run(tmp_path, tamper=1.0))
    assert any(m.what == "protocol_samples.jsonl decode_tok_s" for m in got.mismatches), got


def test_the_cpu_record_rederives_from_its_raw_streams() -> None:
    """docs/records/2026-12-05: each request of the record is its raw stream, measured again."""
    folder = ROOT / "docs/records/2026-12-05"
    record = json.loads((folder / "smollm2-135m-vllm-tp2-capacity-v3-cpu.json").read_text())
    lines = (folder / "smollm2-135m-vllm-tp2-capacity-v3-cpu.exchanges.jsonl").read_text()
    streams = {e["tag"]: e for e in map(json.loads, lines.splitlines()) if "chunks" in e}
    rows = []
    for n in range(record["requests"]):
        s = streams[f"protocol#{n}"]
        chunks, times = [c["data"] for c in s["chunks"]], [c["t"] for c in s["chunks"]]
        rows.append(request_figures(chunks, times, s["e2e_s"]))
    again = record_rows(as_record(rows, {**PROFILE, "requests": 4, "max_tokens": 32}, {}))
    assert again == record_rows(record)
