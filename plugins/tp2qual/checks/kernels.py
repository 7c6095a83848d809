"""Which kernels the engine chose, in its own log lines, and where that differs from what the
candidate asked for by flag.

A record, not a check: nothing here fails a gate. The lines are the engine module's
``kernel_lines`` (``tp2qual.engines``, each with its source file and version); a log with none
of them says so plainly (``NONE_LOGGED``), since an engine may choose its default silently
(vLLM's CPU attention). Pure: no pytest, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tp2qual.engines import Engine

NONE_LOGGED = "the engine's log names no backend choice"
ARTIFACT = "kernels_chosen.json"  # gate 02's record (tests/test_02_model_list.py)


@dataclass(frozen=True)
class Choice:
    kind: str  # the engine module's KernelLine.kind: attention, moe, gemm, all_reduce …
    value: str
    line: int  # 1-based line number in the log
    text: str  # the line as the engine wrote it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def chosen_kernels(engine: Engine, lines: Sequence[str]) -> tuple[Choice, ...]:
    """Each backend choice the log names, at its first line (ranks repeat the same line)."""
    patterns = [(k.kind, re.compile(k.pattern)) for k in engine.kernel_lines]
    seen: set[tuple[str, str]] = set()
    found: list[Choice] = []
    for number, text in enumerate(lines, start=1):
        for kind, pattern in patterns:
            match = pattern.search(text)
            if match is None:
                continue
            value = match.group("value").strip()
            if (kind, value) not in seen:
                seen.add((kind, value))
                found.append(Choice(kind, value, number, text.rstrip()))
    return tuple(found)


def summary(choices: Iterable[Choice]) -> str:
    """One line for the finding: ``kind=value (server.log:N)``, or ``NONE_LOGGED``."""
    parts = [f"{c.kind}={c.value} (server.log:{c.line})" for c in choices]
    return "; ".join(parts) if parts else NONE_LOGGED


def asked_backends(engine: Engine, argv: Sequence[str]) -> dict[str, str]:
    """The backend flags the launch gives (``--flag v`` or ``--flag=v``): flag -> value."""
    args = [str(a) for a in argv]
    asked: dict[str, str] = {}
    for flag, after in zip(args, [*args[1:], ""], strict=False):
        name, eq, inline = flag.partition("=")
        if name in engine.backend_flags:
            asked[name] = inline if eq else after
    return asked


def _norm(value: str) -> str:
    return re.sub(r"[^a-z0-9]", "", value.lower())


def asked_vs_chosen(
    engine: Engine, asked: Mapping[str, str], choices: Sequence[Choice]
) -> tuple[str, ...]:
    """A notice for each flag whose backend the log does not show chosen: another one chosen,
    or none named (case, '-' and '_' aside: vLLM logs ``FLASHINFER_CUTLASS`` for
    ``flashinfer_cutlass``)."""
    notices = []
    for flag, value in asked.items():
        kind = engine.backend_flags[flag]
        chosen = [c for c in choices if c.kind == kind]
        if not chosen:
            notices.append(f"{flag} {value} asked; the engine's log names no {kind} choice")
        elif all(_norm(c.value) != _norm(value) for c in chosen):
            said = ", ".join(f"{c.value} (server.log:{c.line})" for c in chosen)
            notices.append(f"{flag} {value} asked; the engine chose {said}")
    return tuple(notices)


def record(engine: Engine, lines: Sequence[str], argv: Sequence[str]) -> dict[str, Any]:
    """What the evidence keeps (``kernels_chosen.json``): the lines read, each choice with its
    line, the summary the finding claims, and the asked-vs-chosen notices."""
    choices = chosen_kernels(engine, lines)
    asked = asked_backends(engine, argv)
    return {
        "lines_read": len(lines),
        "chosen": [c.as_dict() for c in choices],
        "summary": summary(choices),
        "asked": asked,
        "notices": list(asked_vs_chosen(engine, asked, choices)),
    }
