"""Gate 07 on a real engine: faults past the first differing token, each with logprobs consistent
with its text (completionfaults.py), FAIL gate 07 by its own check after passing every earlier
functional gate they ask, and are never benchmarked; the honest copy they name as reference
PASSes.

One inner run of five copies of the embedded candidate behind the fault proxy (llama.cpp reads
prompts back exactly: its reread equals its decode); the four fault copies declare gates 04-06
not applicable (``BESIDE_THE_POINT``) and pass 00-03:

- ``second_choice``: greedy takes its own second choice every 7th token from the 16th, its
  reported logprobs unchanged — greedy is not argmax;
- ``late_drift``: the same tokens drift, the reported lists rewritten to make them argmax — the
  serve's own reread gives them their real logprobs (self-consistency);
- ``early_eos``: answers end at half length with "stop" — the closeness walk's ends;
- ``long_context_drift``: late_drift only on prompts longer than 2,000 characters — only the
  prompt near the bound shows it (a KV-cache-style fault).

The near-bound prompt is kept at 30 % of the 2,048-token context (about 2,200 characters), so
only it crosses the threshold and the run stays minutes long.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_faults import (
    assert_failed_and_blocked,
    assert_nothing_left,
    run_inner,
    smollm2_spec,
    with_fault,
    write_candidate,
)

pytestmark = pytest.mark.slow

REF = "agree-ref"
FAULTS = {  # fault -> (proxy options, words of gate 07's reason)
    "second_choice": ((), "greedy is not argmax"),
    "late_drift": ((), "self-consistency (decode against its reread)"),
    "early_eos": ((), "stops after token"),
    "long_context_drift": (("--long-chars", "2000"), "self-consistency near the bound"),
}


# What each fault copy declares not applicable: gates 04-06 ask nothing these faults touch
# (their answers end or drift past token 16, judged by gate 07 alone), and four copies asking them
# cost CI minutes. The honest copy asks every gate: a reference needs a whole PASS.
BESIDE_THE_POINT = ("repetition", "tool_calls", "capacity")


def _spec(name: str, fault: str, *options: str) -> dict[str, Any]:
    spec = with_fault(smollm2_spec(name), fault, *options)
    del spec["gates"]["not_applicable"]["agreement"]  # the gate these runs are about
    if fault != "none":
        spec["gates"]["not_applicable"] |= {
            gate: "self-test fault copy: a fault past the first token is gate 07's to catch"
            for gate in BESIDE_THE_POINT
        }
    # The first three prompts (32, 48 and 64 tokens: past token 16 where the drifts begin),
    # two items, and a near-bound prompt of 30 %: minutes, not a quarter of an hour.
    spec["gates"]["agreement"].update(prompts=3, accuracy_items=2, accuracy_max_tokens=32,
                                      near_bound_fill=0.3)  # fmt: skip
    return spec


def _summary(evidence: Path) -> dict[str, Any]:
    lines = (evidence / "agreement_transcript.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


def test_faults_past_the_first_token_fail_agreement_alone(tmp_path: Path) -> None:
    folder = tmp_path / "candidates"
    write_candidate(folder, _spec(REF, "none"))
    for fault, (options, _) in FAULTS.items():
        spec = _spec(f"agree-{fault.replace('_', '-')}", fault, *options)
        spec["reference"] = {"candidate": REF}
        write_candidate(folder, spec)
    names = [REF, *(f"agree-{f.replace('_', '-')}" for f in FAULTS)]
    inner = run_inner(tmp_path, names, timeout_s=1800)

    ref = inner.finding(REF)
    assert ref["verdict"] == "PASS", inner.output()
    gate = ref["gates"]["agreement"]
    assert gate["outcome"] == "passed" and "no reference named" in str(gate["skipped"]), gate
    honest = _summary(inner.evidence(REF))
    assert honest["self_judgement"] == "agrees" and honest["greedy_not_argmax"] == 0
    assert honest["near_bound_judgement"] == "agrees", honest

    for fault, (_, words) in FAULTS.items():
        name = f"agree-{fault.replace('_', '-')}"
        finding = assert_failed_and_blocked(inner, name, "agreement")
        assert words in finding["gates"]["agreement"]["reason"], (fault, finding["gates"])
        summary = _summary(inner.evidence(name))
        assert (summary["reference_candidate"], summary["reference_source"]) == (REF, "this run")
    drift = _summary(inner.evidence("agree-long-context-drift"))
    assert drift["self_judgement"] == "agrees"  # the short prompts never see it
    for name in names:
        assert_nothing_left(inner, name)
