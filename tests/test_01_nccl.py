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

from tp2qual.checks import nccl, probe_result, ranks
from tp2qual.checks.diagnosis import diagnose
from tp2qual.checks.remedies import applicable
from tp2qual.checks.verdict import Verdict
from tp2qual.gates import Candidate, CandidateRecord, Claimer, Server
from tp2qual.serving.diagnose import settings_in_force
from tp2qual.serving.probe import ProbeRun, backend_of, run_probe

pytestmark = pytest.mark.nccl

ACKNOWLEDGED = ("NCCL_P2P_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE")


def _judge(
    candidate: Candidate,
    record: CandidateRecord,
    text: str,
    *,
    timed_out: bool,
    failed: bool = False,
) -> Verdict:
    settings = settings_in_force(candidate, record.identity)
    env = settings["env"]
    log = nccl.analyze(
        text,
        env=env,
        container=settings["container"],
        host=settings["host"],
        tp=candidate.tp,
        failed=failed or timed_out,
    )
    return nccl.check(
        log,
        tp_size=candidate.tp,
        timed_out=timed_out,
        expect_env={k: env[k] for k in ACKNOWLEDGED if k in env},
        p2p_disabled=env.get("NCCL_P2P_DISABLE") == "1",
    )


def _judge_probe(candidate: Candidate, record: CandidateRecord, run: ProbeRun) -> Verdict:
    """Every rank summed every case exactly (the probe's report line, kept under ``report``)
    and, on NCCL, the log shows a healthy init. On gloo the report is the only witness, so a
    probe without one did not run to its end; on NCCL a probe of the operator's own
    (``probe_command``) may print none, and the log and its exit status judge it."""
    try:
        report = probe_result.parse_report(run.output)
        summed = probe_result.check_report(report, tp=candidate.tp, backend=backend_of(candidate))
        facts: dict[str, Any] = {"report": report.to_dict()}
    except probe_result.ProbeReportError as exc:
        summed, facts = Verdict.failed(str(exc)), {"report": None}
    if backend_of(candidate) == "gloo":
        return Verdict(summed.ok, summed.reason, facts)
    failed = run.returncode != 0 or not summed.ok
    log = _judge(candidate, record, run.output, timed_out=run.timed_out, failed=failed)
    if facts["report"] is None:
        return Verdict(log.ok, log.reason, {**log.measures, **facts})
    reason = log.reason if not log.ok else summed.reason
    return Verdict(log.ok and summed.ok, reason, {**log.measures, **facts})


def _probe(
    candidate: Candidate, record: CandidateRecord, gpus: dict[str, Any], name: str
) -> tuple[ProbeRun, Verdict]:
    """Run the probe, keep its log and its analysis as ``<name>.log`` / ``<name>_analysis.json``."""
    uuids = [g["uuid"] for g in gpus.get("gpus") or [] if g.get("uuid")][: candidate.tp]
    timeout_s = float(candidate.gate("nccl")["probe_timeout_s"])
    run = run_probe(candidate, timeout_s, run_id=record.run_id, device_ids=uuids)
    record.evidence.write_text(
        f"{name}.log",
        f"$ {' '.join(run.argv)}\n{run.output}\nrc={run.returncode} seconds={run.seconds}\n",
    )
    verdict = _judge_probe(candidate, record, run)
    record.evidence.write_json(
        f"{name}_analysis.json",
        {
            "ok": run.returncode == 0 and verdict.ok,
            "reason": verdict.reason,
            "returncode": run.returncode,
            "seconds": run.seconds,
            **verdict.measures,
        },
    )
    return run, verdict


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
    run, again = _probe(fixed, record, gpus, "nccl_probe_remedy")
    outcome = "passed" if run.returncode == 0 and again.ok else "still fails"
    record.evidence.write_json(
        "nccl_closed_loop.json",
        {"diagnosed": remedy.rule, "remedy": remedy.words(), "reprobe": outcome},
    )
    return f"diagnosed {remedy.rule}; probe with remedy {remedy.words()}: {outcome}"


def test_probe_all_reduce(
    candidate: Candidate, record: CandidateRecord, gpu_snapshot: dict[str, Any], claim: Claimer
) -> None:
    run, verdict = _probe(candidate, record, gpu_snapshot, "nccl_probe")
    if run.returncode == 0 and verdict.ok:
        if verdict.measures.get("report"):  # our probe's own report (not an operator's probe)
            claim("probe_backend", "nccl_probe_analysis.json", op="field", path="report.backend")
            claim("probe_ranks_ok", "nccl_probe_analysis.json", op="field", path="report.ranks_ok")
            claim("probe_cases", "nccl_probe_analysis.json", op="field", path="report.cases")
        else:
            claim("probe_ranks_init_complete", "nccl_probe_analysis.json", op="field",
                  path="ranks_complete")  # fmt: skip
        _claim_notices(claim, verdict, "probe_notices", "nccl_probe_analysis.json")
        return
    loop = _closed_loop(candidate, record, gpu_snapshot, run.output)
    pytest.fail(
        f"NCCL probe rc={run.returncode} after {run.seconds}s ({loop}): "
        f"{verdict.reason or 'failed'}"
    )


def test_server_log_analysis(
    server: Server, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    if backend_of(candidate) == "gloo":
        log = ranks.analyze(server.log_text())
        verdict = ranks.check(log, tp_size=candidate.tp, backend="gloo")
    else:
        verdict = _judge(candidate, record, server.log_text(), timed_out=False)
    record.evidence.write_json(
        "nccl_server_analysis.json",
        {"ok": verdict.ok, "reason": verdict.reason, **verdict.measures},
    )
    assert verdict.ok, verdict.reason
    if backend_of(candidate) == "gloo":
        claim("ranks_joined", "nccl_server_analysis.json", op="field", path="ranks_joined")
        claim("world_sizes", "nccl_server_analysis.json", op="field", path="world_sizes")
    else:
        claim("ranks_init_complete", "nccl_server_analysis.json", op="field", path="ranks_complete")
        claim("transports", "nccl_server_analysis.json", op="field", path="transport_kinds")
        _claim_notices(claim, verdict, "nccl_notices", "nccl_server_analysis.json")


def _claim_notices(claim: Claimer, verdict: Verdict, name: str, artifact: str) -> None:
    """What the log warned of that fails nothing (an unexplained NCCL WARN, a known harmless
    one), claimed so the finding and the report show it beside the pass."""
    if verdict.measures.get("notices"):
        claim(name, artifact, op="field", path="notices")
