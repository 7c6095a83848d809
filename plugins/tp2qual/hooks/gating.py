"""Gating plugin: gates run in order and fail closed.

Decide, then act: ``verdict_for`` looks at the candidate's record and returns why a gate must
not run (not applicable, blocked by an earlier gate, optional lane without its baseline) or
None; the setup hook acts on it with a skip — never xfail, which would read as expected. The
report wrapper writes each test's outcome into the record, so the next gate can see it.

Whose fault: ``blames_candidate`` decides. An assertion raised in a gate module's own code,
``pytest.fail`` and the suite's own ``QualError`` tree (server exits, dies or does not answer in
time; a malformed answer; pins) speak about the candidate and FAIL the gate. Anything else — a
bug, a plain ``assert`` in the suite's own modules, a ``SuiteError``, a warning turned error —
is a *suite error*: the gate is ERROR with its traceback kept as an artifact, and the candidate
is never blamed.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from tp2qual.artifacts.finding import (
    BLOCKED,
    ERROR,
    FAILED,
    NOT_APPLICABLE,
    NOT_RUN,
    PASSED,
    STOPPING,
    CandidateRecord,
    GateResult,
    Verdict,
    read_finding,
)
from tp2qual.artifacts.layout import FINDING
from tp2qual.candidate import GATES, Candidate
from tp2qual.evidence.reference import find_reference, prompt_set_sha256
from tp2qual.evidence.run import RunState
from tp2qual.exceptions import QualError, ServerError
from tp2qual.hooks.candidates import run_key
from tp2qual.run_order import run_order
from tp2qual.serving.diagnose import diagnose_log


def gate_of(item: pytest.Item) -> str | None:
    for mark in item.iter_markers():
        if mark.name in GATES:
            return mark.name
    return None


def candidate_of(item: pytest.Item) -> Candidate | None:
    callspec = getattr(item, "callspec", None)
    found = callspec.params.get("candidate") if callspec else None
    return found if isinstance(found, Candidate) else None  # not pytest's NOTSET placeholder


# How a gate skipped by ``verdict_for`` is recorded, by the reason's first words.
SKIPPED_AS = (("not applicable", NOT_APPLICABLE), ("not run", NOT_RUN))

# Set on a test the setup hook skipped for its whole gate (not applicable, blocked, not run):
# the gate's outcome says why, so the skip is not one of the gate's checks.
gate_skipped_key = pytest.StashKey[bool]()


def verdict_for(state: RunState, record: CandidateRecord, gate: str) -> str | None:
    """Why this gate must be skipped for this candidate, or None to run it."""
    reason = record.candidate.not_applicable(gate)
    if reason:
        return f"not applicable: {reason}"
    if why := state.not_run.get(record.candidate.name):
        return f"not run: {why}"
    if record.server_down:
        return f"blocked by {record.server_down}"
    for earlier in GATES[: GATES.index(gate)]:
        if record.gates[earlier].outcome in STOPPING:
            if first := record.first(FAILED, ERROR):
                suite = " (suite error)" if first[1].outcome == ERROR else ""
                return f"blocked by {first[0]}{suite}"
            return f"blocked by {earlier}"
    after = record.candidate.spec.get("lane", {}).get("after")
    if after and not baseline_passed(state, after):
        return (
            f"optional lane: baseline {after!r} has no PASS in this run or in {state.results_root}"
        )
    return None


def baseline_passed(state: RunState, name: str) -> bool:
    record = state.records.get(name)
    if record is not None and record.verdict(settled=True) == Verdict.PASS:
        return True  # in this run: every gate passed, though the session goes on
    return any(
        (finding := read_finding(path, state.results_root)) and finding.verdict == Verdict.PASS
        for path in sorted(state.results_root.glob(f"*/{name}/{FINDING}"))
    )


def _context(item: pytest.Item) -> tuple[RunState, CandidateRecord, str] | None:
    candidate, gate = candidate_of(item), gate_of(item)
    if candidate is None or gate is None:
        return None
    state = item.config.stash[run_key]
    return state, state.record(candidate), gate


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each candidate's gates together, in gate order, candidates in run order
    (``tp2qual.run_order``: a reference before the candidates judged against it, a baseline
    before its lanes, one model's serves before the next model's); first, the references that
    ``-k``/``-m`` left out but a selected candidate needs (``bring_references``).

    pytest's own fixture reordering groups by the session parameter but can interleave modules
    once a gate is parametrized itself; an explicit stable sort makes the order a contract.
    """
    bring_references(config, items)
    position = {id(item): i for i, item in enumerate(items)}
    met: dict[str, Candidate] = {}
    for item in items:
        if (candidate := candidate_of(item)) is not None:
            met.setdefault(candidate.name, candidate)
    rank = {name: i for i, name in enumerate(run_order(list(met.values())))}

    def key(item: pytest.Item) -> tuple[int, int, int]:
        candidate, gate = candidate_of(item), gate_of(item)
        if candidate is None or gate is None:
            return (-1, -1, position[id(item)])
        return (rank[candidate.name], GATES.index(gate), position[id(item)])

    items.sort(key=key)


# ---------------------------------------------------------------- references -k left out

deselected_key = pytest.StashKey[list[pytest.Item]]()
brought_key = pytest.StashKey[list[str]]()
BROUGHT_OUTPUT = "tp2qual_brought"  # an xdist worker's lines, for the controller (hooks/hosts)


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    """What ``-k``, ``-m`` or ``--deselect`` left out, kept for ``bring_references``."""
    if items:
        items[0].config.stash.setdefault(deselected_key, []).extend(items)


def bring_references(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A selected candidate's gate 07 needs its reference's PASS (a lane's: its baseline's).
    When the reference was deselected (``-k NAME`` matches the candidate, not its reference)
    and has no PASS of this prompt set under the results folder, its gates are brought back
    into the run, after pytest's own deselection, and one line says so; the ordering then runs
    it first. Transitively: a brought reference's own reference comes too."""
    left = config.stash.get(deselected_key, [])
    if not left:
        return
    state = config.stash[run_key]
    by_name = {c.name: c for c in state.candidates}
    selected = {c.name for item in items if (c := candidate_of(item)) is not None}
    waiting = [n for n in by_name if n in selected and _judges_agreement(by_name[n], items)]
    digest = prompt_set_sha256()
    said = config.stash.setdefault(brought_key, [])
    while waiting:
        name = waiting.pop(0)
        reference = by_name[name].reference
        if reference is None or reference in selected or reference not in by_name:
            continue
        if not isinstance(why := find_reference(state, reference, digest), str):
            continue  # an earlier PASS to judge against: nothing to bring
        theirs = [i for i in left if (c := candidate_of(i)) is not None and c.name == reference]
        if not theirs:
            continue
        items.extend(theirs)
        left[:] = [i for i in left if i not in theirs]
        _undo_deselected(config, theirs)
        selected.add(reference)
        said.append(
            f"tp2qual: {reference} brought into this run: {name} is judged against it "
            f"(gate 07) and {why.removeprefix(f'reference {reference!r} ')}"
        )
        if _judges_agreement(by_name[reference], theirs):
            waiting.append(reference)
    if said and hasattr(config, "workeroutput"):  # an xdist worker: its terminal is not shown
        config.workeroutput[BROUGHT_OUTPUT] = list(said)


def _judges_agreement(candidate: Candidate, items: Sequence[pytest.Item]) -> bool:
    """Whether the candidate's gate 07 is among ``items`` and may run (not skipped outright)."""
    if candidate.not_applicable("agreement"):
        return False
    return any(
        gate_of(i) == "agreement"
        and (c := candidate_of(i)) is not None
        and c.name == candidate.name
        and i.get_closest_marker("skip") is None
        for i in items
    )


def _undo_deselected(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The terminal's count of deselected tests, without the ones brought back."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}).get("deselected")
    if stats:
        stats[:] = [i for i in stats if i not in items]


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """The lines ``bring_references`` wrote, under pytest's "collected N items"."""
    said: list[str] = config.stash.get(brought_key, [])
    return said


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Runs before any fixture is set up, so a blocked gate never starts a server."""
    if item.get_closest_marker("skip"):
        return  # cannot run here at all: pytest's own skip says why
    context = _context(item)
    if context is None:
        return
    state, record, gate = context
    why = verdict_for(state, record, gate)
    if why is None:
        return
    result = record.gates[gate]
    if result.outcome not in (FAILED, ERROR):  # a gate that already failed stays failed
        result.outcome = next((o for w, o in SKIPPED_AS if why.startswith(w)), BLOCKED)
        result.reason = why
        record.save()
    item.stash[gate_skipped_key] = True
    pytest.skip(why)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # No record for a candidate this machine cannot run (pytest's own skip says why), in any
    # phase, nor a check of a gate skipped as a whole (its outcome says why); a check a running
    # gate skipped is recorded with its reason.
    cannot_run = item.get_closest_marker("skip") is not None
    cannot_run |= item.stash.get(gate_skipped_key, False)
    context = None if cannot_run else _context(item)
    if context is not None:
        _note(item, report, call, context[1], context[2])
        if report.failed and call.excinfo is not None and call.excinfo.errisinstance(ServerError):
            _, record, gate = context
            kind = "start-up failed" if report.when == "setup" else "server died"
            record.server_down = f"{gate} ({kind})"
            record.save()
    return report


def blames_candidate(excinfo: pytest.ExceptionInfo[BaseException] | None) -> bool:
    """Whether a failure is a statement about the candidate (see the module docstring)."""
    if excinfo is None:
        return False
    if excinfo.errisinstance((pytest.fail.Exception, QualError)):
        return True
    return excinfo.errisinstance(AssertionError) and raised_in_a_gate(excinfo.tb)


def raised_in_a_gate(tb: TracebackType) -> bool:
    """Whether the frame that raised is a gate module's own code: a module whose ``pytestmark``
    names a gate (tests/test_NN_*.py), where an ``assert`` is the gate's statement about the
    candidate. An ``assert`` raised anywhere else (the suite's package, a plugin) is a bug."""
    while tb.tb_next is not None:
        tb = tb.tb_next
    marks = tb.tb_frame.f_globals.get("pytestmark")
    marks = marks if isinstance(marks, list) else [marks]
    return any(getattr(mark, "name", None) in GATES for mark in marks)


# A parametrized check (gate 05's modes) keeps its worst outcome under its one name.
RANK = {"skipped": 0, "passed": 1, "error": 2, "failed": 3}


def _note(
    item: pytest.Item,
    report: pytest.TestReport,
    call: pytest.CallInfo[None],
    record: CandidateRecord,
    gate: str,
) -> None:
    result = record.gates[gate]
    test = item.originalname if isinstance(item, pytest.Function) else item.name
    if report.failed and blames_candidate(call.excinfo):
        _outcome(result, test, "failed")
        if result.outcome != FAILED:
            result.outcome = FAILED
            result.reason = _one_line_cause(report)
            result.excerpt = _excerpt(record)
            result.diagnosis = _diagnosis(record, test, call.excinfo)
    elif report.failed:
        _outcome(result, test, "error")
        if result.outcome not in (FAILED, ERROR):  # a proven failure, or the first error, stays
            result.outcome = ERROR
            result.reason = "suite error (not the candidate's fault): " + _one_line_cause(report)
            result.error_artifact = record.evidence.write_text(
                f"suite_errors/{gate}-{_safe(test)}-{report.when}.txt", report.longreprtext
            )
    elif report.skipped:
        _outcome(result, test, "skipped")
        result.skipped[_variant(item, test)] = _skip_reason(report)
    elif report.when == "call":
        _outcome(result, test, "passed")
        if result.outcome not in (FAILED, ERROR):
            result.outcome = PASSED
    result.seconds += report.duration  # every phase of every test of the gate
    record.save()


def _outcome(result: GateResult, test: str, outcome: str) -> None:
    """A check's outcome; over a parametrized check's variants the worst one stays."""
    if test not in result.tests or RANK[outcome] >= RANK.get(result.tests[test], 0):
        result.tests[test] = outcome


def _variant(item: pytest.Item, test: str) -> str:
    """``test`` with its parameters besides the candidate (``test_tool_call[auto]``)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    shown = [str(v) for k, v in params.items() if k != "candidate"]
    return f"{test}[{'-'.join(shown)}]" if shown else test


def _skip_reason(report: pytest.TestReport) -> str:
    """The reason ``pytest.skip`` was given (pytest keeps it as (path, line, "Skipped: …"))."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def _diagnosis(
    record: CandidateRecord, test: str, excinfo: pytest.ExceptionInfo[BaseException] | None
) -> dict[str, Any] | None:
    """Cause and remedy from the log the failure left: the NCCL probe's for the probe test,
    else the server's (start-up, crash, or whatever it said while a gate failed). A server that
    did not start or did not stay up failed, whatever its log says."""
    log = "nccl_probe.log" if test == "test_probe_all_reduce" else "server.log"
    server_failed = excinfo is not None and excinfo.errisinstance(ServerError)
    found = diagnose_log(
        record.evidence.root / log, record.candidate, record.identity, server_failed=server_failed
    )
    return found.as_dict() | {"log": log} if found else None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:120]


def _one_line_cause(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    phase = "" if report.when == "call" else f"{report.when}: "
    return phase + text.strip().splitlines()[0][:1000] if text.strip() else phase + "failed"


_TELLING = re.compile(r"error|exception|traceback|fatal|warn|fail|killed|abort|refused", re.I)


def _excerpt(record: CandidateRecord, scan: int = 400, keep: int = 15, tail: int = 5) -> list[str]:
    """The log lines that explain a failure: the last error-looking lines, then the very end
    (engines end their logs with timing noise, so a bare tail rarely says why)."""
    log = Path(record.evidence.root / "server.log")
    if not log.is_file():
        return []
    lines = log.read_text(errors="replace").splitlines()[-scan:]
    telling = [line for line in lines[:-tail] if _TELLING.search(line)][-keep:]
    return [*telling, *(["..."] if telling else []), *lines[-tail:]]
