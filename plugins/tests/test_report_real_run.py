"""The overview read from a real run's files: SmolLM2-135M on llama.cpp (CPU), qualified on
2026-12-01 (``python -m pytest -k smollm2-135m-local``, PASS, run 20261201T220453Z-b0e8).

Its finding and throughput artifacts are in ``data/smollm2-local-2026-12-01``; a campaign is
made of copies of them (one failed where its model list did, one an optional lane), beside an
earlier run of the same candidate, and every figure shown must be the one those files hold.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tp2qual.__main__ import main
from tp2qual.evidence.overview import summarize_run
from tp2qual.evidence.report import build_run, render

REAL = Path(__file__).parent / "data" / "smollm2-local-2026-12-01"
NAME, LANE, BROKEN = "smollm2-135m-local", "smollm2-lane", "smollm2-broken"
OLD, NEW = "20261130T120000Z-0001", "20261201T220453Z-b0e8"


def _claim(gate: str, name: str) -> float:
    finding = json.loads((REAL / "finding.json").read_text())
    return next(c["value"] for c in finding["gates"][gate]["claims"] if c["name"] == name)


def _copy(run: Path, name: str, change: Callable[[dict], None] | None = None) -> Path:
    folder = run / name
    shutil.copytree(REAL, folder)
    finding = json.loads((folder / "finding.json").read_text())
    finding.update(candidate=name, run_id=run.name)
    if change:
        change(finding)
    (folder / "finding.json").write_text(json.dumps(finding, indent=2))
    return folder


def _broken(finding: dict) -> None:
    finding["gates"]["model_list"].update(outcome="failed", reason="HTTP 503 from /v1/models")
    for gate in ("deterministic", "repetition", "tool_calls", "capacity", "throughput"):
        finding["gates"][gate].update(outcome="blocked", reason="blocked by model_list", claims=[])
    finding.update(verdict="FAIL", failed_gate="model_list")


def _lane(finding: dict) -> None:
    finding["candidate_spec"]["lane"] = {"after": NAME, "kind": "optional"}


@pytest.fixture
def campaign(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    _copy(root / OLD, NAME)
    run = root / NEW
    _copy(run, NAME)
    _copy(run, LANE, _lane)
    _copy(run, BROKEN, _broken)
    return run


def test_the_overview_shows_what_the_real_files_hold(campaign: Path) -> None:
    rows = {r.candidate: r for r in summarize_run(campaign)}
    real = rows[NAME]
    summary = json.loads((REAL / "throughput_summary.json").read_text())
    assert real.verdict == "PASS" and real.gate == ""
    assert real.decode_tok_s == _claim("throughput", "decode_tok_s_median")
    assert real.ttft_s == _claim("throughput", "ttft_s_median")
    low, high = summary["decode_tok_s"]["ci95_low"], summary["decode_tok_s"]["ci95_high"]
    assert real.decode_ci == (low, high)
    assert real.roofline_share is None  # roofline.json: not computed on a CPU host
    assert real.tp1_corroborated is None  # the candidate names no TP1 baseline
    finding = json.loads((REAL / "finding.json").read_text())
    assert real.wall_s == pytest.approx(sum(g["seconds"] for g in finding["gates"].values()))
    assert real.host == json.loads((REAL / "topology.json").read_text())["host"]["hostname"]
    assert (rows[BROKEN].gate, rows[BROKEN].cause) == ("model_list", "HTTP 503 from /v1/models")
    assert rows[LANE].lane_after == NAME


def test_the_report_of_the_campaign_opens_with_overview_chart_and_history(campaign: Path) -> None:
    view = build_run(campaign)
    assert view.overview is not None
    assert [r.candidate for r in view.overview.rows] == [NAME, BROKEN, LANE]  # by folder name
    assert [len(c.svg.elements) > 10 for c in view.overview.charts] == [True, True]
    (hist,) = [h for h in view.overview.history if h.candidate == NAME]
    assert [r.run_id for r in hist.rows] == [NEW, OLD]
    (cand,) = [c for c in view.candidates if c.name == NAME]
    floors = [e.text for p in cand.plots for e in p.svg.elements if e.text.startswith("floor")]
    assert floors == ["floor: median ≥ 5 tokens/s"]  # the candidate's own floor, drawn in
    assert cand.topology is not None and cand.topology.note.startswith("NVML not available")
    html = render(view)
    assert html.index('id="overview"') < html.index(f'<section id="{NAME}">')
    assert f"{_claim('throughput', 'decode_tok_s_median'):.4g}" in html


def test_compare_prints_the_real_figures(
    campaign: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(campaign)]) == 0
    lines = capsys.readouterr().out.splitlines()
    decode = f"{_claim('throughput', 'decode_tok_s_median'):.4g}"
    mine = [cells for line in lines if len(cells := line.split()) > 4 and cells[1] == NAME]
    assert [cells[0] for cells in mine] == [NEW, OLD]
    assert all(cells[4] == decode for cells in mine)
    assert main(["compare", str(campaign), "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("run_id,candidate,verdict,gate,decode_tok_s,decode_ci95_low")
