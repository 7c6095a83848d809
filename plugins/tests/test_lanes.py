"""Optional lanes run only after their baseline passed (in this run or in a recorded finding)."""

from __future__ import annotations

import json
import textwrap
import tomllib
from pathlib import Path

import pytest
from test_verify_pins import hub_snapshot

CANDIDATE = """
name = "{name}"
{lane}
[model]
repo = "org/model"
revision = "0123456789abcdef0123456789abcdef01234567"
served_name = "m"
hf_cache = "{cache}"
[engine]
kind = "vllm"
[launch]
kind = "process"
# sh -c takes the words after the script as $0 $1: a vLLM baseline names its --max-num-seqs 1
command = ["sh", "-c", "echo no engine here; exit 3", "--max-num-seqs", "1"]
readiness_timeout_s = 30
[serve]
tensor_parallel_size = 1
max_model_len = 4096
"""
LANE = '[lane]\nkind = "optional"\nafter = "base"\nwhy = "a lane after its baseline"'


@pytest.fixture
def setup(pytester: pytest.Pytester, tmp_path: Path) -> Path:
    cache = tmp_path / "hub"
    hub_snapshot(cache, "org/model", "0123456789abcdef" * 2 + "01234567")  # a pin that resolves
    cands = tmp_path / "cands"
    cands.mkdir()
    for name, lane in (("base", ""), ("base-lane", LANE)):
        text = CANDIDATE.format(name=name, lane=lane, cache=cache)
        (cands / f"{name}.toml").write_text(textwrap.dedent(text))
    root = Path(__file__).resolve().parents[2]
    # The gate markers, as the project registers them (the inner run has its own rootdir).
    ini = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {m}\n" for m in ini["markers"]))
    for gate in sorted((root / "tests").glob("test_0*.py")):
        pytester.makepyfile(**{gate.stem: gate.read_text()})
    return cands


def _findings(results: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in results.glob("*/*/finding.json")}


def run(pytester: pytest.Pytester, cands: Path, results: Path) -> dict[str, dict]:
    pytester.runpytest(f"--candidates={cands}", f"--results={results}", "-p", "no:cacheprovider")
    return _findings(results)


def test_lane_waits_for_a_failed_baseline(pytester, setup, tmp_path):
    findings = run(pytester, setup, tmp_path / "results")
    assert findings["base"]["verdict"] == "FAIL"
    lane = findings["base-lane"]["gates"]
    assert lane["preflight"]["outcome"] == "blocked"
    assert "optional lane: baseline 'base' has no PASS" in lane["preflight"]["reason"]
    assert all(g["outcome"] in ("blocked", "not_applicable") for g in lane.values())


def test_lane_runs_after_a_recorded_pass(pytester, setup, tmp_path):
    results = tmp_path / "results"
    recorded = results / "20260101T000000Z-0000" / "base"
    recorded.mkdir(parents=True)
    (recorded / "finding.json").write_text(json.dumps({"verdict": "PASS"}))
    findings = run(pytester, setup, results)
    lane = findings["base-lane"]["gates"]
    assert lane["preflight"]["outcome"] == "passed"  # it ran: no lane block
    assert lane["model_list"]["outcome"] == "failed"  # and met its own (absent) engine


def test_a_baseline_that_passed_earlier_in_this_run_opens_its_lane(tmp_path: Path) -> None:
    """Mid-session a finished candidate's finding still says INCOMPLETE (the session goes on);
    its lane must see the PASS it will have, not wait for a recorded one that does not exist."""
    from tp2qual.artifacts.claims import Claim
    from tp2qual.artifacts.finding import NOT_APPLICABLE, PASSED
    from tp2qual.candidate import GATES, Candidate
    from tp2qual.evidence.run import RunState
    from tp2qual.hooks.gating import baseline_passed

    spec = {"name": "base", "serve": {"tensor_parallel_size": 1}, "launch": {}, "model": {}}
    state = RunState(tmp_path / "results", [])
    record = state.record(Candidate(path=tmp_path / "base.toml", spec=spec))
    assert not baseline_passed(state, "base")  # nothing ran yet
    for gate in GATES:
        result = record.gates[gate]
        result.outcome = NOT_APPLICABLE if gate == "nccl" else PASSED
        result.claims = [] if gate == "nccl" else [Claim("c", 1, "a.json", sha256="x", bytes=1)]
    assert record.verdict() == "INCOMPLETE" and not record.finished
    assert baseline_passed(state, "base")
