"""Gate 01 sees a misplaced chunk: the real probe, two gloo ranks in the vLLM CPU engine's torch,
run by the real gate in an inner run.

The probe is the suite's own file (``{probe}``), given the engine venv's Python through
``gates.nccl.probe_command`` (the embedded llama.cpp candidate's own Python has no torch). With
``--corrupt 1:swap`` (a self-test flag: rank 1's summed buffer has its first two chunks
exchanged before the check) gate 01 FAILs naming rank 1 and the first wrong element; the same
run without it passes gate 01's probe. A constant fill, the probe's old one, summed the same
either way (test_nccl_probe.py shows why).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults import run_inner, smollm2_spec, write_candidate
from test_nccl_probe import engine_python

pytestmark = pytest.mark.slow


def _spec(name: str, corrupt: str | None) -> dict:
    spec = smollm2_spec(name)
    spec["serve"]["tensor_parallel_size"] = 2
    command = [str(engine_python()), "{probe}", "--nprocs", "{nprocs}", "--timeout", "{timeout}",
               "--backend", "{backend}", "--sizes", "4K,1M", "--dtypes", "bf16,fp32"]  # fmt: skip
    spec["gates"]["nccl"] = {
        "probe_timeout_s": 120,
        "backend": "gloo",
        "probe_command": [*command, *(["--corrupt", corrupt] if corrupt else [])],
    }
    return spec


@pytest.mark.parametrize("corrupt", [None, "1:swap"], ids=["intact", "chunk-swapped"])
def test_a_corrupted_chunk_fails_gate_01(corrupt: str | None, tmp_path: Path) -> None:
    name = f"probe-{'intact' if corrupt is None else 'corrupted'}"
    write_candidate(tmp_path / "candidates", _spec(name, corrupt))
    inner = run_inner(tmp_path, [name], "-m", "nccl", "-k", f"{name} and test_probe_all_reduce")
    finding = inner.finding(name)
    gate = finding["gates"]["nccl"]
    analysis = json.loads((inner.evidence(name) / "nccl_probe_analysis.json").read_text())
    if corrupt is None:
        assert gate["outcome"] == "passed", (gate, inner.output())
        assert all(c["ok"] for c in analysis["report"]["cases"]), analysis
        return
    assert (finding["verdict"], finding["failed_gate"]) == ("FAIL", "nccl"), inner.output()
    assert gate["outcome"] == "failed", gate
    assert "rank 1: " in gate["reason"] and "elements wrong" in gate["reason"], gate["reason"]
    bad = [c for c in analysis["report"]["cases"] if not c["ok"]]
    assert len(bad) == 4 and all(c["wrong"][0]["rank"] == 1 for c in bad), bad  # every case
    assert all(c["wrong"][0]["first"] == 0 for c in bad), bad  # the swapped chunks lead
    log = (inner.evidence(name) / "nccl_probe.log").read_text()
    assert "corrupting the summed buffer: swap" in log and "(injected)" in log
    checked = subprocess.run(  # the honest FAIL re-derives from the probe's log
        [sys.executable, "-m", "tp2qual", "verify", str(inner.run_dir)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
