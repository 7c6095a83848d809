"""Gate 07 on a real engine: two serves of the same bytes agree token for token, and a serve
whose numerics drift mid-answer (same tokens, moved logprobs: the fault no other gate can see)
FAILs gate 07 alone, after passing every earlier functional gate, and is never benchmarked.

One inner run of three copies of the embedded candidate (small gate settings): the reference
behind a transparent proxy, a healthy copy and a drifting copy, both naming it as reference.
The reference runs first (references are ranked before their dependents) and PASSes, so both
are judged against this run's transcript.
"""

from __future__ import annotations

import json
from pathlib import Path

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

REF, SAME, DRIFT = "agree-ref", "agree-same", "agree-drift"


def _summary(inner_evidence: Path) -> dict:
    lines = (inner_evidence / "agreement_transcript.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


def test_same_bytes_agree_and_a_drift_fails_only_agreement(tmp_path: Path) -> None:
    folder = tmp_path / "candidates"
    write_candidate(folder, with_fault(smollm2_spec(REF), "none"))
    for name, fault in ((SAME, "none"), (DRIFT, "logprob_drift")):
        spec = with_fault(smollm2_spec(name), fault)
        spec["reference"] = {"candidate": REF}
        write_candidate(folder, spec)
    inner = run_inner(tmp_path, [REF, SAME, DRIFT])

    ref = inner.finding(REF)
    assert ref["verdict"] == "PASS", inner.output()
    assert ref["gates"]["agreement"]["outcome"] == "not_applicable", ref["gates"]["agreement"]
    assert "no reference named" in ref["gates"]["agreement"]["reason"]

    same = inner.finding(SAME)
    assert same["verdict"] == "PASS", (same["gates"]["agreement"], inner.output())
    summary = _summary(inner.evidence(SAME))
    assert summary["reference_candidate"] == REF and summary["reference_source"] == "this run"
    assert (summary["exact_share"], summary["max_abs_delta_logprob"]) == (1.0, 0.0), summary

    finding = assert_failed_and_blocked(inner, DRIFT, "agreement")
    assert "|Δ logprob| 1.000" in finding["gates"]["agreement"]["reason"], finding
    assert _summary(inner.evidence(DRIFT))["agrees_with_reference"] is False
    for name in (REF, SAME, DRIFT):
        assert_nothing_left(inner, name)
