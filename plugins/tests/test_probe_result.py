"""The probe's report line parsed and judged (``checks.probe_result``): pure, no processes."""

from __future__ import annotations

import json

import pytest

from tp2qual.checks.probe_result import (
    ProbeReportError,
    WrongElements,
    check_report,
    parse_report,
)
from tp2qual.serving import nccl_probe


def report_line(**over) -> str:
    case = {"dtype": "bf16", "bytes": 4096, "ok": True, "ranks": 2, "seconds": 1e-4,
            "algbw_gbps": 0.041, "busbw_gbps": 0.041}  # fmt: skip
    raw = {
        "ok": True, "backend": "gloo", "nprocs": 2, "timed_out": False, "wall_s": 3.5,
        "timeout_s": 60, "env": {}, "cases": [case, {**case, "dtype": "fp32"}],
        "ranks": [{"rank": r, "ok": True, "torch": "2.9.0+cpu"} for r in (0, 1)],
    }  # fmt: skip
    raw.update(over)
    return nccl_probe.REPORT_TAG + json.dumps(raw)


def test_the_last_report_line_wins_and_rank_lines_are_not_it():
    text = "\n".join([
        "[rank0] TP2QUAL_PROBE_RESULT {\"ok\": true}",
        report_line(nprocs=3),
        "nccl_probe: human table",
        "\x1b[0m" + report_line() + "\r",
    ])  # fmt: skip
    report = parse_report(text)
    assert (report.backend, report.nprocs, report.ranks_ok) == ("gloo", 2, (0, 1))
    assert [c.dtype for c in report.cases] == ["bf16", "fp32"]
    assert report.versions == {"torch": "2.9.0+cpu"}
    assert check_report(report, tp=2, backend="gloo").ok


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "printed no 'TP2QUAL_PROBE_REPORT' line"),
        (nccl_probe.REPORT_TAG + "{not json", "malformed (JSONDecodeError"),
        (nccl_probe.REPORT_TAG + "[1, 2]", "malformed (TypeError"),
        (nccl_probe.REPORT_TAG + "{}", "malformed (KeyError"),
    ],
)
def test_no_or_bad_line_is_one_clear_error(text, words):
    with pytest.raises(ProbeReportError, match=r".*") as exc:
        parse_report(text)
    assert words in str(exc.value)


def test_each_shortfall_is_named():
    bad_case = {"dtype": "bf16", "bytes": 33554432, "ok": False, "ranks": 2,
                "error": "5 of 16777216 elements differ from 3"}  # fmt: skip
    report = parse_report(report_line(
        ok=False, timed_out=True, backend="nccl", cases=[bad_case],
        ranks=[{"rank": 0, "ok": False, "error": "rank reported no result"},
               {"rank": 1, "ok": False, "error": "rank not started"}],
    ))  # fmt: skip
    verdict = check_report(report, tp=2, backend="gloo")
    assert not verdict.ok
    for words in (
        "backend nccl, the engine uses gloo",
        "timed out after 3.5 s",
        "rank(s) [0, 1] did not finish ok (rank 0: rank reported no result; rank 1: rank not"
        " started)",
        "all_reduce bf16 33554432 B failed: 5 of 16777216 elements differ from 3",
    ):
        assert words in verdict.reason
    assert verdict.measures["rank_errors"] == {
        "0": "rank reported no result",
        "1": "rank not started",
    }
    assert not check_report(parse_report(report_line(cases=[])), tp=2, backend="gloo").ok
    assert "expected 4" in check_report(parse_report(report_line()), tp=4, backend="gloo").reason


def test_tag_literal_matches_the_probe():
    from tp2qual.checks import probe_result

    assert probe_result.REPORT_TAG == nccl_probe.REPORT_TAG


def test_where_a_rank_summed_wrong_is_kept_and_named():
    where = {"rank": 1, "wrong_elements": 256, "first_wrong": 256, "last_wrong": 511,
             "found": 3.0, "expected": 130}  # fmt: skip
    error = (
        "rank 1: 256 of 2048 elements wrong, elements 256..511; element 256 holds 3, expected 130"
    )
    bad = {"dtype": "bf16", "bytes": 4096, "ok": False, "ranks": 2, "error": error,
           "wrong": [where]}  # fmt: skip
    report = parse_report(report_line(ok=False, cases=[bad]))
    (case,) = report.cases
    assert case.wrong == (WrongElements(rank=1, count=256, first=256, last=511, found=3.0,
                                        expected=130.0),)  # fmt: skip
    verdict = check_report(report, tp=2, backend="gloo")
    assert not verdict.ok and f"all_reduce bf16 4096 B failed: {error}" in verdict.reason
    assert verdict.measures["cases"][0]["wrong"][0]["first"] == 256  # recorded, for the finding
