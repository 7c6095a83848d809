"""Re-derive each gate's verdicts from its raw records, with the pure checks.

Gates 00-02 judge records rather than answers (identity records, the probe's and the server's
logs, the model list): each of their checks (tests) is judged again by the function the gate
called (``checks.preflight``, ``checks.nccl_gate``, ``checks.model_list``) and kept under its
test's name (``Rederived.checks``), so ``verify`` holds every check's recorded outcome to it.
A verdict file (``deterministic_verdicts.jsonl`` …) is what a gate wrote about itself; the raw
request/response records beside it (``deterministic.jsonl`` …) are what the server said. Here the
same pure checks the gate ran (``checks.answers``, ``checks.repetition``, ``checks.toolcalls``,
``checks.overlength``, ``perf.sampling`` and ``checks.stats``) run again on the raw records, with
the settings the run recorded at its start (``identity/candidate.json``), never today's candidate
file. Each re-derivation gives the verdict rows as they should read (``rows``), what differs from
the rows recorded (``mismatches``, naming the raw record), and what fails (``failures``).

``REDERIVERS`` is keyed by gate name: a new gate plugs its re-derivation in with one entry,
its module beside the others here (``common`` holds what they share, ``claim_support`` the
rules a passed gate's claims meet). No pytest and no writing here.
"""

from __future__ import annotations

from collections.abc import Callable

from tp2qual.evidence.rederive.agreement import agreement
from tp2qual.evidence.rederive.capacity import capacity
from tp2qual.evidence.rederive.claim_support import supports_pass
from tp2qual.evidence.rederive.common import (
    RESOLVED_CANDIDATE,
    GateRun,
    Judged,
    Mismatch,
    Rederived,
    Unrederivable,
    read_settings,
)
from tp2qual.evidence.rederive.deterministic import deterministic
from tp2qual.evidence.rederive.model_list import model_list
from tp2qual.evidence.rederive.nccl import nccl
from tp2qual.evidence.rederive.preflight import preflight
from tp2qual.evidence.rederive.repetition import repetition
from tp2qual.evidence.rederive.throughput import throughput
from tp2qual.evidence.rederive.tool_calls import tool_calls

__all__ = [
    "REDERIVERS",
    "RESOLVED_CANDIDATE",
    "GateRun",
    "Judged",
    "Mismatch",
    "Rederived",
    "Rederiver",
    "Unrederivable",
    "agreement",
    "capacity",
    "deterministic",
    "model_list",
    "nccl",
    "preflight",
    "read_settings",
    "repetition",
    "supports_pass",
    "throughput",
    "tool_calls",
]

Rederiver = Callable[[GateRun], Rederived]

# One entry per gate that has raw exchanges to re-derive from.
REDERIVERS: dict[str, Rederiver] = {
    "preflight": preflight,
    "nccl": nccl,
    "model_list": model_list,
    "deterministic": deterministic,
    "repetition": repetition,
    "tool_calls": tool_calls,
    "capacity": capacity,
    "throughput": throughput,
    "agreement": agreement,
}
