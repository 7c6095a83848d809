"""Gate 05 on a real engine: a candidate that answers HTTP 500 to the non-streamed twin of a
streamed tool call FAILs gate 05 (its fault, with the status and the body in the reason), and
the later gates are blocked — never a suite ERROR from reading a message the reply lacks.

One inner run of a copy of ``smollm2-135m-vllm`` (vLLM 0.32.0 CPU, started eager) behind the
fault proxy (``twin_500``: the first non-streamed repeat of a streamed tool request answers
500). vLLM, not llama.cpp: llama-cpp-python 0.3.36 sends a streamed call's name in every delta
(``get_weatherget_weather…``), so its streamed call fails before any twin is asked. The copy
requires ``named`` and ``named-stream``: the streamed call passes, and its twin, a repeat of the
``named`` request, is the one request that fails. ``verify`` then re-derives the same verdict
from the raw exchanges.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_faults import (
    MAIN,
    SLOW_GATES,
    assert_failed_and_blocked,
    assert_nothing_left,
    run_inner,
    with_fault,
    write_candidate,
)

from tp2qual.candidate import load_candidate

pytestmark = [pytest.mark.slow, pytest.mark.vllm_server]

NAME = "fault-twin-500"
VLLM = MAIN / "candidates" / "smollm2-135m-vllm.toml"


def vllm_spec(name: str) -> dict[str, Any]:
    """The vLLM candidate, renamed, started eager (no torch.compile warm-up), small settings."""
    candidate = load_candidate(VLLM)
    if not candidate.python().exists():
        why = "needs the vLLM CPU engine (scripts/install.sh vllm)"
        pytest.fail(why) if os.environ.get("TP2QUAL_REQUIRE_ENGINES") else pytest.skip(why)
    spec = candidate.spec
    spec.update(name=name, description=f"self-test copy of {VLLM.stem}")
    spec["launch"]["command"] = [*spec["launch"]["command"], "--enforce-eager"]
    gates = spec["gates"]
    gates["tool_calls"].update(modes=["named", "named-stream"])
    gates["throughput"].update(samples=5, warmup=1, max_tokens=16)
    gates.setdefault("not_applicable", {})["agreement"] = "self-test copy: not what it proves"
    return spec


def test_a_500_to_the_twin_request_fails_tool_calls_not_the_suite(tmp_path: Path) -> None:
    spec = with_fault(vllm_spec(NAME), "twin_500")
    spec["launch"]["readiness_timeout_s"] = 420  # vLLM's own start budget, not the proxy's 120 s
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, [NAME], "-m", " and ".join(f"not {g}" for g in SLOW_GATES))

    finding = assert_failed_and_blocked(inner, NAME, "tool_calls", SLOW_GATES)
    gate = finding["gates"]["tool_calls"]
    reason = "AssertionError: named-stream: non-streamed twin: HTTP 500: "
    assert gate["reason"].startswith(reason), gate["reason"]
    assert "injected: twin request failed" in gate["reason"], gate  # the body, as sent
    assert gate["tests"].get("test_tool_call") == "failed", gate["tests"]
    assert not [g for g, r in finding["gates"].items() if r["outcome"] == "error"], finding
    assert not (inner.evidence(NAME) / "suite_errors").exists()
    assert inner.junit.findall(".//failure") and not inner.junit.findall(".//error")

    exchanges = [
        json.loads(line)
        for line in (inner.evidence(NAME) / "tool_calls.jsonl").read_text().splitlines()
    ]
    statuses = {e["tag"]: e.get("status") for e in exchanges}
    assert statuses == {"named": 200, "named-stream": 200, "named-stream-twin": 500}, statuses
    verdicts = (inner.evidence(NAME) / "tool_calls_verdicts.jsonl").read_text().splitlines()
    assert [json.loads(v)["ok"] for v in verdicts] == [True, False]

    verify = inner.verify()
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-2000:]
    assert_nothing_left(inner, NAME)
