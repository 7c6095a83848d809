"""verify of a gate cut short (issue 40): a healthy serve on a loaded machine FAILed gate 07 with
a request timeout part-way through its prompts, so its transcript has no summary line. Built on
a copy of the real embedded run (``data/smollm2-135m-local-run``) cut the way such a run leaves
it: the exchanges up to the one that timed out (recorded with its error, as ``Api.request``
does), the transcript lines written before it, the finding FAILed at agreement.

That honest FAIL verifies OK with the cut named; the failed check is never re-derived as
passed; a passed gate whose summary is cut off is still caught.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tp2qual.__main__ import main
from tp2qual.artifacts.layout import FINDING, write_manifest
from tp2qual.evidence.verify import verify_run

DATA = Path(__file__).with_name("data") / "smollm2-135m-local-run"
NAME = "smollm2-135m-local"
CUT = "decode:long-form"  # the fourth prompt's decode: three prompts were asked in full
TIMEOUT = {"error": "ReadTimeout('timed out')", "timeout_s": 41.0}
REASON = (
    "decode:long-form: no answer within 41 s (budget for 256 tokens at the 6.5 tok/s floor and "
    "a 97-character prompt); server alive; last log line: llama_perf_context_print: load time"
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (recorded,) = [p for p in DATA.iterdir() if p.is_dir()]
    return Path(shutil.copytree(recorded, tmp_path / "results" / recorded.name, symlinks=True))


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def cut_short(run_dir: Path) -> None:
    """Gate 07 as a request timeout at ``CUT`` leaves it, and the finding FAILed there."""
    cand = run_dir / NAME
    exchanges = _rows(cand / "agreement.jsonl")
    at = next(i for i, r in enumerate(exchanges) if r["tag"] == CUT)
    timed_out = {k: exchanges[at][k] for k in ("tag", "at", "request")} | TIMEOUT
    _write(cand / "agreement.jsonl", [*exchanges[:at], timed_out])
    lines = _rows(cand / "agreement_transcript.jsonl")
    _write(cand / "agreement_transcript.jsonl", lines[: next(
        i for i, r in enumerate(lines) if r.get("tag") == CUT)])  # fmt: skip
    finding = json.loads((cand / FINDING).read_text())
    finding["gates"]["agreement"].update(
        outcome="failed", reason=REASON, claims=[], skipped={},
        tests={"test_agrees_with_reference": "failed"},
    )  # fmt: skip
    finding["gates"]["throughput"].update(
        outcome="blocked", reason="blocked by agreement", claims=[], tests={}
    )
    finding.update(verdict="FAIL", failed_gate="agreement")
    (cand / FINDING).write_text(json.dumps(finding, indent=2, sort_keys=True) + "\n")
    write_manifest(run_dir, run_id=run_dir.name, final=True, interrupted=False)


def test_an_honest_fail_cut_short_verifies_with_the_cut_named(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut_short(run_dir)
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert result.rechecked["agreement"] == 10  # three prompts in full, and the one cut
    (cut,) = result.cuts
    assert cut.detail == (
        f"agreement cut short at {CUT}, exchange 10 of 10: no answer within 41 s "
        f"({TIMEOUT['error']})"
    )
    assert main(["verify", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"CUT       {NAME}/{FINDING}: agreement cut short at {CUT}" in out
    assert f"{NAME}: agreement cut short at {CUT}" in out.splitlines()[-1]  # the summary


def test_the_failed_check_is_never_rederived_as_passed(run_dir: Path) -> None:
    """Its recorded outcome turned to passed is caught: the raw records give failed."""
    cut_short(run_dir)
    path = run_dir / NAME / FINDING
    finding = json.loads(path.read_text())
    finding["gates"]["agreement"]["tests"]["test_agrees_with_reference"] = "passed"
    path.write_text(json.dumps(finding, indent=2, sort_keys=True) + "\n")
    write_manifest(run_dir, run_id=run_dir.name, final=True, interrupted=False)
    found = [p.detail for p in verify_run(run_dir).problems if p.kind == "rederive"]
    assert any("recorded passed" in d and "gives failed (cut short at" in d for d in found), found


def test_a_passed_gate_whose_summary_is_cut_off_is_caught(run_dir: Path) -> None:
    transcript = run_dir / NAME / "agreement_transcript.jsonl"
    _write(transcript, [r for r in _rows(transcript) if r.get("kind") != "summary"])
    write_manifest(run_dir, run_id=run_dir.name, final=True, interrupted=False)
    result = verify_run(run_dir)
    kinds = {p.kind for p in result.problems}
    assert {"rederive", "unsupported"} <= kinds, [p.line() for p in result.problems]
    assert any("agreement passed, but the raw exchanges fail" in p.detail
               and "cut short after item:arith-009" in p.detail
               for p in result.problems)  # fmt: skip
