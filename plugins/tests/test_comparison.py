"""TP1 baseline ratios (corroborated only by a local finding) and the roofline fraction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tp2qual.artifacts.finding import Finding, read_finding
from tp2qual.perf.comparison import compare_baseline, roofline_for

DATA = Path(__file__).parent / "data"
SUMMARY = {"decode_tok_s": {"median": 130.0}, "ttft_s": {"median": 0.3}}
BASELINE = {
    "date": "2026-07-28",
    "source": "a finding doc",
    "tp": 1,
    "figures": {"decode_tok_s_median": 65.0, "ttft_s_median": 0.15},
}


def test_no_baseline_says_so():
    assert compare_baseline(SUMMARY, None) == {"baseline": None}


SAME = {"decode_tok_s_median": "perf/sampling.py", "ttft_s_median": "perf/sampling.py"}


def test_numbers_from_prose_under_the_suites_definition_are_uncorroborated_but_compared():
    result = compare_baseline(SUMMARY, {**BASELINE, "definitions": SAME})
    assert result["corroborated"] is False
    rows = {r["figure"]: r for r in result["rows"]}
    assert rows["decode_tok_s_median"]["ratio"] == pytest.approx(2.0)
    assert rows["ttft_s_median"]["ratio"] == pytest.approx(2.0)
    assert "refused" not in rows["ttft_s_median"]


def test_a_figure_of_another_definition_is_shown_never_divided_by():
    """Qwen3.5's dated 65 tok/s is an aggregate over a capacity run, not 1/TPOT."""
    other = {**SAME, "decode_tok_s_median": "aggregate output tok/s, TTFT included"}
    rows = {
        r["figure"]: r
        for r in compare_baseline(SUMMARY, {**BASELINE, "definitions": other})["rows"]
    }
    decode = rows["decode_tok_s_median"]
    assert (decode["baseline"], decode["now"], decode["ratio"]) == (65.0, 130.0, None)
    assert decode["refused"] == (
        "not the same definition as the suite's (perf/sampling.py): "
        "aggregate output tok/s, TTFT included"
    )
    assert rows["ttft_s_median"]["ratio"] == pytest.approx(2.0)


def test_a_figure_whose_definition_is_not_stated_is_not_compared():
    rows = compare_baseline(SUMMARY, BASELINE)["rows"]
    assert [r["ratio"] for r in rows] == [None, None]
    assert all("definition is not stated (baseline.definitions." in r["refused"] for r in rows)


def test_a_local_pass_finding_corroborates_and_its_claims_win():
    finding = {
        "verdict": "PASS",
        "gates": {"throughput": {"claims": [{"name": "decode_tok_s_median", "value": 52.0}]}},
    }
    result = compare_baseline(SUMMARY, BASELINE, Finding.from_dict(finding))
    assert result["corroborated"] is True
    assert [(r["figure"], r["baseline"]) for r in result["rows"]] == [("decode_tok_s_median", 52.0)]


def test_a_failed_local_finding_does_not_corroborate():
    failed = Finding.from_dict({"verdict": "FAIL", "gates": {}})
    result = compare_baseline(SUMMARY, BASELINE, failed)
    assert result["corroborated"] is False


def test_a_baseline_finding_is_named_by_file_or_folder_and_unreadable_is_none(tmp_path: Path):
    folder = tmp_path / "run" / "cand"
    folder.mkdir(parents=True)
    (folder / "finding.json").write_text(json.dumps({"verdict": "PASS", "candidate": "cand"}))
    assert read_finding("run/cand", tmp_path).candidate == "cand"
    assert read_finding(folder / "finding.json", tmp_path).verdict == "PASS"
    (folder / "finding.json").write_text("{not json")
    assert read_finding("run/cand", tmp_path) is None
    assert read_finding(None, tmp_path) is None


def test_a_hand_edited_finding_reads_as_what_it_says():
    finding = Finding.from_dict(
        {"gates": {"throughput": {"outcome": "passed", "claims": [{"value": True}, "junk"]}}}
    )
    assert finding.finished is None and finding.verdict == ""
    assert finding.gates["throughput"].claims[0].artifact == ""
    assert finding.figures("throughput") == {}  # a bool is no figure
    assert finding.gates["preflight"].outcome == "not_run"


def test_roofline_from_real_h200_nvml_answers():
    snapshot = json.loads((DATA / "h200-2026-11-30" / "snapshot.json").read_text())
    model = {"active_params_b": 10, "bits_per_weight": 4.5}
    roof = roofline_for(model, {}, snapshot, tp=2, measured_decode_tok_s=500.0)
    # 10e9 x 4.5/8 / 2 = 2.8125e9 bytes per GPU per token at ~4814 GB/s
    assert roof["bandwidth_from"] == "nvml"
    assert roof["bound_tok_s"] == pytest.approx(4814.3e9 / 2.8125e9, rel=1e-3)
    assert roof["fraction"] == pytest.approx(500.0 / roof["bound_tok_s"])


def test_roofline_falls_back_to_the_candidates_bandwidth():
    roof = roofline_for(
        {"active_params_b": 12, "bits_per_weight": 4.5},
        {"bandwidth_gbs": 1792},
        None,
        tp=2,
        measured_decode_tok_s=None,
    )
    assert roof["bandwidth_from"] == "candidate"
    assert roof["bound_tok_s"] == pytest.approx(1792e9 / (12e9 * 4.5 / 8 / 2))
    assert roof["fraction"] is None


def test_roofline_needs_model_figures():
    roof = roofline_for({}, {"bandwidth_gbs": 1792}, None, tp=2, measured_decode_tok_s=1.0)
    assert roof == {"computed": False, "why": roof["why"]} and "active_params_b" in roof["why"]
