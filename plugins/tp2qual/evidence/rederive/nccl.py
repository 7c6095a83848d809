"""Gate 01 (nccl): the probe's log and the server's log judged again, by the gate's own rules.

* the probe: ``nccl_probe.log`` read back (``checks.nccl_gate.read_probe_log``) and judged by
  ``checks.nccl_gate.judge_probe``; ``nccl_probe_analysis.json`` must be what that gives;
* the server log: the first ``lines_read`` lines of ``server.log`` (the log grows after the
  gate) judged by ``checks.nccl_gate.judge_server_log``; ``nccl_server_analysis.json`` must be
  what that gives.

The settings are those the run recorded at its start (``identity/candidate.json``: TP size,
backend, launch environment, container), the host the run's own records name
(``topology.json``, else ``identity/host.json``).
"""

from __future__ import annotations

from typing import Any

from tp2qual.checks import nccl_gate
from tp2qual.evidence.rederive.common import GateRun, Rederived, Unrederivable, as_recorded

PROBE_LOG, PROBE = "nccl_probe.log", "nccl_probe_analysis.json"
SERVER_LOG, SERVER = "server.log", "nccl_server_analysis.json"


def nccl(run: GateRun) -> Rederived:
    out = Rederived()
    settings = settings_of(run)
    _probe(run, settings, out)
    _server_log(run, settings, out)
    return out


def settings_of(run: GateRun) -> nccl_gate.NcclSettings:
    recorded = run.resolved.get("nccl")
    if not isinstance(recorded, dict) or "tp" not in run.resolved:
        raise Unrederivable(
            "identity/candidate.json records no gate-01 settings (TP size, backend, "
            "environment): the run predates them"
        )
    identity = {"topology": run.json("topology.json") or {}, "host": run.json("identity/host.json")}
    return nccl_gate.NcclSettings(
        tp=int(run.resolved["tp"]),
        backend=str(recorded.get("backend")),
        env=dict(recorded.get("env") or {}),
        container=recorded.get("container"),
        host=nccl_gate.host_settings(identity),
    )


def _probe(run: GateRun, settings: nccl_gate.NcclSettings, out: Rederived) -> None:
    path, recorded = run.root / PROBE_LOG, run.json(PROBE)
    if not path.is_file() or recorded is None:
        out.missing["test_probe_all_reduce"] = PROBE_LOG if not path.is_file() else PROBE
        return
    try:
        log = nccl_gate.read_probe_log(path.read_text(errors="replace"))
    except ValueError as exc:
        raise Unrederivable(f"{PROBE_LOG}: {exc}") from None
    verdict = nccl_gate.judge_probe(log, settings)
    out.judged("test_probe_all_reduce", verdict, PROBE_LOG)
    new: dict[str, Any] = {"ok": verdict.ok, "reason": verdict.reason, **verdict.measures}
    new = as_recorded(new | {"returncode": log.returncode})
    out.compare(PROBE_LOG, PROBE, recorded, **new)
    out.rows[PROBE] = [{**recorded, **new}]


def _server_log(run: GateRun, settings: nccl_gate.NcclSettings, out: Rederived) -> None:
    path, recorded = run.root / SERVER_LOG, run.json(SERVER)
    if recorded is None or not path.is_file():
        out.missing["test_server_log_analysis"] = SERVER if recorded is None else SERVER_LOG
        return
    if "lines_read" not in recorded:
        raise Unrederivable(f"{SERVER} does not say how many lines of {SERVER_LOG} it read")
    read = int(recorded["lines_read"])
    lines = nccl_gate.whole_lines(path.read_text(errors="replace"))[:read]
    verdict = nccl_gate.judge_server_log(lines, settings)
    out.judged("test_server_log_analysis", verdict, f"{SERVER_LOG} (first {read} lines)")
    new = as_recorded({"ok": verdict.ok, "reason": verdict.reason, **verdict.measures})
    out.compare(f"{SERVER_LOG} lines 1-{read}", SERVER, recorded, **new)
    out.rows[SERVER] = [{**recorded, **new}]
