"""Gate 06 with ``stream_over_bound = true`` on a real engine: a rejection inside an HTTP 200
stream passes and is said so; the engine's own silent streamed answer fails.

One inner ``pytest -m capacity`` run (the helpers of ``test_faults.py``) qualifies two copies of
the embedded candidate (SmolLM2-135M on llama-cpp-python 0.3.36, CPU), both streaming the
over-bound prompt:

* behind ``faultproxy.py --fault over_bound_in_stream``, which answers a streamed prompt the
  engine rejects for its length the way SGLang 0.5.23 answers one its scheduler refuses (HTTP
  200, ``data: {"error": {"object": "error", "message": "Input length (N tokens) exceeds …",
  "code": 400}}``, ``[DONE]``; data/over-bound/README.md): the gate passes, and the finding's
  ``over_bound_stream`` claims say it was rejected inside the stream, with the engine's message;
* behind a transparent proxy: llama-cpp-python answers a streamed over-length prompt with an
  HTTP 200 stream and no error in it (what ``_smollm2-llamacpp.toml`` turns the streamed check
  off for), a real silent answer: the gate fails and says "accepted".

``verify`` then re-derives both from the raw exchanges with the same rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults import (
    MAIN,
    assert_nothing_left,
    run_inner,
    smollm2_spec,
    with_fault,
    write_candidate,
)

pytestmark = pytest.mark.slow

IN_STREAM, SILENT = "over-bound-in-stream", "over-bound-stream-silent"


def _streaming(name: str, fault: str) -> dict:
    spec = with_fault(smollm2_spec(name), fault)
    spec["gates"]["capacity"]["stream_over_bound"] = True
    spec["serve"]["max_model_len"] = 1024  # half the prompts to prefill (calibration needs ~700)
    return spec


def _exchange(inner_dir: Path, tag: str) -> dict:
    rows = [json.loads(x) for x in (inner_dir / "capacity.jsonl").read_text().splitlines() if x]
    return next(r for r in rows if r.get("tag") == tag)


def test_rejection_in_the_stream_passes_and_silence_fails(tmp_path: Path) -> None:
    folder = tmp_path / "candidates"
    write_candidate(folder, _streaming(IN_STREAM, "over_bound_in_stream"))
    write_candidate(folder, _streaming(SILENT, "none"))
    inner = run_inner(tmp_path, [IN_STREAM, SILENT], "-m", "capacity")

    passed = inner.finding(IN_STREAM)["gates"]["capacity"]
    assert passed["outcome"] == "passed", (passed, inner.output())
    claims = {c["name"]: c["value"] for c in passed["claims"]}
    assert claims["over_bound_stream"] == "rejected_in_stream", claims
    said = claims["over_bound_stream_said"]  # the sentence the report shows
    assert said.startswith("rejected inside an HTTP 200 stream (error chunk, code 400"), said
    assert "Input length (" in said and "silent" not in said, said
    raw = _exchange(inner.evidence(IN_STREAM), "over-bound-stream")
    assert raw["status"] == 200 and raw["chunks"][0]["data"]["error"]["code"] == 400, raw
    assert claims["over_bound_status"] == 400  # the plain request: the engine's own 400

    failed = inner.finding(SILENT)["gates"]["capacity"]
    assert failed["outcome"] == "failed", (failed, inner.output())
    assert "streamed: accepted (HTTP 200," in failed["reason"], failed["reason"]
    assert "no error in the stream): silently truncated" in failed["reason"], failed["reason"]
    assert "unhealthy" not in failed["reason"]  # the silent answer is the one problem
    silent = {c["name"]: c["value"] for c in failed["claims"]}
    assert silent["over_bound_stream"] == "accepted", silent

    verified = subprocess.run(
        [sys.executable, "-m", "tp2qual", "verify", str(inner.run_dir)],
        cwd=MAIN, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-2000:]
    for name in (IN_STREAM, SILENT):
        assert_nothing_left(inner, name)
