"""Launch order across candidates, gate order within one, from real inner ``pytest`` runs.

Proved with two copies of the embedded candidate run through every gate (small settings):
each engine process starts exactly once (one ``Started server process`` line in its log, one
launcher pid, one readiness record) and is stopped — port free — before the next candidate's
starts (evidence files written in the order launch A < ready A < teardown A < launch B ...);
each candidate's gates run together in gate order 00, 01, 02, … 07 (the inner run's own reports).
And a candidate that needs two GPUs is skipped here with the reason, without starting anything.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_faults import alive, gate_of_nodeid, run_inner, smollm2_spec, write_candidate

from tp2qual.candidate import GATES
from tp2qual.serving.launchers.base import port_is_free

NAMES = ["order-a", "order-b"]  # candidates run in name order


def _stamp(evidence: Path, rel: str) -> int:
    return (evidence / rel).stat().st_mtime_ns


@pytest.mark.slow
def test_each_server_starts_once_and_stops_before_the_next(tmp_path: Path) -> None:
    for name in NAMES:
        spec = smollm2_spec(name)
        spec["gates"]["repetition"]["max_tokens"] = 16  # order is proved, not long outputs
        spec["gates"]["tool_calls"]["modes"] = ["named"]
        write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, NAMES)
    assert inner.proc.returncode in (0, 1), inner.output()

    timeline = []
    for name in NAMES:
        evidence = inner.evidence(name)
        log = (evidence / "server.log").read_text()
        assert len(re.findall(r"Started server process \[\d+\]", log)) == 1, log[-3000:]
        assert len(re.findall(r"Uvicorn running on", log)) == 1
        teardown = json.loads((evidence / "teardown.json").read_text())
        assert teardown["port_free"] and teardown["how"] == "SIGTERM", teardown
        launch = json.loads((evidence / "launch.json").read_text())
        assert launch["pid"] and not alive(launch["pid"]), launch  # the engine itself is gone
        assert port_is_free(int(launch["base_url"].split(":")[-1]))
        timeline += [(_stamp(evidence, f), f"{name}/{f}") for f in ("launch.json",
                     "readiness.json", "teardown.json")]  # fmt: skip
    assert [what for _, what in sorted(timeline)] == [what for _, what in timeline], timeline

    # Gate order, from the reports as the inner run produced them.
    setups = [e for e in inner.events if e["when"] == "setup"]
    by_candidate = [next(n for n in NAMES if f"[{n}" in e["nodeid"]) for e in setups]
    assert by_candidate == sorted(by_candidate), "candidates' gates interleaved"
    for name in NAMES:
        order = [
            GATES.index(gate_of_nodeid(e["nodeid"])) for e in setups if f"[{name}" in e["nodeid"]
        ]
        assert order == sorted(order), order
        assert sorted(set(order)) == list(range(len(GATES))), order  # 00 … 08, every gate
        ran = {g: r["outcome"] for g, r in inner.finding(name)["gates"].items()}
        assert ran["model_list"] == "passed" and ran["deterministic"] == "passed", ran


def test_a_candidate_needing_two_gpus_is_skipped_with_the_reason(tmp_path: Path) -> None:
    spec = smollm2_spec("two-gpus")
    spec["gpus"] = {"count": 2}
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, ["two-gpus"])
    assert inner.proc.returncode == 0, inner.output()
    setups = [e for e in inner.reports("two-gpus") if e["when"] == "setup"]
    assert len(setups) >= len(GATES) - 1, inner.output()  # every gate test was collected
    for report in setups:
        assert report["outcome"] == "skipped", report
        assert "needs 2 NVIDIA GPU(s)" in report["reason"], report
    assert not list(inner.results.rglob("launch.json")), "something was launched"
