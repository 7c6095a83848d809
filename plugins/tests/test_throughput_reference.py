"""Where another candidate's measured throughput comes from (evidence/throughput_reference.py):
its PASS in this run (none when it FAILED there), else the newest earlier dated PASS, never the
``latest`` link (the one rule of evidence/reference_rule.py: test_one_reference.py);
and the copy gate 08 keeps of it, which ``verify`` re-derives the floors from.

Run folders are made by ``test_verify.write_run`` (the real core writes them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_verify import GATE_SETTINGS, NAME, edit_finding, fake_candidate, rehash, write_run

from tp2qual.evidence.run import RunState
from tp2qual.evidence.run_floors import not_derivable_before_start
from tp2qual.evidence.throughput_reference import (
    THROUGHPUT_REFERENCE,
    as_record,
    measured_basis,
    recorded_bases,
)
from tp2qual.evidence.verify import verify_run
from tp2qual.perf.floor_basis import MeasuredBasis

OLD, MID, NEW = "20261101T000000Z-0001", "20261201T000000Z-0002", "20261202T000000Z-0003"


def _fail(finding: dict) -> None:
    finding["gates"]["deterministic"].update(outcome="failed", reason="wrong answer")
    finding.update(verdict="FAIL", failed_gate="deterministic")


def test_this_runs_pass_first(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_run(root, run_id=OLD, rate=(30.0, 30.5, 29.5, 30.2, 30.1))
    write_run(root, run_id=MID)
    found = measured_basis(root, MID, "reference", NAME)
    assert isinstance(found, MeasuredBasis)
    assert (found.run, found.source, found.where()) == (MID, "this run", f"this run, {MID}")
    assert [s["i"] for s in found.samples] == [0, 1, 2, 3, 4]  # the warm-up left out
    assert found.settings == {"prompt_words": 96, "max_tokens": 128, "min_tokens": None}


def test_else_the_newest_earlier_dated_pass_never_the_latest_link(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_run(root, run_id=OLD)
    write_run(root, run_id=MID)
    edit_finding(root / MID, _fail)  # not a PASS: not a basis
    write_run(root, run_id=NEW)  # a later run, and where `latest` points
    assert os.readlink(root / "latest") == NEW
    between = "20261201T120000Z-0009"  # judged after MID's FAIL, before NEW
    found = measured_basis(root, between, "reference", NAME)
    assert isinstance(found, MeasuredBasis) and (found.run, found.source) == (OLD, "an earlier run")
    assert found.where() == f"run {OLD}"
    vetoed = measured_basis(root, MID, "reference", NAME)  # it FAILED in the run judged
    assert isinstance(vetoed, str) and "FAILED in this run" in vetoed, vetoed


def test_none_anywhere_says_so(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_run(root, run_id=OLD)
    assert measured_basis(root, OLD, "reference", "tp1-nowhere") == (
        f"reference 'tp1-nowhere' has no PASS in this run or an earlier dated run under {root}"
    )


def test_the_copy_reads_back_as_it_was_written(tmp_path: Path) -> None:
    root = tmp_path / "results"
    run = write_run(root, run_id=OLD)
    found = measured_basis(root, OLD, "reference", NAME)
    record = as_record({"reference": found, "lane_baseline": "no lane baseline named"})
    (run / NAME / THROUGHPUT_REFERENCE).write_text(json.dumps(record))
    assert recorded_bases(run / NAME) == {
        "reference": found,
        "lane_baseline": "no lane baseline named",
    }


@pytest.mark.parametrize(("rate", "ok"), [(60.0, True), (120.0, False)])
def test_verify_rederives_a_floor_of_the_reference_from_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rate: float, ok: bool
) -> None:
    """The candidate decodes at ~60.5 tok/s; 0.6 x a reference at 60 is met, at 120 it is not."""
    rule = {"decode_tok_s_median": {"of": "reference", "fraction": 0.6, "why": "a test"}}
    monkeypatch.setitem(GATE_SETTINGS, "throughput", {"derived_floors": rule})
    run = write_run(tmp_path / "results", run_id=OLD)
    samples = [{"phase": "sample", "i": i, "decode_tok_s": rate} for i in range(5)]
    settings = {"prompt_words": 96, "max_tokens": 128, "min_tokens": None}
    copied = MeasuredBasis("reference", "tp1", MID, "this run", tuple(samples), settings)
    (run / NAME / THROUGHPUT_REFERENCE).write_text(json.dumps(as_record({"reference": copied})))
    rehash(run)
    result = verify_run(run)
    assert result.ok is ok, [p.line() for p in result.problems]
    if not ok:
        details = " ".join(p.detail for p in result.problems)
        assert "decode_tok_s_median = 60.5, floor ≥ 72 (0.6 x the reference tp1's 120" in details


def test_before_start_a_reference_selected_to_run_first_counts_as_coming(tmp_path: Path) -> None:
    root = tmp_path / "results"
    cand = fake_candidate(root, "tp2")
    rule = {"decode_tok_s_median": {"of": "reference", "fraction": 0.6, "why": "w"}}
    cand.spec["reference"] = {"candidate": "tp1"}
    cand.spec["gates"] = {**cand.spec["gates"], "throughput": {"derived_floors": rule}}
    state = RunState(root, [cand], run_id=NEW)
    record = state.record(cand)
    assert not_derivable_before_start(state, record, {"tp1", "tp2"}) == []
    (why,) = not_derivable_before_start(state, record, {"tp2"})
    assert why.startswith(
        "derived_floors.decode_tok_s_median (of reference): reference 'tp1' has no PASS"
    )
