"""The campaign overview, its chart, history, export and ``compare``; charts and topology tables.

Run folders are made by ``test_verify.write_run`` (the real core writes them) with several
candidates in one run; a failure, a TP1 comparison and agreement claims are written into them
the way the gates write theirs.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from pathlib import Path

import pytest
from test_report import CHROMIUM, _chromium, _page_errors
from test_verify import write_run

from tp2qual.__main__ import main
from tp2qual.artifacts.layout import write_manifest
from tp2qual.evidence.charts import Interval, interval_chart, nice_ticks, sample_chart
from tp2qual.evidence.overview import history, summarize_run
from tp2qual.evidence.report import build_run, render
from tp2qual.evidence.topology_view import topology_view

DATA = Path(__file__).parent / "data"
OLD, NEW = "20251201T000000Z-0000", "20260101T000000Z-aaaa"
FAST, SLOW = "fast-one", "slow-one"


def _edit(cand_dir: Path, change) -> None:  # type: ignore[no-untyped-def]
    path = cand_dir / "finding.json"
    finding = json.loads(path.read_text())
    change(finding)
    path.write_text(json.dumps(finding, indent=2, sort_keys=True) + "\n")


def _fail_deterministic(finding: dict) -> None:
    gate = finding["gates"]["deterministic"]
    gate.update(outcome="failed", reason="capital: expected 'Paris' in answer\nsecond line")
    gate["diagnosis"] = {"findings": [{"rule": "oom", "cause": "CUDA out of memory at load"}]}
    for later in ("repetition", "tool_calls", "capacity", "throughput"):
        finding["gates"][later].update(outcome="blocked", reason="blocked", claims=[])
    finding.update(verdict="FAIL", failed_gate="deterministic")


def _lane(finding: dict) -> None:
    finding["candidate_spec"]["lane"] = {"after": FAST, "kind": "optional"}


def _agreement(finding: dict) -> None:
    claim = {"name": "exact_share", "value": 0.6, "artifact": "agreement.jsonl"}
    finding["gates"]["agreement"] = {"outcome": "passed", "claims": [claim]}


@pytest.fixture
def campaign(tmp_path: Path) -> Path:
    """Two runs: the older with one candidate, the newer with a passing and a failed one."""
    root = tmp_path / "results"
    write_run(root, run_id=OLD, name=FAST, rate=(30.0, 30.5, 29.5, 30.2, 30.1))
    write_run(root, run_id=NEW, name=FAST)
    run = write_run(root, run_id=NEW, name=SLOW, rate=(9.0, 9.5, 8.5, 9.2, 9.1))
    (run / FAST / "throughput_comparison.json").write_text(
        json.dumps(
            {
                "baseline": {"date": "2026-07-28", "tp": 1},
                "corroborated": False,
                "rows": [
                    {"figure": "decode_tok_s_median", "now": 60.5, "baseline": 40.3, "ratio": 1.5}
                ],
            }
        )
    )
    _edit(run / FAST, _agreement)
    _edit(run / SLOW, _fail_deterministic)
    _edit(run / SLOW, _lane)
    write_manifest(run, run_id=run.name, final=True)
    return run


def test_a_row_per_candidate_read_from_its_claims(campaign: Path) -> None:
    fast, slow = summarize_run(campaign)
    assert (fast.candidate, fast.verdict, fast.gate, fast.decode_tok_s) == (FAST, "PASS", "", 60.5)
    assert fast.decode_ci[0] is not None and fast.decode_ci[0] < 60.5 < fast.decode_ci[1]
    assert (fast.tp1_ratio, fast.tp1_corroborated, fast.tp1_date) == (1.5, False, "2026-07-28")
    assert fast.agreement == {"exact_share": 0.6}  # the named figures, never every claim
    assert fast.wall_s == pytest.approx(3.0)  # six passed gates of 0.5 s each
    assert (slow.verdict, slow.gate) == ("FAIL", "deterministic")
    assert slow.cause == "CUDA out of memory at load"  # the diagnosis, not the assertion
    assert slow.decode_tok_s is None  # its throughput claims were withdrawn: not shown
    assert slow.decode_ci == (None, None)  # nor the interval its stale summary file holds
    assert slow.tp1_corroborated is None
    assert (slow.lane_after, fast.lane_after) == (FAST, "")


def test_the_report_opens_with_the_overview_chart_and_history(campaign: Path) -> None:
    view = build_run(campaign)
    assert view.overview is not None
    fast, slow = view.overview.rows
    assert fast.agreement == "identical answers 60%" and slow.agreement == "—"
    assert (fast.tp1, fast.tp1_note) == ("1.500x", "uncorroborated, 2026-07-28")
    assert fast.reference == "" and fast.reference_where == "no reference named"
    (decode,) = [c for c in view.overview.charts if "decode" in c.caption]
    names = [e.text for e in decode.svg.elements if e.tag == "text"]
    assert FAST in names and SLOW not in names  # only a candidate that measured it
    (hist,) = view.overview.history
    assert hist.candidate == FAST and [r.run_id for r in hist.rows] == [NEW, OLD]
    assert hist.rows[1].report == f"../{OLD}/report.html" and hist.rows[0].current
    html = render(view)
    assert html.index('id="overview"') < html.index(f'<section id="{FAST}">')
    assert f'<a href="#{SLOW}">{SLOW}</a>' in html
    exported = html.split('href="data:text/csv;base64,', 1)[1].split('"', 1)[0]
    rows = list(csv.DictReader(io.StringIO(base64.b64decode(exported).decode())))
    assert [(r["candidate"], r["verdict"], r["decode_tok_s"]) for r in rows] == [
        (FAST, "PASS", "60.5"),
        (SLOW, "FAIL", ""),
    ]


def test_history_reads_only_runs_up_to_this_one(campaign: Path) -> None:
    later = write_run(campaign.parent, run_id="20270101T000000Z-bbbb", name=FAST)
    assert [r.run_id for r in history(campaign, FAST)] == [NEW, OLD]
    assert history(later, FAST)[0].run_id == later.name


def test_compare_prints_the_table_and_exports(
    campaign: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(campaign)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["run_id", "candidate", "verdict", "gate"]
    assert "reference" in lines[0].split() and "decode_x_ref" in lines[0].split()
    body = [line.split()[:3] for line in lines[2:5]]
    assert body == [[NEW, FAST, "PASS"], [OLD, FAST, "PASS"], [NEW, SLOW, "FAIL"]]
    assert main(["compare", str(campaign.parent / OLD), str(campaign), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["candidate"]) for r in rows] == [(OLD, FAST), (NEW, FAST), (NEW, SLOW)]
    assert main(["compare", str(campaign.parent / "nope")]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_charts_have_axes_units_sample_numbers_and_the_floor() -> None:
    assert nice_ticks(0.19, 0.22) == [0.19, 0.2, 0.21, 0.22]
    assert nice_ticks(0.0, 61.3) == [0.0, 20.0, 40.0, 60.0, 80.0]
    svg = sample_chart("decode rate", "tokens/s", [(0, 60.0), (1, 61.0)], (50.0, "floor 50"))
    texts = [e.text for e in svg.elements if e.tag == "text"]
    assert {"decode rate (tokens/s)", "sample number", "0", "1", "floor 50"} <= set(texts)
    dashed = [e for e in svg.elements if ("stroke-dasharray", "6 4") in e.attrs]
    assert len(dashed) == 1
    tips = [e.title for e in svg.elements if e.tag == "circle"]
    assert tips == ["sample 0: 60 tokens/s", "sample 1: 61 tokens/s"]
    rows = [Interval("a", 10.0, 9.0, 11.0), Interval("b", 5.0, None, None)]
    chart = interval_chart("decode rate", "tokens/s", rows)
    assert sum(e.tag == "line" for e in chart.elements) == 2 + 4 + 3  # axes, grid, one whisker
    assert "b: median 5 tokens/s" in [e.title for e in chart.elements]


def test_topology_as_tables_from_a_real_h200_pair() -> None:
    snapshot = json.loads((DATA / "h200x2-2026-11-30" / "topology-idle.json").read_text())
    view = topology_view(snapshot)
    assert view is not None and view.note == ""
    assert dict(view.host)["WSL2"] == "no" and dict(view.host)["driver"] == "580.159.04"
    assert [row[:3] for row in view.gpus] == [("0", "NVIDIA H200", "140.4 GiB")] * 1 + [
        ("1", "NVIDIA H200", "140.4 GiB")
    ]
    assert view.gpus[0][4] == "Gen5 x16 / Gen5 x16" and view.gpus[0][5] == "18 active links"
    assert view.p2p_header == ("", "GPU 0", "GPU 1")
    assert view.p2p[0][:2] == ("GPU 0", "self") and view.p2p[0][2].startswith("PHB; atomics ok")
    assert topology_view({"nvml_available": False, "error": "no libnvidia-ml"}).note == (
        "NVML not available: no libnvidia-ml"
    )
    assert topology_view(None) is None


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_overview_renders_in_a_headless_browser(campaign: Path, tmp_path: Path) -> None:
    """The overview, its chart, the history and a failed candidate's diagnosis, as drawn."""
    url = (campaign / "report.html").as_uri()
    (campaign / "report.html").write_text(render(build_run(campaign)))
    shot = tmp_path / "overview.png"
    drawn = _chromium(url, tmp_path / "profile-1", f"--screenshot={shot}")
    assert drawn.returncode == 0 and shot.stat().st_size > 20_000, drawn.stderr[-2000:]
    dom = _chromium(url, tmp_path / "profile-2", "--dump-dom").stdout
    top = dom.split(f'<section id="{FAST}">')[0]
    assert '<section id="overview">' in top and "decode rate by candidate" in top
    assert "TTFT by candidate" in top and "History across dated runs" in top
    assert "CUDA out of memory at load" in top and "identical answers 60%" in top
    assert f'lane after <a href="#{FAST}">{FAST}</a>' in top
    failed = dom.split(f'<section id="{SLOW}">')[1]
    assert "Diagnosed (oom" in failed and "Why it failed" in failed
    assert _page_errors(drawn.stderr) == []


def test_odd_shaped_files_read_as_not_recorded(campaign: Path) -> None:
    """Hand-edited artifacts of the wrong shape: '—' in the overview, never a traceback."""
    (campaign / FAST / "throughput_comparison.json").write_text('{"baseline": "x", "rows": 3}')
    (campaign / FAST / "throughput_summary.json").write_text("[1, 2]")
    _edit(campaign / FAST, lambda f: f["identity"].update(topology=[1], docker_host="h"))
    (fast, _) = summarize_run(campaign)
    assert (fast.tp1_ratio, fast.tp1_corroborated, fast.decode_ci) == (None, None, (None, None))
    assert fast.decode_tok_s == 60.5 and fast.host == ""
    assert "fast-one" in render(build_run(campaign))


# ---------------------------------------------------------------- a TP2 serve against its TP1

TP1, TP2 = "pair-tp1", "pair-tp2"
LEAD_CLAIMS = {  # gate 07's figures as the rebuilt gate names them, and one the overview leaves out
    "exact_share": 0.6, "max_abs_delta_logprob": 0.17, "tf_mean_abs_delta": 0.012,
    "tf_p99_abs_delta": 0.15, "tf_top1_agreement": 0.98, "tf_mean_kl": 0.0009,
    "self_p99_abs_delta": 0.004, "agrees_with_reference": True, "reference_candidate": TP1,
    "reference_run": NEW, "reference_source": "this run", "accuracy": 0.3,
    "accuracy_wilson_low": 0.17, "accuracy_wilson_high": 0.48, "accuracy_items": 30,
    "reference_accuracy": 0.33,
    "accuracy_judgement": "not judged: no power (n 30, reference accuracy 0.33, D 0.25)",
    "prompt_set_sha256": "ab" * 32,
}  # fmt: skip


def _names_tp1(finding: dict) -> None:
    finding["candidate_spec"]["reference"] = {"candidate": TP1}
    claims = [
        {"name": k, "value": v, "artifact": "agreement.jsonl"} for k, v in LEAD_CLAIMS.items()
    ]
    finding["gates"]["agreement"] = {"outcome": "passed", "claims": claims}


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    """A TP1 serve at ~60 tok/s and a TP2 serve naming it as its reference at ~30, one run."""
    root = tmp_path / "results"
    write_run(root, run_id=NEW, name=TP1, ttft=(0.2, 0.21, 0.19, 0.2, 0.2))
    run = write_run(root, run_id=NEW, name=TP2, ttft=(0.3, 0.31, 0.29, 0.3, 0.3),
                    rate=(30.0, 30.5, 29.5, 30.2, 30.1))  # fmt: skip
    _edit(run / TP2, _names_tp1)
    write_manifest(run, run_id=run.name, final=True)
    return run


def test_a_tp2_row_gives_its_ratios_to_its_tp1_reference_with_intervals(pair: Path) -> None:
    rows = {r.candidate: r for r in summarize_run(pair)}
    tp2 = rows[TP2]
    assert (tp2.reference, tp2.reference_where) == (TP1, f"this run, {NEW}")
    assert tp2.decode_ratio == pytest.approx(30.06 / 60.56, rel=1e-3)
    low, high = tp2.decode_ratio_ci
    assert low is not None and high is not None and low < tp2.decode_ratio < high < 0.52
    assert tp2.ttft_ratio == pytest.approx(1.5) and tp2.itl_ratio == pytest.approx(2.0, rel=0.02)
    assert rows[TP1].reference == "" and rows[TP1].decode_ratio is None


def test_agreement_and_accuracy_are_a_few_named_figures_never_a_dump(pair: Path) -> None:
    tp2 = {r.candidate: r for r in summarize_run(pair)}[TP2]
    assert "prompt_set_sha256" not in tp2.agreement  # claimed, but not one of the named figures
    row = {r.candidate: r for r in build_run(pair).overview.rows}[TP2]  # type: ignore[union-attr]
    assert row.agreement == (
        "agrees yes · identical answers 60% · max |Δ logprob| 0.17 · teacher-forced mean |Δ| "
        "0.012 · p99 |Δ| 0.15 · top-1 agreement 98% · mean KL 0.0009 · p99 |Δ| 0.004"
    )
    assert row.accuracy == (
        "accuracy 30% [17%, 48%] · items scored 30 · reference 33% · not judged: no power (n 30, "
        "reference accuracy 0.33, D 0.25)"
    )
    assert tp2.rests_on == (
        f"PASS: every gate passed or did not apply; gate 07 agrees with its reference {TP1} (this "
        "run); judged: closeness walk; not judged: accuracy (no power (n 30, reference accuracy "
        "0.33, D 0.25)); throughput judged against no floor."
    )


def test_an_accuracy_without_a_recorded_judgement_is_never_called_held(pair: Path) -> None:
    _edit(pair / TP2, lambda f: f["gates"]["agreement"].update(claims=[
        {"name": "accuracy", "value": 0.0, "artifact": "a"},
        {"name": "accuracy_holds", "value": True, "artifact": "a"},
    ]))  # fmt: skip
    row = {r.candidate: r for r in build_run(pair).overview.rows}[TP2]  # type: ignore[union-attr]
    assert row.accuracy == "accuracy 0% · no judgement recorded" and "holds" not in row.accuracy


def test_compare_csv_and_json_carry_the_same_ratios(
    pair: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tp2 = {r.candidate: r for r in summarize_run(pair)}[TP2]
    words = f"{tp2.decode_ratio:.3f}x [{tp2.decode_ratio_ci[0]:.3g}, {tp2.decode_ratio_ci[1]:.3g}]"
    assert main(["compare", str(pair)]) == 0
    table = capsys.readouterr().out
    assert words in table and f"{TP2} ({NEW}): PASS: every gate passed" in table
    assert "x_ref: ratio of the means of the two sets of samples" in table
    assert main(["compare", str(pair), "--format", "csv"]) == 0
    (csv_row,) = [
        r for r in csv.DictReader(io.StringIO(capsys.readouterr().out)) if r["candidate"] == TP2
    ]
    assert float(csv_row["decode_ratio"]) == pytest.approx(tp2.decode_ratio)
    assert float(csv_row["decode_ratio_low"]) == pytest.approx(tp2.decode_ratio_ci[0])
    assert csv_row["tf_p99_abs_delta"] == "0.15" and csv_row["reference"] == TP1
    assert main(["compare", str(pair), "--format", "json"]) == 0
    (json_row,) = [r for r in json.loads(capsys.readouterr().out) if r["candidate"] == TP2]
    assert json_row["decode_ratio"] == pytest.approx(tp2.decode_ratio)
    assert json_row["decode_ratio_ci"] == pytest.approx(list(tp2.decode_ratio_ci))
    assert json_row["agreement"]["tf_p99_abs_delta"] == 0.15
    assert json_row["ratio_method"].startswith("ratio of the means")


def test_a_reference_that_ran_only_earlier_is_named_with_its_run(pair: Path) -> None:
    later = write_run(pair.parent, run_id="20260201T000000Z-cccc", name=TP2,
                      rate=(30.0, 30.5, 29.5, 30.2, 30.1))  # fmt: skip
    _edit(later / TP2, _names_tp1)
    tp2 = summarize_run(later)[0]
    assert tp2.reference_where == f"run {NEW}" and tp2.decode_ratio == pytest.approx(
        0.4964, rel=1e-3
    )


def test_the_pair_renders_its_ratios_and_sentence(pair: Path) -> None:
    html = render(build_run(pair))
    top = html.split(f'<section id="{TP1}">')[0]
    assert f'vs <a href="#{TP1}">{TP1}</a>, this run, {NEW}' in top
    assert "0.496x [" in top and "<strong>rests on:</strong> PASS: every gate passed" in top
