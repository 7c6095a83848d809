"""Gate 07 on a real engine: a serve whose numerics drift mid-answer (the same tokens, every
logprob from the 9th answer token on lower by 1.0: a fault no other gate can see) FAILs gate 07
alone, after passing every earlier functional gate, and is never benchmarked; up to the drift,
two processes serving the same bytes agree token for token with identical logprobs.

One inner run of two copies of the embedded candidate (small gate settings, two arithmetic
items): the reference behind a transparent proxy, and the drifting copy naming it. The reference
runs first (references are ranked before their dependents) and PASSes, so the copy is judged
against this run's transcript.
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

REF, DRIFT = "agree-ref", "agree-drift"
DRIFT_FROM = 8  # faultproxy.DRIFT_FROM


def _spec(name: str, fault: str) -> dict[str, Any]:
    spec = with_fault(smollm2_spec(name), fault)
    del spec["gates"]["not_applicable"]["agreement"]  # the gate these runs are about
    spec["gates"]["agreement"].update(accuracy_items=2, accuracy_max_tokens=48)
    return spec


def _transcript(evidence: Path) -> list[dict[str, Any]]:
    text = (evidence / "agreement_transcript.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_a_drift_mid_answer_fails_agreement_alone(tmp_path: Path) -> None:
    folder = tmp_path / "candidates"
    write_candidate(folder, _spec(REF, "none"))
    drifting = _spec(DRIFT, "logprob_drift")
    drifting["reference"] = {"candidate": REF}
    write_candidate(folder, drifting)
    inner = run_inner(tmp_path, [REF, DRIFT])

    ref = inner.finding(REF)
    assert ref["verdict"] == "PASS", inner.output()
    assert ref["gates"]["agreement"]["outcome"] == "not_applicable", ref["gates"]["agreement"]
    assert "no reference named" in ref["gates"]["agreement"]["reason"]

    finding = assert_failed_and_blocked(inner, DRIFT, "agreement")
    assert "|Δ logprob| 1.000" in finding["gates"]["agreement"]["reason"], finding
    lines = _transcript(inner.evidence(DRIFT))
    summary = lines[-1]
    assert (summary["reference_candidate"], summary["reference_source"]) == (REF, "this run")
    assert summary["agrees_with_reference"] is False and summary["exact_share"] == 1.0
    own = {r["id"]: r["tokens"] for r in lines if r["kind"] == "transcript"}
    theirs = {r["id"]: r["tokens"] for r in lines if r["kind"] == "reference"}
    for prompt, tokens in own.items():  # before the drift: the very same numbers
        assert tokens[:DRIFT_FROM] == theirs[prompt][:DRIFT_FROM], prompt
    assert summary["accuracy_items"] == 2 and summary["accuracy_p_drop"] == 1.0
    for name in (REF, DRIFT):
        assert_nothing_left(inner, name)
