"""Evidence plugin: close each candidate's finding, hash the run, summarise in the terminal.

Findings are saved after every gate by the gating plugin; here the run is closed: an
interrupted session leaves INCOMPLETE (``finished`` stays False), the manifest hashes every
artifact, and each candidate gets one summary line.
"""

from __future__ import annotations

import pytest

from .evidence import manifest
from .pytest_candidates import run_key
from .pytest_gating import candidate_of
from .runstate import RunState


def close_run(state: RunState, *, interrupted: bool) -> None:
    for record in state.records.values():
        record.finished = not interrupted
        record.save()
    if state.records:
        (state.run_dir / "manifest.json").write_text(_json(manifest(state.run_dir)))


def _json(obj: object) -> str:
    import json

    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(run_key, None)
    if state is not None:
        close_run(state, interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """JUnit: each test carries its candidate's name."""
    candidate = candidate_of(item)
    if candidate is not None:
        item.user_properties.append(("candidate", candidate.name))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = terminalreporter.config.stash.get(run_key, None)
    if state is None or not state.records:
        return
    terminalreporter.section("qualification")
    for name, record in state.records.items():
        failure = record.first_failure()
        where = f" at {failure[0]}: {failure[1].reason[:120]}" if failure else ""
        terminalreporter.line(f"{record.verdict():<10} {name}{where}")
    terminalreporter.line(f"evidence: {state.run_dir}")
