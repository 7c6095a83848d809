"""``pytest -k NAME`` reaches NAME's reference on a fresh results folder, as the README's TP2
command (``pytest -k smollm2-135m-vllm-tp2``) must reach ``smollm2-135m-vllm``.

Proved with cheap copies of the embedded candidate (SmolLM2-135M on llama.cpp, CPU), which obey
the same rule as the vLLM pair: a candidate whose ``[reference]`` the keyword deselects, with no
PASS of it under ``--results``. One inner run of ``-k <candidate>`` only:

* one terminal line says the reference was brought into the run, and why;
* the reference runs first, every gate, and its server is stopped (port free, process gone)
  before the candidate's starts — one model's serve at a time;
* both PASS: the candidate's gate 07 was judged against the reference's transcript of this run
  (not "not judged: no PASS"), and every finding records the suite's commit;
* once that PASS is in the results folder, the same keyword brings nothing: collected alone, the
  candidate is judged against the recorded PASS.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_faults import (
    MAIN,
    alive,
    assert_nothing_left,
    gate_of_nodeid,
    run_inner,
    smollm2_spec,
    write_candidate,
)

from tp2qual.candidate import GATES
from tp2qual.evidence.suite import suite_identity

# long_run: 201 s on one core (ci7); CI's first slow lane takes it, beside whose end the SGLang
# candidates otherwise ran last (ci7: lanes 1,774 s and 1,487 s + SGLang).
pytestmark = [pytest.mark.slow, pytest.mark.long_run]

REF, CAND = "brought-ref", "brought-judged"


def _spec(name: str) -> dict[str, Any]:
    spec = smollm2_spec(name)
    del spec["gates"]["not_applicable"]["agreement"]  # the gate this run is about
    spec["gates"]["agreement"].update(prompts=3, accuracy_items=2, accuracy_max_tokens=48,
                                      near_bound_fill=0.3)  # fmt: skip
    spec["gates"]["tool_calls"]["modes"] = ["named"]
    return spec


def _stamp(evidence: Path, rel: str) -> int:
    return (evidence / rel).stat().st_mtime_ns


def test_k_name_brings_its_reference_into_a_fresh_run(tmp_path: Path) -> None:
    folder = tmp_path / "candidates"
    write_candidate(folder, _spec(REF))
    judged = _spec(CAND)
    judged["reference"] = {"candidate": REF, "why": "the same bytes on the same engine"}
    write_candidate(folder, judged)
    inner = run_inner(tmp_path, [CAND])  # -k brought-judged: the reference is not selected
    assert inner.proc.returncode == 0, inner.output()

    said = [line for line in inner.proc.stdout.splitlines() if "brought into this run" in line]
    assert said == [
        f"tp2qual: {REF} brought into this run: {CAND} is judged against it (gate 07) and has "
        f"no PASS in this run or an earlier dated run under {inner.results}"
    ], inner.output()

    # The reference first, every gate; then the candidate, every gate.
    setups = [e for e in inner.events if e["when"] == "setup"]
    owners = [CAND if f"[{CAND}" in e["nodeid"] else REF for e in setups]
    assert owners == sorted(owners, key=[REF, CAND].index), owners
    for name in (REF, CAND):
        ran = {gate_of_nodeid(e["nodeid"]) for e in setups if f"[{name}" in e["nodeid"]}
        assert ran == set(GATES), (name, ran)

    # One server at a time: the reference's stopped before the candidate's started.
    ref, cand = inner.evidence(REF), inner.evidence(CAND)
    assert _stamp(ref, "teardown.json") < _stamp(cand, "launch.json")
    teardown = json.loads((ref / "teardown.json").read_text())
    assert teardown["port_free"], teardown
    assert not alive(json.loads((ref / "launch.json").read_text())["pid"])

    for name in (REF, CAND):
        finding = inner.finding(name)
        assert finding["verdict"] == "PASS", (name, inner.output())
        assert finding["identity"]["suite"]["commit"] == suite_identity()["commit"]
        assert_nothing_left(inner, name)
    agreement = inner.finding(CAND)["gates"]["agreement"]
    assert agreement["outcome"] == "passed", agreement
    summary = _last(cand / "agreement_transcript.jsonl")
    assert (summary["reference_candidate"], summary["reference_source"]) == (REF, "this run")

    # Now a PASS of it is recorded: the same keyword brings nothing.
    again = _collect(tmp_path, CAND)
    assert "brought into this run" not in again.stdout, again.stdout
    collected = re.findall(r"\[(brought-[a-z]+)", again.stdout)
    assert set(collected) == {CAND}, again.stdout


def _last(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text().splitlines()[-1])


def _collect(tmp_path: Path, keyword: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(MAIN / "pyproject.toml"),
         "--rootdir", str(MAIN), str(MAIN / "tests"), "--co", "-q",
         f"--candidates={tmp_path / 'candidates'}", f"--results={tmp_path / 'results'}",
         "-k", keyword, "-p", "no:cacheprovider"],
        cwd=MAIN, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
