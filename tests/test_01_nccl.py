"""Gate 01 — NCCL initialisation, a hard gate for TP > 1.

Pass means: (1) before the server starts, a stand-alone TP-rank ``torch.distributed`` all-reduce
run with the candidate's own NCCL/PyTorch environment (in its image for Docker candidates)
completes in time; and (2) the server's start-up log shows every rank reaching ``Init COMPLETE``
with nranks = TP, transports that match the settings (no ``via P2P/…`` when P2P is disabled,
``via SHM/…`` instead), the overrides acknowledged (``… set by environment …``), and no known
failure signature (cuMem CUDA 999, P2P across PCIe, expandable-segments allocation, duplicate
GPU, hang after Init START, NCCL WARN). TP1 candidates: not applicable.
Artifacts: ``nccl_probe.log``, ``nccl_probe_analysis.json``, ``nccl_server_analysis.json``.
"""

from __future__ import annotations

import pytest

from tp2qual.checks import nccl
from tp2qual.serving.probe import run_probe

pytestmark = pytest.mark.nccl

ACKNOWLEDGED = ("NCCL_P2P_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE")


def _judge(candidate, text: str, *, timed_out: bool):
    env = candidate.env()
    log = nccl.analyze(text, env=env)
    return nccl.check(
        log,
        tp_size=candidate.tp,
        timed_out=timed_out,
        expect_env={k: env[k] for k in ACKNOWLEDGED if k in env},
        p2p_disabled=env.get("NCCL_P2P_DISABLE") == "1",
    )


def test_probe_all_reduce(candidate, record):
    timeout_s = float(candidate.gate("nccl")["probe_timeout_s"])
    run = run_probe(candidate, timeout_s)
    record.evidence.write_text(
        "nccl_probe.log",
        f"$ {' '.join(run.argv)}\n{run.output}\nrc={run.returncode} seconds={run.seconds}\n",
    )
    verdict = _judge(candidate, run.output, timed_out=run.timed_out)
    record.evidence.write_json(
        "nccl_probe_analysis.json",
        {
            "ok": verdict.ok,
            "reason": verdict.reason,
            "returncode": run.returncode,
            "seconds": run.seconds,
            **verdict.measures,
        },
    )
    assert run.returncode == 0 and verdict.ok, (
        f"NCCL probe rc={run.returncode} after {run.seconds}s: {verdict.reason or 'failed'}"
    )


def test_server_log_analysis(server, candidate, record):
    text = server.log_text()
    verdict = _judge(candidate, text, timed_out=False)
    record.evidence.write_json(
        "nccl_server_analysis.json",
        {"ok": verdict.ok, "reason": verdict.reason, **verdict.measures},
    )
    assert verdict.ok, verdict.reason
