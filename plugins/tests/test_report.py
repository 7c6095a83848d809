"""The HTML evidence report: its data model, its template, and a real headless browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest
from test_verify import NAME, edit_finding, rehash, write_run

from tp2qual.evidence.charts import sample_chart
from tp2qual.evidence.report import build_run, render
from tp2qual.evidence.report_model import fmt, ratio
from tp2qual.evidence.verify import verify_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
QUIET_CHROMIUM = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,2000",
    "--enable-logging=stderr",
    "--v=0",
]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "results")


def test_pure_helpers() -> None:
    assert (fmt(None), fmt(True), fmt(0.123456)) == ("—", "true", "0.1235")
    assert fmt({"b": 1}) == '{"b": 1}'
    assert fmt("x" * 500, width=10) == "x" * 9 + "…"
    assert (ratio(3.0, 2.0), ratio(1, 0), ratio(None, 2)) == ("1.500x", "—", "—")
    svg = sample_chart("t", "s", [(0, 1.0), (1, 3.0), (2, 2.0)], width=200, height=120)
    dots = [dict(e.attrs) for e in svg.elements if e.tag == "circle"]
    xs, ys = [float(d["cx"]) for d in dots], [float(d["cy"]) for d in dots]
    assert xs == sorted(xs) and xs[0] < xs[-1] <= 200
    assert ys[1] < ys[2] < ys[0]  # SVG y grows downwards: the largest value sits highest
    one = sample_chart("t", "s", [(0, 5.0)])  # one sample, flat series: no division by zero
    assert float(dict(next(e for e in one.elements if e.tag == "circle").attrs)["cy"]) > 0


def test_the_model_holds_verdict_gates_identity_and_performance(run_dir: Path) -> None:
    view = build_run(run_dir, verify_run(run_dir))
    assert view.verify_ok and view.run_id == run_dir.name
    assert build_run(run_dir).verify_ok is None  # a mid-run refresh does not re-hash
    (cand,) = view.candidates
    assert (cand.name, cand.verdict, cand.failed_gate) == (NAME, "PASS", "")
    outcomes = {g.name: g.outcome for g in cand.gates}
    assert outcomes["nccl"] == "not_applicable" and outcomes["throughput"] == "passed"
    facts = {f.label: f.value for f in cand.identity}
    assert facts["engine version"] == "0.0.test"
    assert facts["image digest"] == "sha256:" + "ab" * 32
    assert facts["model SHA"].startswith("0123456789abcdef")
    assert cand.launch_flags[:3] == ("python", "-m", "tiny")
    assert [s.figure for s in cand.stats] == ["TTFT", "TPOT", "decode rate", "end-to-end"]
    dots = [[e for e in p.svg.elements if e.tag == "circle"] for p in cand.plots]
    assert [len(d) for d in dots] == [5, 5]  # the warm-up is not plotted
    assert {a.label for a in cand.artifacts} >= {"finding.json", "server.log", "launch.json"}
    assert all(a.sha256 for a in cand.artifacts)
    assert cand.comparison is None


def test_a_previous_run_of_the_candidate_is_compared(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_run(root, run_id="20251201T000000Z-0000", rate=(30.0, 30.5, 29.5, 30.2, 30.1))
    write_run(root, run_id="20251215T000000Z-1111", name="other-candidate")
    newer = write_run(root, run_id="20260101T000000Z-aaaa")
    (cand,) = build_run(newer).candidates
    assert cand.comparison is not None
    assert cand.comparison.run_id == "20251201T000000Z-0000"
    rows = {r.figure: r for r in cand.comparison.rows}
    decode = rows["decode rate median (tokens/s)"]
    assert (decode.now, decode.before, decode.ratio) == ("60.5", "30.1", "2.010x")
    html = (newer / "report.html").read_text()
    assert "../20251201T000000Z-0000/report.html" in html and "2.010x" in html


def test_a_failure_shows_its_cause_and_log_excerpt(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "results", capital="Lyon.")  # the raw answer shows it

    def fail(finding: dict) -> None:
        gate = finding["gates"]["deterministic"]
        gate.update(
            outcome="failed",
            reason="capital: expected 'Paris' <b>in</b> answer",
            excerpt=["ERROR <script>alert(1)</script> CUDA error"],
        )
        for later in ("repetition", "tool_calls", "capacity", "throughput"):
            finding["gates"][later].update(
                outcome="blocked", reason="blocked by deterministic", claims=[]
            )
        finding.update(verdict="FAIL", failed_gate="deterministic")

    edit_finding(run_dir, fail)
    rehash(run_dir)
    assert verify_run(run_dir).ok
    html = render(build_run(run_dir))
    assert "<script>" not in html  # autoescaped
    assert "ERROR &lt;script&gt;alert(1)&lt;/script&gt; CUDA error" in html
    assert "Why it failed" in html and "blocked by deterministic" in html
    assert "expected &#39;Paris&#39; &lt;b&gt;in&lt;/b&gt; answer" in html


def test_the_report_is_self_contained_and_its_links_resolve(run_dir: Path) -> None:
    html = (run_dir / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html)
    assert "<link" not in html and "<script" not in html and "@import" not in html
    targets = {unquote(h) for h in re.findall(r'href="([^"#][^"]*)"', html)}
    targets = {t for t in targets if not t.startswith("data:")}  # the overview's CSV and JSON
    assert {f"{NAME}/finding.json", f"{NAME}/throughput_samples.jsonl"} <= targets
    assert all((run_dir / t).is_file() for t in targets), targets


def test_the_cli_regenerates_the_report(run_dir: Path) -> None:
    (run_dir / "report.html").unlink()
    command = [sys.executable, "-m", "tp2qual", "report", str(run_dir.parent / "latest")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    assert Path(done.stdout.strip()) == run_dir / "report.html"
    assert "PASS" in (run_dir / "report.html").read_text()


def _chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, *QUIET_CHROMIUM, f"--user-data-dir={profile}", *extra, url],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _page_errors(stderr: str) -> list[str]:
    """Console messages, script errors, blocked or missing resources; not D-Bus noise."""
    pattern = re.compile(r"CONSOLE|Uncaught|Refused to|ERR_FILE_NOT_FOUND|Content Security Policy")
    return [line for line in stderr.splitlines() if pattern.search(line)]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_report_renders_in_a_headless_browser(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_run(root, run_id="20251201T000000Z-0000", rate=(30.0, 30.5, 29.5, 30.2, 30.1))
    run_dir = write_run(root)
    url = (run_dir / "report.html").as_uri()
    shot = run_dir / "report.png"
    drawn = _chromium(url, tmp_path / "profile-1", f"--screenshot={shot}")
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a blank page is a few kB
    dom = _chromium(url, tmp_path / "profile-2", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f'<section id="{NAME}">' in dom.stdout and "<svg" in dom.stdout
    assert "decode rate per sample" in dom.stdout and "2.010x" in dom.stdout
    assert '<section id="overview">' in dom.stdout and "decode rate by candidate" in dom.stdout
    assert "20251201T000000Z-0000" in dom.stdout.split(f'<section id="{NAME}">')[0]  # history
    assert _page_errors(drawn.stderr + dom.stderr) == []
    rehash(run_dir)  # the screenshot is an artifact of the run now
    assert verify_run(run_dir).ok
    assert json.loads((run_dir / "manifest.json").read_text())["files"]["report.png"]


def test_sampling_shown_is_what_the_gate_artifact_states(tmp_path: Path) -> None:
    from tp2qual.evidence.report import stated_sampling

    body = {"model": "m", "messages": [], "temperature": 0.0, "repeat_penalty": 1.1, "seed": 7}
    lines = [
        {"request": {"method": "GET", "path": "/v1/models", "body": None}},
        {"request": {"method": "POST", "path": "/v1/chat/completions", "body": body}},
    ]
    (tmp_path / "repetition.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    shown = stated_sampling(tmp_path, "repetition")
    assert shown == "temperature=0.0, repeat_penalty=1.1, seed=7"
    assert stated_sampling(tmp_path, "capacity") == ""
