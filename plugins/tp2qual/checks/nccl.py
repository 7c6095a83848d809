"""Read NCCL_DEBUG=INFO output and decide whether NCCL initialised the way the campaign
baseline requires (docs/campaign.md).

NCCL initialisation is a hard gate for TP2: every rank must reach ``Init COMPLETE`` in a
communicator of TP size, over the shared-memory transport when P2P is disabled, with the
overrides acknowledged by NCCL itself ("set by environment"), and with no failure the diagnosis
engine (``checks.diagnosis``) names: cuMem under WSL2, P2P across PCIe, /dev/shm exhaustion, the
expandable allocator, hangs read from the log's timestamps, ... Harmless warnings it knows (the
RAS bind warning, vLLM's custom all-reduce notice) do not fail the gate, nor does an ``NCCL WARN``
no rule explains while the probe and every rank came up: that is a notice, shown with the
gate's figures; when the probe or a rank failed, it is a failure, the lead to follow.

The input may be one rank's log or a server log where several ranks' lines interleave behind
prefixes such as ``(TP0 pid=7)`` or ``[2026-11-29 15:57:18]``, so every pattern is searched
anywhere in a line. Pure: text in, frozen dataclasses out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from tp2qual.checks.diagnosis import INCOMPLETE, Diagnosis, diagnose
from tp2qual.checks.verdict import Verdict

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_INIT = re.compile(
    r"\brank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r"(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F]+)(?: commId (?P<comm>0x[0-9a-fA-F]+))?"
    r".*? - Init (?P<phase>START|COMPLETE)\b"
)
_CHANNEL = re.compile(
    r"\bChannel \d+(?:/\d+)? : \d+\[\w+\] -> \d+\[\w+\](?: \[\w+\])? via (?P<via>[^\r\n]+?)\s*$"
)
_ENV_ACK = re.compile(r"\b(?P<key>NCCL_[A-Z0-9_]+) set by environment to (?P<value>.*?)\.?\s*$")
_VERSION = re.compile(r"NCCL INFO NCCL version (?P<v>\d+\.\d+\.\d+\S*)")
_VERSION_ANY = re.compile(r"\bNCCL version (?P<v>\d+\.\d+\.\d+)")
_WARN = re.compile(r"NCCL WARN\b")


class InitComplete(NamedTuple):
    """One rank's ``Init COMPLETE`` line: the proof that its communicator came up."""

    rank: int
    nranks: int
    cuda_dev: int
    bus_id: str


@dataclass(frozen=True)
class Signature:
    """A recognised failure: what it means on this hardware and what to change."""

    code: str
    cause: str
    remedy: str
    line: str
    confidence: str = "medium"


@dataclass(frozen=True)
class NcclLog:
    """The facts one NCCL log (or several ranks' logs together) states."""

    version: str | None
    init_complete: tuple[InitComplete, ...]
    init_started: tuple[int, ...]
    pending: tuple[int, ...]
    transports: frozenset[str]
    env_acks: Mapping[str, str]
    warnings: tuple[str, ...]
    signatures: tuple[Signature, ...] = field(default=())
    diagnosis: Diagnosis | None = None

    @property
    def transport_kinds(self) -> frozenset[str]:
        """``SHM``, ``P2P``, ``NET``: the first part of each ``via`` string."""
        return frozenset(t.split("/", 1)[0].strip() for t in self.transports)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, stored as the gate's analysis artifact."""
        return {
            "version": self.version,
            "init_complete": [ic._asdict() for ic in self.init_complete],
            "init_started": list(self.init_started),
            "pending": list(self.pending),
            "transports": sorted(self.transports),
            "transport_kinds": sorted(self.transport_kinds),
            "env_acks": dict(sorted(self.env_acks.items())),
            "warnings": list(self.warnings),
            "signatures": [asdict(s) for s in self.signatures],
            "diagnosis": self.diagnosis.as_dict() if self.diagnosis else None,
            "notices": [f.line() for f in self.diagnosis.notices] if self.diagnosis else [],
        }


# What only the caller knows (the process ran out of time) cannot come from the log's
# diagnosis; these are the texts for that case.
TIMEOUT_SIGNATURES: dict[str, tuple[str, str]] = {
    "init_hang": (
        "the process timed out before every rank's Init COMPLETE (a rank never joined)",
        "check that every rank started and can reach the others, set NCCL_P2P_DISABLE=1 if"
        " P2P channels were set up, and give the container ipc=host or a large shm_size",
    ),
    "collective_hang": (
        "the process timed out after NCCL init (a collective hung)",
        "read the lagging rank's own log; NCCL_DEBUG_SUBSYS=INIT,COLL shows each rank's"
        " collectives",
    ),
    "p2p_failure": (
        "the hang came with P2P channels between the GPUs, which hang across PCIe on some"
        " platforms",
        "set NCCL_P2P_DISABLE=1 (NCCL falls back to SHM)",
    ),
}


# Diagnosis rules that already name a hang; a timeout adds nothing to them.
HANG_CODES = frozenset({"init_hang", "collective_hang", "missing_rank", "first_collective_hang"})


def _signature(code: str, line: str) -> Signature:
    cause, remedy = TIMEOUT_SIGNATURES[code]
    return Signature(code, cause, remedy, line.strip())


def clean_lines(text: str) -> list[str]:
    """Lines without ANSI colours or carriage returns (engines colour their log prefixes)."""
    return [_ANSI.sub("", line).rstrip("\r") for line in text.splitlines()]


def analyze(
    text: str,
    *,
    env: Mapping[str, str] | None = None,
    container: Mapping[str, Any] | None = None,
    host: Mapping[str, Any] | None = None,
    tp: int | None = None,
    failed: bool = False,
) -> NcclLog:
    """Parse NCCL INFO text and diagnose it (``checks.diagnosis``): ``env``, ``container`` and
    ``host`` are the settings in force and the host identity, so remedies fit them; ``failed``:
    the process that wrote it failed (exit status, timeout), which the text may not say."""
    lines = clean_lines(text)
    complete, started, pending = _inits(lines)
    transports = frozenset(m["via"] for m in _search_all(_CHANNEL, lines))
    acks = {m["key"]: m["value"].strip() for m in _search_all(_ENV_ACK, lines)}
    warnings = tuple(line.strip() for line in lines if _WARN.search(line))
    diagnosis = diagnose(text, tp=tp, env=env or {}, container=container, host=host, failed=failed)
    return NcclLog(
        version=_version(lines),
        init_complete=tuple(complete),
        init_started=tuple(sorted(started)),
        pending=tuple(sorted(pending)),
        transports=transports,
        env_acks=acks,
        warnings=warnings,
        signatures=signatures_of(diagnosis),
        diagnosis=diagnosis,
    )


def _search_all(pattern: re.Pattern[str], lines: Iterable[str]) -> list[re.Match[str]]:
    return [m for m in (pattern.search(line) for line in lines) if m]


def _version(lines: list[str]) -> str | None:
    for pattern in (_VERSION, _VERSION_ANY):
        found = _search_all(pattern, lines)
        if found:
            return found[0]["v"]
    return None


def _inits(lines: list[str]) -> tuple[list[InitComplete], set[int], set[int]]:
    """Completed inits (deduplicated, in order), ranks that started, and ranks still pending:
    a communicator (commId, rank) that started and never completed."""
    complete: list[InitComplete] = []
    started: set[int] = set()
    open_comms: set[tuple[str, int]] = set()
    for m in _search_all(_INIT, lines):
        rank, key = int(m["rank"]), (m["comm"] or f"nranks{m['nranks']}", int(m["rank"]))
        if m["phase"] == "START":
            started.add(rank)
            open_comms.add(key)
            continue
        open_comms.discard(key)
        ic = InitComplete(rank, int(m["nranks"]), int(m["dev"]), m["bus"])
        if ic not in complete:
            complete.append(ic)
    return complete, started, {rank for _, rank in open_comms}


def signatures_of(diagnosis: Diagnosis) -> tuple[Signature, ...]:
    """The diagnosis' failures, in the gate's older shape: one signature per rule."""
    return tuple(
        Signature(f.rule, f.cause, f.remedy, f.evidence[0][1] if f.evidence else "", f.confidence)
        for f in diagnosis.failures
    )


def check(
    log: NcclLog,
    *,
    tp_size: int,
    expect_env: Mapping[str, str],
    p2p_disabled: bool,
    timed_out: bool = False,
) -> Verdict:
    """Pass iff ranks 0..tp-1 completed init with nranks == tp, transports match the P2P setting,
    every expected override was acknowledged by NCCL, and no failure signature was found."""
    signatures = [*log.signatures, *_timeout_signatures(log, timed_out)]
    problems = [f"{s.code}: {s.cause} -> {s.remedy}" for s in signatures]
    if log.diagnosis and not timed_out:
        problems += [f.line() for f in log.diagnosis.findings if f.severity == INCOMPLETE]
    problems += _rank_problems(log, tp_size)
    problems += _transport_problems(log, tp_size, p2p_disabled)
    problems += _env_problems(log, expect_env)
    measures = _measures(log, signatures, tp_size, expect_env, p2p_disabled, timed_out)
    if problems:
        return Verdict.failed("; ".join(problems), **measures)
    return Verdict.passed(**measures)


def _timeout_signatures(log: NcclLog, timed_out: bool) -> list[Signature]:
    """The caller knows the process ran out of time; the log alone cannot say so."""
    codes = {s.code for s in log.signatures}
    if not timed_out or codes & HANG_CODES:
        return []
    if log.pending or not log.init_complete:
        return [_signature("init_hang", "process timed out before every rank's Init COMPLETE")]
    found = [_signature("collective_hang", "process timed out after Init COMPLETE")]
    if any(t.startswith("P2P") for t in log.transports) and "p2p_failure" not in codes:
        found.append(_signature("p2p_failure", "process timed out with P2P channels"))
    return found


def _rank_problems(log: NcclLog, tp_size: int) -> list[str]:
    problems = []
    for rank in range(tp_size):
        sizes = sorted({ic.nranks for ic in log.init_complete if ic.rank == rank})
        if tp_size in sizes:
            continue
        if sizes:
            problems.append(
                f"rank {rank} reached Init COMPLETE only with nranks {sizes}, expected {tp_size}"
                " -> launch the engine with tensor-parallel size equal to the TP size"
            )
        else:
            problems.append(
                f"rank {rank} never reached Init COMPLETE -> see the signatures, or if none, the"
                " rank did not start (check the TP size, device visibility and the rank's log)"
            )
    return problems


def _transport_problems(log: NcclLog, tp_size: int, p2p_disabled: bool) -> list[str]:
    if not p2p_disabled:
        return []
    problems = []
    p2p = sorted(t for t in log.transports if t.startswith("P2P"))
    if p2p:
        problems.append(
            f"P2P channels {p2p} although P2P is disabled -> NCCL_P2P_DISABLE=1 did not reach"
            " NCCL: set it in the engine's (container's) environment"
        )
    if tp_size > 1 and "SHM" not in log.transport_kinds:
        seen = sorted(log.transports) or "no channel lines (is NCCL_DEBUG=INFO set?)"
        problems.append(
            f"no SHM channel between ranks (seen: {seen}) -> keep the shared-memory fallback:"
            " run the container with ipc=host or a large shm_size, and leave NCCL_SHM_DISABLE unset"
        )
    return problems


def _norm(value: str) -> str:
    return value.strip().rstrip(".").strip()


def _env_problems(log: NcclLog, expect_env: Mapping[str, str]) -> list[str]:
    problems = []
    for key, want in sorted(expect_env.items()):
        got = log.env_acks.get(key)
        if got is None and (key, _norm(want)) == ("NCCL_P2P_DISABLE", "1"):
            # P2P off can also show up as NCCL_P2P_LEVEL=LOC (or 0): NCCL's own word for it.
            level = _norm(log.env_acks.get("NCCL_P2P_LEVEL", "")).upper()
            got = "1" if level in ("LOC", "0") else None
        if got is None:
            problems.append(
                f"{key}={want} not acknowledged ('{key} set by environment to {want}' missing)"
                " -> the setting did not reach NCCL: export it in the engine's environment"
            )
        elif _norm(got) != _norm(want):
            problems.append(f"{key} acknowledged as {got!r}, expected {want!r} -> set {key}={want}")
    return problems


def _measures(
    log: NcclLog,
    signatures: list[Signature],
    tp_size: int,
    expect_env: Mapping[str, str],
    p2p_disabled: bool,
    timed_out: bool,
) -> dict[str, Any]:
    facts = log.to_dict()
    facts["signatures"] = [asdict(s) for s in signatures]
    facts["ranks_complete"] = sorted({ic.rank for ic in log.init_complete if ic.nranks == tp_size})
    facts.update(
        tp_size=tp_size,
        expect_env=dict(expect_env),
        p2p_disabled=p2p_disabled,
        timed_out=timed_out,
    )
    return facts
