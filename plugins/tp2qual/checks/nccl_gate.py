"""Gate 01's decisions, each a pure function of the logs the gate keeps.

The gate and ``verify`` call the same two functions on the same text: ``judge_probe`` on the
probe's output as ``nccl_probe.log`` holds it (its report line, and on NCCL its INFO lines and
exit status), ``judge_server_log`` on the whole lines of ``server.log`` the gate read. The
settings are those in force for the candidate (``NcclSettings``: TP size, backend, launch
environment, container, host), recorded at the run's start in ``identity/candidate.json`` so
``verify`` judges with the run's, never today's.

``probe_log``/``read_probe_log`` are the one format of ``nccl_probe.log``: the command, the
probe's own output, its exit status and seconds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tp2qual.checks import nccl, probe_result, ranks
from tp2qual.checks.verdict import Verdict

ACKNOWLEDGED = ("NCCL_P2P_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE")
TIMED_OUT = (124, 137)  # the probe's own timeout, and a kill at the grace
_STATUS = re.compile(r"\nrc=(?P<rc>-?\d+) seconds=(?P<s>[\d.]+)\n?$")


@dataclass(frozen=True)
class NcclSettings:
    """What gate 01 judges the logs with."""

    tp: int
    backend: str  # "nccl" on GPUs, "gloo" on the CPU
    env: Mapping[str, str] = field(default_factory=dict)
    container: Mapping[str, Any] | None = None
    host: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ProbeLog:
    command: str
    output: str
    returncode: int
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode in TIMED_OUT


def probe_log(argv: list[str], output: str, returncode: int, seconds: float) -> str:
    return f"$ {' '.join(argv)}\n{output}\nrc={returncode} seconds={seconds}\n"


def read_probe_log(text: str) -> ProbeLog:
    """``nccl_probe.log`` read back; ValueError when it is not in ``probe_log``'s shape."""
    head, sep, rest = text.partition("\n")
    status = _STATUS.search(rest)
    if not (head.startswith("$ ") and sep and status):
        raise ValueError("not a probe log: no '$ command' first line or 'rc=… seconds=…' last")
    output = rest[: status.start()]
    return ProbeLog(head[2:], output, int(status["rc"]), float(status["s"]))


def serving_host(identity: Mapping[str, Any]) -> dict[str, Any]:
    """Facts of the machine that ran the server: the GPU snapshot's host (read there by a probe
    container when the run spreads over Docker hosts), else the machine running pytest."""
    read_there = (identity.get("topology") or {}).get("host") or {}
    return dict(read_there if read_there.get("wsl2") is not None else identity.get("host") or {})


def host_settings(identity: Mapping[str, Any]) -> dict[str, Any] | None:
    host = serving_host(identity)
    return {"wsl2": bool(host.get("wsl2"))} if "wsl2" in host else None


def judge_nccl_text(
    text: str, settings: NcclSettings, *, timed_out: bool, failed: bool = False
) -> Verdict:
    """NCCL INFO text: every rank ``Init COMPLETE`` at nranks = TP, transports as the P2P
    setting asks, overrides acknowledged, no failure signature (``checks.nccl``)."""
    env = dict(settings.env)
    log = nccl.analyze(
        text,
        env=env,
        container=settings.container,
        host=settings.host,
        tp=settings.tp,
        failed=failed or timed_out,
    )
    return nccl.check(
        log,
        tp_size=settings.tp,
        timed_out=timed_out,
        expect_env={k: env[k] for k in ACKNOWLEDGED if k in env},
        p2p_disabled=env.get("NCCL_P2P_DISABLE") == "1",
    )


def judge_probe(run: ProbeLog, settings: NcclSettings) -> Verdict:
    """Every rank summed every case exactly (the probe's report line, kept under ``report``)
    and, on NCCL, the log shows a healthy init; a probe that exited non-zero fails. On gloo the
    report is the only witness, so a probe without one did not run to its end; on NCCL a probe
    of the operator's own (``probe_command``) may print none, and the log and its exit status
    judge it."""
    try:
        report = probe_result.parse_report(run.output)
        summed = probe_result.check_report(report, tp=settings.tp, backend=settings.backend)
        facts: dict[str, Any] = {"report": report.to_dict()}
    except probe_result.ProbeReportError as exc:
        summed, facts = Verdict.failed(str(exc)), {"report": None}
    if settings.backend == "gloo":
        verdict = Verdict(summed.ok, summed.reason, facts)
    else:
        # The process failed: a non-zero exit, or a report whose sums are wrong. A probe of the
        # operator's own that prints no report has not failed for that: its log judges it.
        failed = run.returncode != 0 or (facts["report"] is not None and not summed.ok)
        log = judge_nccl_text(run.output, settings, timed_out=run.timed_out, failed=failed)
        reason = log.reason if not log.ok or facts["report"] is None else summed.reason
        ok = log.ok and (summed.ok or facts["report"] is None)
        verdict = Verdict(ok, reason, {**log.measures, **facts})
    if verdict.ok and run.returncode != 0:
        return Verdict(False, f"the probe exited with status {run.returncode}", verdict.measures)
    return verdict


def judge_server_log(lines: list[str], settings: NcclSettings) -> Verdict:
    """The server's start-up log: on gloo every TP rank joined a world of TP ranks in the
    engine's own lines (``checks.ranks``), on NCCL ``judge_nccl_text``."""
    text = "".join(line + "\n" for line in lines)
    if settings.backend == "gloo":
        return ranks.check(ranks.analyze(text), tp_size=settings.tp, backend="gloo")
    return judge_nccl_text(text, settings, timed_out=False)


def whole_lines(text: str) -> list[str]:
    """The complete lines of a log still being written (the last, unfinished one left out), so
    the gate and ``verify`` read the same lines."""
    return text[: text.rfind("\n") + 1].splitlines()
