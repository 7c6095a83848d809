"""Gate 01 — NCCL initialisation, a hard gate for TP > 1.

Pass means: (1) before the server starts, a stand-alone TP-rank ``torch.distributed`` all-reduce
run with the candidate's own NCCL/PyTorch environment (in its image, under the server's own run
arguments, for Docker candidates) completes in time; and (2) the server's start-up log shows
every rank reaching ``Init COMPLETE`` with nranks = TP, transports that match the settings (no
``via P2P/…`` when P2P is disabled, ``via SHM/…`` instead), the overrides acknowledged (``… set
by environment …``), and no failure the diagnosis engine names (cuMem CUDA 999, P2P across PCIe,
/dev/shm exhaustion, expandable-segments allocation, duplicate GPU, a hang read from the log's
timestamps; known harmless warnings never fail). An ``NCCL WARN`` no rule explains fails only
when the probe or a rank failed (then it is the lead); otherwise it is a notice, claimed as
``probe_notices`` / ``nccl_notices`` (server log) so the finding and the report show it. TP1
candidates: not applicable.

On the CPU (a TP>1 candidate with no GPU) the engine joins its ranks over gloo and NCCL prints
nothing: the probe runs the same orchestration over gloo, and the server log must show every TP
rank joining a world of TP ranks in the engine's own lines (``checks/ranks.py``).

Claims, each from its artifact: the ranks that came up (``Init COMPLETE`` with nranks = TP, or
the gloo assignment line) and the transports NCCL chose, from ``nccl_server_analysis.json``.

Closed loop: when the probe fails with a cause whose remedy lives in the probe's own launch (an
NCCL/PyTorch variable, the container's IPC namespace) and is not yet in force, the probe — never
the server — runs once more with the remedy applied. The gate still FAILs; the finding says
"diagnosed X; probe with remedy Y: passed / still fails", for the person fixing it.
Artifacts: ``nccl_probe.log``, ``nccl_probe_analysis.json``, ``nccl_probe_remedy.log``,
``nccl_probe_remedy_analysis.json``, ``nccl_server_analysis.json``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tp2qual.checks import nccl_gate
from tp2qual.checks.diagnosis import diagnose
from tp2qual.checks.remedies import applicable
from tp2qual.checks.verdict import Verdict
from tp2qual.gates import Candidate, CandidateRecord, Claimer, Server
from tp2qual.serving.diagnose import settings_in_force
from tp2qual.serving.probe import backend_of, run_probe

pytestmark = pytest.mark.nccl

PROBE, SERVER = "nccl_probe", "nccl_server_analysis.json"  # judged again by verify (rederive)


def _settings(candidate: Candidate, record: CandidateRecord) -> nccl_gate.NcclSettings:
    """The settings in force, as ``identity/candidate.json`` records them for verify."""
    found = settings_in_force(candidate, record.identity)
    return nccl_gate.NcclSettings(
        candidate.tp, backend_of(candidate), found["env"], found["container"], found["host"]
    )


def _probe(
    candidate: Candidate, record: CandidateRecord, gpus: dict[str, Any], name: str
) -> tuple[nccl_gate.ProbeLog, Verdict]:
    """Run the probe, keep its log and its analysis as ``<name>.log`` / ``<name>_analysis.json``;
    the verdict is judged on the log as kept (``checks.nccl_gate.judge_probe``, as verify does)."""
    uuids = [g["uuid"] for g in gpus.get("gpus") or [] if g.get("uuid")][: candidate.tp]
    timeout_s = float(candidate.gate("nccl")["probe_timeout_s"])
    run = run_probe(candidate, timeout_s, run_id=record.run_id, device_ids=uuids)
    text = nccl_gate.probe_log(run.argv, run.output, run.returncode, run.seconds)
    record.evidence.write_text(f"{name}.log", text)
    kept = nccl_gate.read_probe_log((record.evidence.root / f"{name}.log").read_text())
    verdict = nccl_gate.judge_probe(kept, _settings(candidate, record))
    record.evidence.write_json(
        f"{name}_analysis.json",
        {
            "ok": verdict.ok,
            "reason": verdict.reason,
            "returncode": run.returncode,
            "seconds": run.seconds,
            **verdict.measures,
        },
    )
    return kept, verdict


def _closed_loop(
    candidate: Candidate, record: CandidateRecord, gpus: dict[str, Any], output: str
) -> str:
    """Re-probe once with the diagnosed remedy; one sentence for the finding."""
    settings = settings_in_force(candidate, record.identity)
    remedy = applicable(diagnose(output, **settings), settings["env"], settings["container"])
    if remedy is None:
        return "no remedy the probe's own launch can try"
    fixed = candidate.with_launch_changes(
        remedy.env, remedy.container, f"closed-loop re-probe for {remedy.rule}"
    )
    _, again = _probe(fixed, record, gpus, "nccl_probe_remedy")
    outcome = "passed" if again.ok else "still fails"
    record.evidence.write_json(
        "nccl_closed_loop.json",
        {"diagnosed": remedy.rule, "remedy": remedy.words(), "reprobe": outcome},
    )
    return f"diagnosed {remedy.rule}; probe with remedy {remedy.words()}: {outcome}"


def test_probe_all_reduce(
    candidate: Candidate, record: CandidateRecord, gpu_snapshot: dict[str, Any], claim: Claimer
) -> None:
    run, verdict = _probe(candidate, record, gpu_snapshot, PROBE)
    if verdict.ok:
        if verdict.measures.get("report"):  # our probe's own report (not an operator's probe)
            claim("probe_backend", f"{PROBE}_analysis.json", op="field", path="report.backend")
            claim("probe_ranks_ok", f"{PROBE}_analysis.json", op="field", path="report.ranks_ok")
            claim("probe_cases", f"{PROBE}_analysis.json", op="field", path="report.cases")
        else:
            claim("probe_ranks_init_complete", f"{PROBE}_analysis.json", op="field",
                  path="ranks_complete")  # fmt: skip
        _claim_notices(claim, verdict, "probe_notices", f"{PROBE}_analysis.json")
        return
    loop = _closed_loop(candidate, record, gpu_snapshot, run.output)
    pytest.fail(
        f"NCCL probe rc={run.returncode} after {run.seconds}s ({loop}): "
        f"{verdict.reason or 'failed'}"
    )


def test_server_log_analysis(
    server: Server, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    lines = nccl_gate.whole_lines(server.log_text())  # verify reads the same first lines
    verdict = nccl_gate.judge_server_log(lines, _settings(candidate, record))
    record.evidence.write_json(
        SERVER,
        {"ok": verdict.ok, "reason": verdict.reason, "lines_read": len(lines), **verdict.measures},
    )
    assert verdict.ok, verdict.reason
    if backend_of(candidate) == "gloo":
        claim("ranks_joined", SERVER, op="field", path="ranks_joined")
        claim("world_sizes", SERVER, op="field", path="world_sizes")
    else:
        claim("ranks_init_complete", SERVER, op="field", path="ranks_complete")
        claim("transports", SERVER, op="field", path="transport_kinds")
        _claim_notices(claim, verdict, "nccl_notices", SERVER)


def _claim_notices(claim: Claimer, verdict: Verdict, name: str, artifact: str) -> None:
    """What the log warned of that fails nothing (an unexplained NCCL WARN, a known harmless
    one), claimed so the finding and the report show it beside the pass."""
    if verdict.measures.get("notices"):
        claim(name, artifact, op="field", path="notices")
