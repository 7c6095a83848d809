"""What the diagnosis engine returns (``Finding``, ``Diagnosis``) and what its rules read:
the log's lines with their timestamps, and the settings in force (``Context``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tp2qual.engines import all_engines

FAILURE, INCOMPLETE, NOTICE = "failure", "incomplete", "notice"
HANG_AFTER_S = 30.0

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# --- result types ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem (or notice): what happened, the lines that show it, what to do."""

    rule: str
    cause: str
    evidence: tuple[tuple[int, str], ...]
    remedy: str
    confidence: str  # high | medium | low
    severity: str = FAILURE  # failure | incomplete | notice

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "cause": self.cause,
            "evidence": [{"line": n, "text": t} for n, t in self.evidence],
            "remedy": self.remedy,
            "confidence": self.confidence,
        }

    def line(self) -> str:
        """One terminal line: ``rule: cause -> remedy``."""
        return f"{self.rule}: {self.cause} -> {self.remedy}"


@dataclass(frozen=True)
class Diagnosis:
    """The verdict over all findings: ``failed`` if any failure, else ``incomplete`` if the log
    stops before it can show success or failure, else ``ok``."""

    verdict: str
    findings: tuple[Finding, ...] = ()
    settings: Mapping[str, str] = field(default_factory=dict)

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == FAILURE)

    @property
    def notices(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == NOTICE)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "findings": [f.as_dict() for f in self.findings],
            "settings": dict(sorted(self.settings.items())),
        }

    def headline(self) -> str:
        """The verdict in words: "failed, cause not recognised" when no rule named the cause."""
        first = self.failures[0] if self.failures else None
        if first is not None and first.rule == "unrecognised_failure":
            return "failed, cause not recognised"
        return self.verdict

    def summary(self) -> str:
        """One line for a terminal or a finding's reason: the failures, else the verdict."""
        named = self.failures or tuple(f for f in self.findings if f.severity == INCOMPLETE)
        return "; ".join(f.line() for f in named) or self.verdict


# --- the log, and the settings in force -----------------------------------------------------


@dataclass(frozen=True)
class Line:
    no: int  # 1-based
    text: str
    ts: datetime | None  # own or inherited from the last stamped line


@dataclass(frozen=True)
class Context:
    lines: tuple[Line, ...]
    settings: Mapping[str, str]  # KEY -> value in force
    sources: Mapping[str, str]  # KEY -> "environment" | "log line N"
    container: Mapping[str, Any] | None
    wsl2: str | None  # how WSL2 is known, or None
    tp: int | None
    at_info: bool  # the log already carries NCCL INFO lines
    # Seconds the log had been silent after its last line when it was read (0: not known). A
    # rank that waits for one that never joins often prints nothing more: this is that stall.
    quiet_s: float = 0.0
    # The engine's own settings (``--max-model-len`` as ``max_model_len``) and where each was
    # read (engine_args.py), and the engine version the log printed.
    args: Mapping[str, str] = field(default_factory=dict)
    arg_sources: Mapping[str, str] = field(default_factory=dict)
    version: str | None = None

    def grep(self, pattern: re.Pattern[str], *, nccl: bool = False) -> list[Line]:
        return [
            ln for ln in self.lines if pattern.search(ln.text) and (not nccl or is_nccl(ln.text))
        ]

    def source(self, key: str) -> str:
        return f"{key}={self.settings[key]} ({self.sources[key]})"

    def arg(self, key: str) -> str | None:
        return self.args.get(key)

    def arg_source(self, key: str) -> str:
        flag = "--" + key.replace("_", "-")
        return f"{flag} {self.args[key]} ({self.arg_sources[key]})"


_SETTING = re.compile(
    r"(?<![\w-])(?P<key>NCCL_[A-Z0-9_]+|PYTORCH_(?:CUDA_)?ALLOC_CONF|CUDA_VISIBLE_DEVICES"
    r"|HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE|VLLM_[A-Z0-9_]+|SGLANG_[A-Z0-9_]+|TRITON_[A-Z0-9_]+"
    r"|CUDA_LAUNCH_BLOCKING|TORCH_CUDA_ARCH_LIST)=(?P<value>[^\s'\"`;)]+)"
)
_ACK = re.compile(r"\b(?P<key>NCCL_[A-Z0-9_]+) set by environment to (?P<value>\S+?)\.?\s*$")
_ADVICE = re.compile(
    r"try setting|to silence|you can (?:either )?(?:set|increase)|consider passing", re.I
)
_IPC_HOST = re.compile(r"--ipc[= ]host\b")
_SHM_SIZE = re.compile(r"--shm-size[= ](?P<v>\S+)")
_GPUS = re.compile(r"--gpus[= ](?P<v>\S+)")
_WSL_STATED = re.compile(r"microsoft-standard-WSL2|\bWSL is detected\b|\bWSL2\b")
_NCCL_LINE = re.compile(r"\bNCCL\b|nccl|\w+\.(?:cc|h):\d+")


def is_nccl(text: str) -> bool:
    return _NCCL_LINE.search(text) is not None


# Month, day, hour, minute, second: ISO's, then each engine's own logger's (``Engine.log_stamp``;
# the log's engine is not known), then glog's.
_TS_FORMATS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b\d{4}-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})"), "iso"),
    *((re.compile(e.log_stamp), e.kind) for e in all_engines() if e.log_stamp),
    (re.compile(r"\[[EWI](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})"), "glog"),
)


def timestamp_of(text: str) -> datetime | None:
    # Year dropped on purpose: engines mix formats with and without one in the same log.
    for pattern, _ in _TS_FORMATS:
        m = pattern.search(text)
        if m:
            mo, d, h, mi, s = (int(g) for g in m.groups())
            try:
                return datetime(2000, mo, d, h, mi, s)
            except ValueError:
                return None
    return None


def lines_of(text: str) -> tuple[Line, ...]:
    out, last = [], None
    for no, raw in enumerate(text.splitlines(), 1):
        clean = _ANSI.sub("", raw).rstrip("\r")
        last = timestamp_of(clean) or last
        out.append(Line(no, clean, last))
    return tuple(out)


def settings_of(
    lines: tuple[Line, ...], env: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The environment passed in wins; the log fills in what it states itself."""
    settings = {k: str(v) for k, v in env.items()}
    sources = dict.fromkeys(settings, "environment")
    for ln in lines:
        found = [(m["key"], m["value"]) for m in _ACK.finditer(ln.text)]
        if not _ADVICE.search(ln.text) and "set by environment" not in ln.text:
            found += [(m["key"], m["value"]) for m in _SETTING.finditer(ln.text)]
        for key, value in found:
            if key not in settings:
                settings[key], sources[key] = value.rstrip(".,"), f"log line {ln.no}"
    return settings, sources


def container_of(
    lines: tuple[Line, ...], container: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    stated: dict[str, Any] = {}
    for ln in lines:
        if _IPC_HOST.search(ln.text):
            stated.setdefault("ipc_host", True)
        for key, pattern in (("shm_size", _SHM_SIZE), ("gpus", _GPUS)):
            m = pattern.search(ln.text)
            if m:
                stated.setdefault(key, m["v"])
    if container is None and not stated:
        return None
    return {**stated, **(container or {})}


def wsl2_of(lines: tuple[Line, ...], host: Mapping[str, Any] | None) -> str | None:
    host = host or {}
    if host.get("wsl2") or any("wsl" in str(v).lower() for v in host.values() if v):
        return "the host identity says WSL2"
    for ln in lines:
        if _WSL_STATED.search(ln.text):
            return f"the log states WSL (line {ln.no})"
    return None


def is_set(ctx: Context, key: str, *values: str) -> bool:
    got = ctx.settings.get(key)
    return got is not None and (not values or got.strip().lower() in values)


def p2p_off(ctx: Context) -> str | None:
    """How P2P is known to be off, if it is: NCCL_P2P_DISABLE=1 or NCCL_P2P_LEVEL=LOC/0."""
    if is_set(ctx, "NCCL_P2P_DISABLE", "1"):
        return ctx.source("NCCL_P2P_DISABLE")
    if is_set(ctx, "NCCL_P2P_LEVEL", "loc", "0"):
        return ctx.source("NCCL_P2P_LEVEL")
    return None


def evidence_of(lines: list[Line], limit: int = 6) -> tuple[tuple[int, str], ...]:
    return tuple((ln.no, ln.text.strip()) for ln in lines[:limit])


Rule = Callable[[Context], list[Finding]]


_SITE = re.compile(r"(?P<site>[\w/]+\.(?:cc|h|cu|cpp):\d+)")


def call_site(line: Line) -> str:
    """The source file:line a log line names (NCCL's own ``transport/p2p.cc:275``), if any."""
    m = _SITE.search(line.text)
    return m["site"] if m else "an NCCL call"
