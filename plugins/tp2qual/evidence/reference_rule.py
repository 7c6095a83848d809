"""The one rule that chooses which run of its reference a candidate is compared with.

Gate 07 (its transcript), gate 08 (the floors of the reference's measured figures), the report's
overview (its ratios) and verify all take the run this names, or none with why: two rules let a
serve be judged against one run's transcript and another run's throughput (a reference that
FAILED in this run, replaced by an older PASS on another image, for gate 08 only).

The rule, on the facts of each run (read by evidence/reference_runs.py):

- **this run** first. A PASS is the reference. A reference that FAILED in this run, or ended in
  a suite ERROR, is none: an older PASS never stands in for it (it would judge against bytes or
  a build that this run just showed to be broken). One still running on another worker
  (``--hosts``) is none yet: not waited for. Anything else (not run here) looks further.
- else **the newest earlier dated run** whose record is a PASS about the same bytes: the model
  revision and image pin the reference's file gives today, and the shipped prompt set. A PASS
  about other bytes is skipped, and said when nothing else is found.

Pure: no I/O, no pytest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Standing(StrEnum):
    """A run's record of the reference, as far as the rule cares."""

    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"
    UNSETTLED = "unsettled"  # this run's record, still being written by another worker
    OTHER = "other"  # INCOMPLETE, not run there, no finding: neither a reference nor a veto


@dataclass(frozen=True)
class RunSeen:
    run: str  # the dated run folder's name, never "latest"
    standing: Standing
    cause: str = ""  # FAIL/ERROR: the gate that ended it, with its reason
    other_bytes: str = ""  # a PASS about other bytes: what differs ("" = the same bytes)


@dataclass(frozen=True)
class Chosen:
    """The run a reference's evidence is taken from, or why there is none (``run`` None)."""

    name: str
    run: str | None
    this_run: bool = False
    why: str = ""


def choose_reference(
    name: str, this_run: RunSeen | None, earlier: Iterable[RunSeen], where: str
) -> Chosen:
    """``this_run``: the reference's record in this run (None: none there); ``earlier``: the
    earlier dated runs' records of it, newest first (read lazily: the rule stops at the
    first it takes); ``where``: the results folder, for the
    line that says none was found."""
    if this_run is not None:
        decided = _decided_here(name, this_run)
        if decided is not None:
            return decided
    skipped = []
    for seen in earlier:
        if seen.standing != Standing.PASS:
            continue
        if seen.other_bytes:
            skipped.append(f"{seen.run}: {seen.other_bytes}")
            continue
        return Chosen(name, seen.run)
    why = f"reference {name!r} has no PASS in this run or an earlier dated run under {where}"
    return Chosen(name, None, why=why + (f"; PASSes about other bytes skipped: "
                                         f"{'; '.join(skipped)}" if skipped else ""))  # fmt: skip


def _decided_here(name: str, seen: RunSeen) -> Chosen | None:
    """This run's record decides (a PASS, or a veto), or None to look at earlier runs."""
    if seen.standing == Standing.PASS:
        return Chosen(name, seen.run, this_run=True)
    if seen.standing in (Standing.FAIL, Standing.ERROR):
        what = "FAILED" if seen.standing == Standing.FAIL else "ended in a suite ERROR"
        why = (
            f"reference {name!r} {what} in this run ({seen.cause}); an earlier PASS of it does "
            "not stand in for it"
        )
        return Chosen(name, None, why=why)
    if seen.standing == Standing.UNSETTLED:
        why = f"reference {name!r} runs in this run on another worker and has not settled"
        return Chosen(name, None, why=why)
    return None
