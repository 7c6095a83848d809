"""The closed loop of gate 01: a probe failure whose remedy lives in the probe's own launch is
tried once more with the remedy applied, and the finding says whether that cured it. The
candidate still FAILs: the re-run is evidence for the person fixing it, never a silent retry.

No GPU here, so the probe is ``replayprobe.py`` (``gates.nccl.probe_command``): it replays real
probe logs — a failure from the diagnosis corpus, and the passing 2xH200 capture when the
remedy's variable is set — through the real gate, diagnosis and evidence code. The same loop on
real GPUs, run by hand, is in plugins/tests/data/diagnosis/closed-loop-h200/.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_faults import run_inner, smollm2_spec, write_candidate

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data"
PROBE = Path(__file__).with_name("replayprobe.py")
PASSING = DATA / "h200x2-2026-11-30" / "probe-2rank-campaign-settings.log"

# case -> (variable provoked, its value, failing log, variable=value that cures, outcome)
CASES = {
    "cured": (
        "NCCL_CUMEM_ENABLE", "1", "nccl-1653-cuda999-alloc-h.log", "NCCL_CUMEM_ENABLE=0", "passed",
    ),
    "not-cured": (
        "NCCL_P2P_DISABLE", "0", "sglang-6246-p2p-invalid-argument.log", "NEVER_SET=1",
        "still fails",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_remedy_is_tried_on_the_probe_and_reported(case: str, tmp_path: Path) -> None:
    variable, value, failing, cure, outcome = CASES[case]
    name = f"closed-loop-{case}"
    spec = smollm2_spec(name)
    spec["serve"]["tensor_parallel_size"] = 2
    spec["launch"]["env_overrides"] = {
        variable: {"value": value, "reason": "provoked for the closed-loop self-test"}
    }
    spec["gates"]["nccl"] = {
        "probe_timeout_s": 30,
        "backend": "nccl",  # the replayed logs are NCCL's, though this host has no GPU
        "probe_command": [
            sys.executable, str(PROBE), "--fail", str(DATA / "diagnosis" / failing),
            "--pass", str(PASSING), "--cured-by", cure, "--nprocs", "{nprocs}",
        ],
    }  # fmt: skip
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, [name], "-m", "preflight or nccl")
    finding = inner.finding(name)
    gate = finding["gates"]["nccl"]
    assert (finding["verdict"], finding["failed_gate"]) == ("FAIL", "nccl"), inner.output()
    assert "probe with remedy" in gate["reason"] and f": {outcome})" in gate["reason"], gate
    loop = json.loads((inner.evidence(name) / "nccl_closed_loop.json").read_text())
    assert loop["reprobe"] == outcome, loop
    first = (inner.evidence(name) / "nccl_probe.log").read_text()
    second = (inner.evidence(name) / "nccl_probe_remedy.log").read_text()
    assert first != second or outcome == "still fails"
    remedied = json.loads((inner.evidence(name) / "nccl_probe_remedy_analysis.json").read_text())
    assert remedied["ok"] is (outcome == "passed"), remedied["reason"]
    assert finding["gates"]["nccl"]["diagnosis"]["log"] == "nccl_probe.log"
    report = (inner.run_dir / "report.html").read_text()
    assert "NCCL probe, and again with the remedy" in report and outcome in report
