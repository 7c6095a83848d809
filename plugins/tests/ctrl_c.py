"""Ctrl-C as a terminal sends it, at a point the inner run announces, for the self-tests that
interrupt a real run (``test_interrupt.py``, ``test_docker_sigint.py``, ``test_hosts.py``).

Two habits make those tests independent of how busy the machine is:

* the child gets SIGINT at its default disposition, as a terminal's foreground job has. bash
  sets SIGINT to ignored for a background job of a non-interactive shell, and an ignored signal
  stays ignored across exec: a self-test run in such a job once watched its child ignore the
  Ctrl-C and run on to the end (exit 0), or past the wait for its stop;
* the signal is sent when the run says where it is, never after a sleep or a guess from the
  outside: the ``park`` plugin below holds a chosen gate's call once its server answers, writes
  one line to ``PARK_FILE``, and waits there for the Ctrl-C.

The stop is then given the bound a user is promised (``interrupt_bound_s``), stated once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tp2qual.serving.interrupts import interrupt_bound_s

__all__ = [
    "children_get_default_sigint",
    "interrupt_bound_s",
    "park_env",
    "reap_servers",
    "wait_parked",
]

# A plugin for the inner run (``-p park``, the file on its PYTHONPATH): the call of every test
# whose node id holds ``PARK_AT`` announces itself and waits for the Ctrl-C. Under xdist each
# worker loads it too, so each candidate's gate announces on its own line.
PARK_PLUGIN = """
import os, time

def pytest_runtest_call(item):
    if os.environ.get("PARK_AT", "#") not in item.nodeid:
        return
    with open(os.environ["PARK_FILE"], "a") as out:
        out.write(item.nodeid + "\\n")
    deadline = time.monotonic() + float(os.environ.get("PARK_MAX_S", "600"))
    while time.monotonic() < deadline:  # the Ctrl-C raises KeyboardInterrupt in here
        time.sleep(0.05)
"""


@contextmanager
def children_get_default_sigint() -> Iterator[None]:
    """Children started in here get SIGINT at its default, whatever this process inherited:
    a handler (unlike SIG_IGN) is reset to the default at exec."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def park_env(folder: Path, park_at: str) -> dict[str, str]:
    """The inner run's environment for ``-p park``: the plugin written to ``folder``, put on
    its PYTHONPATH, parking the calls whose node id holds ``park_at``, announcing to
    ``folder/parked.txt``."""
    (folder / "park.py").write_text(PARK_PLUGIN)
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    return {
        **os.environ,
        "PYTHONPATH": path,
        "PYTHONUNBUFFERED": "1",
        "PARK_AT": park_at,
        "PARK_FILE": str(folder / "parked.txt"),
    }


def wait_parked(
    park_file: Path, count: int, run: subprocess.Popen[bytes], timeout_s: float = 600
) -> list[str]:
    """The node ids parked, once ``count`` have announced; fails if the run ends first.
    ``timeout_s`` bounds the wait on a failure; it is never the event itself."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = park_file.read_text().splitlines() if park_file.exists() else []
        if len(lines) >= count:
            return lines
        if run.poll() is not None:
            out = run.communicate()[0].decode(errors="replace") if run.stdout else ""
            raise AssertionError(f"the run ended before {count} gate(s) parked:\n{out[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"{count} gate(s) did not park within {timeout_s:.0f} s")


def reap_servers(results: Path) -> list[int]:
    """Kill the process group of every server an inner run under ``results`` recorded
    (``launch.json``), and return their pids: a server runs in a session of its own, so an
    inner run killed after a failed wait would leave it running. A no-op after a clean stop."""
    reaped = []
    for launch in results.glob("*/*/launch.json"):
        pid = json.loads(launch.read_text()).get("pid")
        if not pid:
            continue
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        reaped.append(pid)
    return reaped
