"""The capacity-protocol lane on a real engine: ``smollm2-135m-vllm-tp2-capacity-v3`` (vLLM 0.32.0
CPU, two TP ranks over gloo, eager) runs the user's capacity-v3 request shape at its stated CPU
scale, and its report puts the rows beside two dated records: this serve's own run of 2026-12-05
(docs/records/2026-12-05/, same protocol, TP, prompt and cap) divided, with a ratio and its
interval; the user's Qwen3.5 2026-08-01 row (another serve, prompt and cap) shown, not divided,
with the reasons. ``verify`` re-derives every request's figures, the statistics and both
comparisons from the raw streams and the records' copies.

The lane runs as a candidate of its own (no baseline to wait for) and as a local process, not in
the shipped file's container: the serve, its two ranks and the requests are the same; the
container is gate 00-02's business on the baseline.

``TP2QUAL_PROTOCOL_RECORD=PATH`` writes this run as a record (``as_record``) to PATH: how the
2026-12-05 record was made.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_faults import MAIN, run_inner, write_candidate

from tp2qual.candidate import load_candidate
from tp2qual.perf.protocol_compare import as_record

# CI proves the same on the shipped lane in its container (.ci/run's vLLM stage): vllm_stage.
pytestmark = [pytest.mark.slow, pytest.mark.vllm_server, pytest.mark.vllm_stage]

LANE = MAIN / "candidates" / "smollm2-135m-vllm-tp2-capacity-v3.toml"
NAME = "protocol-lane-cpu"


def lane_spec() -> dict[str, Any]:
    candidate = load_candidate(LANE)
    if not candidate.python().exists():
        why = "needs the vLLM CPU engine (scripts/install.sh vllm)"
        pytest.fail(why) if os.environ.get("TP2QUAL_REQUIRE_ENGINES") else pytest.skip(why)
    spec = candidate.spec
    baseline = spec["lane"]["after"]
    for table in ("lane", "reference"):
        spec.pop(table)
    spec.update(name=NAME, description=f"self-test copy of {LANE.stem}, as a local process")
    launch = spec["launch"]
    launch.pop("docker")
    launch.update(kind="process", readiness_timeout_s=420)
    # The protocol is what is proven here: the known answers are the baseline's to prove, and a
    # request may wait on 2 cores shared with other runs (decode seen at 0.3 tok/s, 2026-12-05).
    spec["gates"]["not_applicable"]["deterministic"] = "self-test of gate 08's protocol alone"
    spec["gates"]["throughput"]["request_timeout_s"] = 600
    profile = spec["gates"]["throughput"]["protocol"]
    for entry in profile["records"]:  # the copy sits elsewhere: its records by absolute path
        entry["path"] = str((LANE.parent / entry["path"]).resolve())
        entry["serve"] = NAME if entry["serve"] == baseline else entry["serve"]  # the same serve
    return spec


def test_protocol_rows_beside_a_dated_record(tmp_path: Path) -> None:
    write_candidate(tmp_path / "candidates", lane_spec())
    inner = run_inner(tmp_path, [NAME], timeout_s=1200)  # a bound on 2 shared cores, not a figure
    finding = inner.finding(NAME)
    outcomes = {g: r["outcome"] for g, r in finding["gates"].items()}
    assert finding["verdict"] == "PASS", (outcomes, inner.output()[-3000:])
    evidence = inner.evidence(NAME)
    rows = [json.loads(x) for x in (evidence / "protocol_samples.jsonl").read_text().splitlines()]
    summary = json.loads((evidence / "protocol_summary.json").read_text())
    print("medians:", {k: round(v["median"], 4) for k, v in summary["summary"].items()})
    if out := os.environ.get("TP2QUAL_PROTOCOL_RECORD"):
        meta = {
            "model": NAME,
            "started_at": finding.get("started"),
            "engine": "vLLM 0.32.0 CPU, TP2 (two ranks over gloo), a local process",
            "run": inner.run_dir.name,
        }
        Path(out).write_text(json.dumps(as_record(rows, summary["profile"], meta), indent=2))
    profile = summary["profile"]
    assert len(rows) == profile["requests"] and all(r["ok"] for r in rows), rows
    wanted = profile["prompt_tokens"]
    assert all(abs(r["prompt_tokens"] / wanted - 1) <= profile["prompt_tolerance"] for r in rows)
    beside = json.loads((evidence / "protocol_beside.json").read_text())
    by_date = {b["record"]["date"]: b for b in beside}
    for b in beside:
        print(b["record"]["date"], b["divided"], b["not_divided_because"])
    assert by_date["2026-08-01"]["divided"] is False
    why = " ".join(by_date["2026-08-01"]["not_divided_because"])
    assert "another serve" in why and "prompt" in why and "output cap" in why, why
    if "2026-12-05" in by_date:  # absent only while the record is being made
        cpu = by_date["2026-12-05"]
        assert cpu["divided"], cpu["not_divided_because"]
        decode = next(f for f in cpu["figures"] if f["figure"] == "decode_tok_s")
        print("decode ratio:", decode["ratio"])
        assert decode["ratio"]["low"] <= decode["ratio"]["ratio"] <= decode["ratio"]["high"]
        report = (inner.run_dir / "report.html").read_text()
        assert "capacity-v3" in report and "not divided" in report and "ratio" in report
    checked = inner.verify()
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
