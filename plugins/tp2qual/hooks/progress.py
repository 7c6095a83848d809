"""The live progress line of a gate's requests, drawn with pytest's terminal reporter.

At the campaign's single-stream rates one long request takes minutes; without this the terminal
shows nothing between the server's start-up and the gate's result. The ``api`` fixture passes
``watch_for(item, ...)`` to the gate's ``Api``; the line (``perf/progress.py``) is redrawn in
place when a request is sent, as its stream arrives (at most every ``REDRAW_S``) and when it is
answered; before pytest writes the test's result its last state is kept as a line of its own,
and pytest's own line (the file and its result letters) goes on below it.

Shown only where pytest itself draws live lines (its "collecting …" line): on a terminal, not
under ``-q``, not in an xdist worker. Elsewhere — CI logs, pipes, JUnit runs — nothing is
written, so no output a tool parses changes. Drawn with capture suspended, as the start-up lines
are, so the line never lands in a test's captured output.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext

import pytest

from tp2qual.perf.progress import GateProgress

REDRAW_S = 0.5


def shows_live_lines(config: pytest.Config) -> bool:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or hasattr(config, "workerinput"):
        return False
    return bool(reporter.isatty()) and reporter.verbosity >= 0


class TerminalProgress:
    """A ``serving.server.Watch`` that draws one gate's progress line."""

    def __init__(
        self,
        config: pytest.Config,
        label: str,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.tally = GateProgress(label)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        assert reporter is not None, "watch_for builds one only where the reporter draws"
        self._reporter: pytest.TerminalReporter = reporter
        self._capture = config.pluginmanager.get_plugin("capturemanager")
        self._clock = clock
        self._drawn_at = -math.inf
        self._on_own_line = False

    def sent(self, tag: str, max_tokens: int | None) -> None:
        self.tally.sent(tag, max_tokens, self._clock())
        self._draw(force=True)

    def streamed(self, tag: str, chunks: int) -> None:
        self.tally.streamed(chunks)
        self._draw()

    def answered(self, tag: str, tokens: int | None) -> None:
        self.tally.answered(tokens, self._clock())
        self._draw(force=True)

    def finish(self, nodeid: str) -> None:
        """Keep the last state as a line of its own; pytest's result goes on the next line."""
        if not self._on_own_line:
            return
        self._draw(force=True)
        with self._capture.global_and_fixture_disabled() if self._capture else nullcontext():
            if self._reporter.config.get_verbosity(pytest.Config.VERBOSITY_TEST_CASES) <= 0:
                self._reporter.write_fspath_result(nodeid, "")  # newline, then the file again
            # verbose: pytest writes the test's own line after a newline anyway

    def _draw(self, force: bool = False) -> None:
        now = self._clock()
        if not force and now - self._drawn_at < REDRAW_S:
            return
        self._drawn_at = now
        width = shutil.get_terminal_size().columns - 1  # a wrapped line cannot be redrawn
        line = ("  " + self.tally.line(now))[:width]
        with self._capture.global_and_fixture_disabled() if self._capture else nullcontext():
            if not self._on_own_line:
                # pytest then starts its next result on a fresh line, after ours.
                self._reporter.ensure_newline()
                self._on_own_line = True
            self._reporter.rewrite(line, erase=True)


class ProgressLines:
    """The gate tests' live lines, by node id; ends each before pytest writes its result."""

    name = "tp2qual-progress-lines"

    def __init__(self) -> None:
        self.drawing: dict[str, TerminalProgress] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and (watch := self.drawing.pop(report.nodeid, None)):
            watch.finish(report.nodeid)


@pytest.hookimpl(trylast=True)  # after the terminal reporter is registered
def pytest_configure(config: pytest.Config) -> None:
    if shows_live_lines(config):
        config.pluginmanager.register(ProgressLines(), ProgressLines.name)


def watch_for(item: pytest.Item, candidate: str, gate: str | None) -> TerminalProgress | None:
    """The progress line for one gate test, or None where live lines are not shown."""
    lines = item.config.pluginmanager.get_plugin(ProgressLines.name)
    if not isinstance(lines, ProgressLines):
        return None
    watch = TerminalProgress(item.config, f"[{candidate}] {gate or 'requests'}")
    lines.drawing[item.nodeid] = watch
    return watch
