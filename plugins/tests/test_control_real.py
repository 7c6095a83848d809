"""The reasoning control on a real engine: a candidate whose control says thinking off, served
by an engine that reasons anyway, FAILs on its first answer with "control not applied:
reasoning returned with thinking off" — never a pass because the answer's words were right.

One inner run of two copies of ``smollm2-135m-vllm-reasoning`` (vLLM 0.32.0 CPU, started eager)
with its control swapped: ``[gates.request] reasoning = "off"``, while its chat template still
opens ``<think>`` in every generation prompt and its ``olmo3`` parser still splits what the
model writes before ``</think>`` into ``message.reasoning``. The engine's own reasoning is the
fault, no proxy. The second copy keeps the lane's own control (``on``): every answer proves
its reasoning, and gate 03 judges its words as ever. ``verify`` then derives the same proofs,
and the same failure, from the raw exchanges.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_faults import MAIN, assert_nothing_left, run_inner, write_candidate

from tp2qual.candidate import GATES, load_candidate
from tp2qual.checks.control import NOT_OFF

pytestmark = [pytest.mark.slow, pytest.mark.vllm_server]

NAME = "control-off-reasons-anyway"
ON = "control-on-reasons"  # the same serve, its control as the lane states it: the pass
LANE = MAIN / "candidates" / "smollm2-135m-vllm-reasoning.toml"


def swapped_spec(name: str = NAME, asked: str = "off") -> dict[str, Any]:
    """The reasoning lane as a candidate of its own (no baseline to wait for), eager, its
    control ``asked`` (swapped to off by default)."""
    candidate = load_candidate(LANE)
    if not candidate.python().exists():
        why = "needs the vLLM CPU engine (scripts/install.sh vllm)"
        pytest.fail(why) if os.environ.get("TP2QUAL_REQUIRE_ENGINES") else pytest.skip(why)
    spec = candidate.spec
    spec.pop("lane")
    spec.update(name=name, description=f"self-test copy of {LANE.stem}, control {asked}")
    spec["launch"]["command"] = [*spec["launch"]["command"], "--enforce-eager"]
    spec["launch"]["readiness_timeout_s"] = 420
    request = spec["gates"]["request"]
    request.update(reasoning=asked, why=f"self-test: the control says {asked}, the serve reasons")
    spec["gates"]["deterministic"]["repeats"] = 2
    return spec


def test_reasoning_returned_with_thinking_off_fails_the_control(tmp_path: Path) -> None:
    write_candidate(tmp_path / "candidates", swapped_spec())
    write_candidate(tmp_path / "candidates", swapped_spec(ON, "on"))
    inner = run_inner(tmp_path, [NAME, ON])

    finding = inner.finding(NAME)
    outcomes = {g: r["outcome"] for g, r in finding["gates"].items()}
    assert (finding["verdict"], finding["failed_gate"]) == ("FAIL", "deterministic"), outcomes
    assert outcomes["model_list"] == "passed", outcomes
    later = GATES[GATES.index("deterministic") + 1 :]  # blocked, or the lane's not applicable
    assert all(outcomes[g] in ("blocked", "not_applicable") for g in later), outcomes
    reason = finding["gates"]["deterministic"]["reason"]
    print(f"gate 03's reason: {reason}")
    assert NOT_OFF in reason, reason
    assert "in reasoning" in reason, reason  # the olmo3 parser's field, vLLM's name for it
    assert not [g for g, r in finding["gates"].items() if r["outcome"] == "error"], finding

    evidence = inner.evidence(NAME)
    proofs = [
        json.loads(x) for x in (evidence / "deterministic_control.jsonl").read_text().splitlines()
    ]
    assert len(proofs) == 1, proofs  # the first answer fails the gate
    proof = proofs[0]
    assert (proof["asked"], proof["seen"], proof["ok"], proof["field"]) == (
        "off", True, False, "reasoning",
    ), proof  # fmt: skip
    assert proof["reasoning_chars"] > 0
    raw = [json.loads(x) for x in (evidence / "deterministic.jsonl").read_text().splitlines()]
    assert raw[0]["response"]["choices"][0]["message"]["reasoning"].strip()

    # The same serve with its control as stated: reasoning proven on every answer. Gate 03 then
    # judges the words as ever: started eager, SmolLM2 answered "France is a sovereign state
    # located in Western Europe. …" (no Paris; 2026-12-05), a wrong answer, never the control's.
    judged = inner.finding(ON)["gates"]["deterministic"]
    assert judged["outcome"] in ("passed", "failed"), judged
    assert "control not applied" not in (judged.get("reason") or ""), judged
    rows = (inner.evidence(ON) / "deterministic_control.jsonl").read_text().splitlines()
    proofs = [json.loads(x) for x in rows]
    assert [(p["asked"], p["seen"], p["ok"]) for p in proofs] == [("on", True, True)] * 2, proofs

    verify = inner.verify()
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-2000:]
    assert_nothing_left(inner, NAME)
    assert_nothing_left(inner, ON)
