"""A failed start is never "ok". The error lines a failure leaves (a Python exception, an engine
ERROR line, a fatal signal, a non-zero exit), which of them is the earliest actionable one (the
first in time, from the first rank that failed, past the secondary cascade every TP start-up
prints after it), and the finding when no rule names the cause: it says so and quotes that line,
its number and its rank. It never guesses a cause of another kind."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime

from tp2qual.checks.diagnosis.model import Context, Finding, Line

# An exception as Python prints it ("ValueError: …", "torch.AcceleratorError: …"), anywhere
# after the engine's own prefix ("(APIServer pid=1) ERROR 07-29 10:26:04 [x.py:1] ", "[rank0]: ").
_EXCEPTION = re.compile(
    r"(?:^|[\s:\]\)>|])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|OutOfResources)(?::\s|:$)"
)
# Other lines that are a failure in themselves: a fatal signal, a C++ abort, a CUDA error printed
# bare (llama.cpp, torch's asynchronous report), argparse's refusal, pydantic's "Value error",
# a child's non-zero exit.
_FATAL = re.compile(
    r"Fatal Python error: |\*\*\* SIG[A-Z]+ received|terminate called after throwing"
    r"|Segmentation fault|core dumped|\bCUDA (?:driver )?error: |: error: (?:argument|unrecognized)"
    r"|\bValue error, |crashed with exit code -?\d+|exit(?:ed)? (?:with )?(?:code|status) -?[1-9]"
    r"|returned non-zero exit status|\bKilled\b\s+\S*(?:python|vllm|sglang)|error loading model"
)
# The engine's ERROR level (vLLM, SGLang, Python logging, glog's E0303 12:00:00).
_ERROR_LEVEL = re.compile(r"(?<![\w=])ERROR(?![\w=])|\bE\d{4} \d\d:\d\d:\d\d|hit an exception")
_QUIET_LEVEL = re.compile(r"(?<![\w=])(?:WARNING|INFO|DEBUG)(?![\w=])")
# What a TP start-up prints after the first failure: wrappers that point back at it, workers
# torn down by the one that failed, the front end noticing. Never the lead while a primary exists.
_SECONDARY = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|Worker proc .{0,40}?died"
    r"|WorkerProc (?:failed to start|hit an exception)|Error raised in subprocess"
    r"|returned non-zero exit status|check the stack trace above|See root cause above"
    r"|Received sigquit from a child|Dumping requests before crash|DistBackendError|TCPStore"
    r"|CancelledError|KeyboardInterrupt|SystemExit|Exception in worker \S+ while processing"
    r"|Traceback \(most recent call last\)|During handling of the above exception"
    r"|The above exception was the direct cause"
)
_DEATH = re.compile(r"Worker proc .{0,40}?died|crashed with exit code|died unexpectedly")
# Lines of a traceback body an engine re-prints under its ERROR prefix: never a lead.
_FRAME = re.compile(r"\]\s{2,}\S|\]\s*\^+\s*$|\]\s*File \"|^\s+(?:File \"|\^+\s*$)")
_RANKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\[rank(\d+)\]"), "rank {}"),
    (re.compile(r"(?<![A-Za-z])TP(\d+)\b"), "TP{}"),
    (re.compile(r"\brank[= ](\d+)\b"), "rank {}"),
    (re.compile(r"\bscheduler_(\d+)\b"), "scheduler {}"),
    (re.compile(r"\((\w+) pid=(\d+)\)"), "{} pid {}"),
)
_NO_TIME = datetime(1970, 1, 1)


@dataclass(frozen=True)
class ErrorLine:
    line: Line
    rank: str | None
    primary: bool  # an exception, fatal signal or CUDA error that is not part of the cascade

    def when(self) -> tuple[datetime, int]:
        return when(self.line)

    def where(self) -> str:
        return f"line {self.line.no}" + (f" ({self.rank})" if self.rank else "")


def when(line: Line) -> tuple[datetime, int]:
    """Time order: the line's time stamp (own or inherited), then its place in the log."""
    return (line.ts or _NO_TIME, line.no)


def rank_of(text: str) -> str | None:
    for pattern, label in _RANKS:
        m = pattern.search(text)
        if m:
            return label.format(*m.groups())
    return None


def error_lines(ctx: Context) -> list[ErrorLine]:
    """Every line that says something failed, in time order (then line order)."""
    out = []
    for ln in ctx.lines:
        text = ln.text
        level = _ERROR_LEVEL.search(text)
        if not level and _QUIET_LEVEL.search(text):
            continue  # a warning that names an exception ("… like `OSError: …`") is no error
        strong = bool(_EXCEPTION.search(text) or _FATAL.search(text))
        if not strong and not level and "Traceback (most recent" not in text:
            continue
        if _FRAME.search(text):
            continue
        primary = strong and not _SECONDARY.search(text)
        out.append(ErrorLine(ln, rank_of(text), primary))
    return sorted(out, key=ErrorLine.when)


def earliest(errors: list[ErrorLine]) -> tuple[ErrorLine | None, list[ErrorLine]]:
    """The lead (the first primary error in time, else the first error) and, after it, each other
    rank's first error (primary where it has one)."""
    if not errors:
        return None, []
    primaries = [e for e in errors if e.primary]
    lead = (primaries or errors)[0]
    # A death no error preceded is itself the first event (a worker killed from outside).
    death = next((e for e in errors if _DEATH.search(e.line.text)), None)
    if death is not None and death.when() < lead.when():
        lead = death
    firsts: dict[str | None, ErrorLine] = {}
    for e in primaries + [e for e in errors if not e.primary]:
        firsts.setdefault(e.rank, e)
    others = [e for rank, e in firsts.items() if rank != lead.rank]
    return lead, sorted(others, key=ErrorLine.when)


def rule_unrecognised(ctx: Context, failed: bool) -> list[Finding]:
    """The log shows a failure (or the caller saw one) and no rule named its cause."""
    lead, others = earliest(error_lines(ctx))
    if lead is None:
        if not failed:
            return []
        last = next((ln for ln in reversed(ctx.lines) if ln.text.strip()), None)
        if last is None:
            return []
        return [
            Finding(
                "unrecognised_failure",
                "failed, cause not recognised: the process failed and its log shows no error"
                f" line; its last line is line {last.no}",
                ((last.no, last.text.strip()),),
                "read the launcher's own output and the exit status; a process killed from"
                " outside (the OOM killer, a timeout) prints nothing itself",
                "low",
            )
        ]
    also = "; ".join(f"{e.where()}: {e.line.text.strip()[:160]}" for e in others)
    return [
        Finding(
            "unrecognised_failure",
            f"failed, cause not recognised: the earliest error is {lead.where()}:"
            f" {lead.line.text.strip()[:240]}"
            + (f"; each other rank's first: {also}" if also else ""),
            tuple((e.line.no, e.line.text.strip()) for e in [lead, *others][:6]),
            f"no rule names this cause: start from {lead.where()}, the first error in time (the"
            " errors after it follow from it), and look its exception text up in the engine's"
            " issue tracker",
            "low",
        )
    ]


def in_time_order(f: Finding, ctx: Context) -> Finding:
    """The finding with its evidence in the order it was printed in time (a log that joins each
    rank's own file puts a later rank's earlier error further down)."""
    return replace(f, evidence=tuple(sorted(f.evidence, key=lambda e: _printed(ctx, e[0]))))


def first_time(f: Finding, ctx: Context) -> tuple[datetime, int]:
    """When a finding's first evidence line was printed: named failures lead in time order."""
    return min((_printed(ctx, no) for no, _ in f.evidence), default=(datetime.max, 0))


def _printed(ctx: Context, no: int) -> tuple[datetime, int]:
    return when(ctx.lines[no - 1]) if 0 < no <= len(ctx.lines) else (_NO_TIME, no)
