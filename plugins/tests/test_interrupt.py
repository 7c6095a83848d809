"""Ctrl-C (or SIGTERM) mid-run: the server's whole process group is stopped, the port is free
again, and the finding says INCOMPLETE with what was captured up to then.

Each real run gets its SIGINT at a point the test observes in the run's evidence, never after a
sleep: during start-up (``launch.json`` written, readiness not yet) and mid-gate (gate 03 has
recorded its first exchange, more follow). A second Ctrl-C while the server is being stopped
lets the stop finish (shown on a leader that ignores SIGTERM).

The child gets SIGINT's default disposition, as a terminal's foreground job has, even when these
self-tests were started ignoring it: bash sets SIGINT to ignored for a background job of a
non-interactive shell, and an ignored signal stays ignored across exec. That was the cause of a
child that once ran on to PASS after its Ctrl-C.

The exit status is pytest's 2, never death by SIGINT: a Ctrl-C that passed through code compiled
from a string left CPython's "unhandled" mark set (``forget_handled_interrupts``), shown on a
bare pytest below.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ctrl_c import children_get_default_sigint, interrupt_bound_s, reap_servers
from test_process_launcher import alive, launcher_for, wait_for

from tp2qual.artifacts.layout import Evidence
from tp2qual.candidate import load_candidate
from tp2qual.hooks.candidates import why_not_runnable
from tp2qual.redact import Redactor
from tp2qual.serving.interrupts import interrupts_deferred
from tp2qual.serving.launchers.base import port_is_free
from tp2qual.serving.managed import ManagedServer

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "candidates" / "smollm2-135m-local.toml"
NAME = "smollm2-135m-local"


def _wait_for(found: Callable[[], Path | None], what: str, run: subprocess.Popen[bytes]) -> Path:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if (path := found()) is not None:
            return path
        if run.poll() is not None:
            out = run.communicate()[0].decode(errors="replace")
            raise AssertionError(f"the run ended before {what}:\n{out[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within 180 s")


def _first(base: Path, pattern: str) -> Path | None:
    found = sorted(base.glob(pattern))
    return found[0] if found else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


# Where the Ctrl-C lands: the evidence that shows the run is there.
PHASES = {
    "start-up": lambda base: _first(base, f"*/{NAME}/launch.json"),
    "mid-gate": lambda base: _first(base, f"*/{NAME}/deterministic.jsonl"),
}


@pytest.fixture
def results(tmp_path: Path) -> Iterator[Path]:
    """The inner run's results; whatever server it left running is killed afterwards (after
    the test's own checks), so a failing run does not leave one behind."""
    yield tmp_path / "results"
    reap_servers(tmp_path / "results")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("phase", "stop"),
    [("start-up", signal.SIGINT), ("mid-gate", signal.SIGINT), ("mid-gate", signal.SIGTERM)],
    ids=["start-up", "mid-gate", "mid-gate-sigterm"],
)
def test_a_stop_signal_leaves_nothing_running(
    results: Path, phase: str, stop: signal.Signals
) -> None:
    """SIGTERM (``kill``, a CI timeout) is taken as Ctrl-C: before, it killed pytest at once and
    the servers, each in a session of its own, ran on."""
    reason = why_not_runnable(load_candidate(LOCAL))
    if reason:
        pytest.skip(reason)
    command = [sys.executable, "-m", "pytest", "-k", NAME, f"--results={results}",
               "-p", "no:cacheprovider", "-q"]  # fmt: skip
    with children_get_default_sigint():
        run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: PHASES[phase](results), phase, run)
        run.send_signal(stop)
        bound = interrupt_bound_s(load_candidate(LOCAL).launch["stop_timeout_s"])
        output = run.communicate(timeout=bound)[0].decode(errors="replace")
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    folder = _first(results, f"*/{NAME}")
    assert folder is not None
    launch = json.loads((folder / "launch.json").read_text())
    finding = json.loads((folder / "finding.json").read_text())
    teardown = json.loads((folder / "teardown.json").read_text())  # the stop ran to its end
    port = int(launch["base_url"].rsplit(":", 1)[1])
    assert run.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    assert finding["verdict"] == "INCOMPLETE", output[-3000:]
    assert not _alive(launch["pid"]), "server process survived Ctrl-C"
    assert not _group_alive(launch["pid"]), "a process of the server's group survived Ctrl-C"
    assert port_is_free(port) and teardown["port_free"] is True
    if phase != "start-up":
        assert (folder / "server.log").stat().st_size > 0  # evidence kept


def test_a_child_of_a_process_ignoring_sigint_ignores_it_too() -> None:
    """The cause, shown on a bare Python child: started while SIGINT is ignored, it ignores it;
    started inside ``children_get_default_sigint`` it gets Python's KeyboardInterrupt."""
    code = "import signal; h = signal.getsignal(signal.SIGINT); print(getattr(h, '__name__', h))"
    probe = [sys.executable, "-c", code]
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ignored = subprocess.run(probe, capture_output=True, text=True, check=True).stdout
        with children_get_default_sigint():
            default = subprocess.run(probe, capture_output=True, text=True, check=True).stdout
    finally:
        signal.signal(signal.SIGINT, before)
    assert ignored.strip() == str(int(signal.SIG_IGN))
    assert default.strip() == "default_int_handler"


def test_ctrl_c_inside_a_deferred_step_is_raised_when_it_ends() -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt), children_get_default_sigint(), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)  # a real signal, to this process
        time.sleep(0.2)  # Python runs handlers here: the step goes on
        steps.append("finished")
    assert steps == ["finished"]


def test_a_second_ctrl_c_while_stopping_lets_the_stop_finish(tmp_path: Path) -> None:
    """The stop of a leader that ignores SIGTERM waits ``stop_timeout_s``, then SIGKILLs; a
    Ctrl-C in that wait is raised only once the server is gone and its teardown recorded."""
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ignoring SIGTERM', flush=True); time.sleep(1000)"
    )
    launcher = launcher_for(tmp_path, [sys.executable, "-c", code], stop_timeout_s=2)
    evidence = Evidence(tmp_path / "ev", Redactor())
    managed = ManagedServer(launcher.candidate, evidence, launcher)
    launcher.start()
    wait_for(lambda: launcher.log.last_line() == "ignoring SIGTERM")
    leader = launcher.identity()["pid"]
    ctrl_c = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))  # mid-wait
    with children_get_default_sigint(), pytest.raises(KeyboardInterrupt):
        ctrl_c.start()
        managed.__exit__(None, None, None)  # what the fixture's teardown runs
    ctrl_c.join()
    assert managed.stopped is not None and managed.stopped.how == "SIGKILL after SIGTERM timeout"
    assert not alive(leader)
    assert json.loads((tmp_path / "ev" / "teardown.json").read_text())["port_free"] is True


# A real Ctrl-C taken inside code compiled from a string, as a dataclass's or a namedtuple's
# generated code is; pytest handles the KeyboardInterrupt and reports the run interrupted.
CTRL_C_IN_EXEC = """
def test_ctrl_c_lands_in_exec_d_code():
    exec("import os, signal, time; os.kill(os.getpid(), signal.SIGINT); time.sleep(5)")
"""


def _exit_status_of_pytest(tmp_path: Path, *plugins: str) -> int:
    """``python -m pytest`` (as the README runs it) on CTRL_C_IN_EXEC, with only ``plugins``
    of the suite's own: this checkout's ``tp2qual`` is importable, its plugin is not loaded."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_ctrl_c.py").write_text(CTRL_C_IN_EXEC)
    loaded = [arg for plugin in plugins for arg in ("-p", plugin)]
    command = [sys.executable, "-m", "pytest", "-p", "no:tp2qual", "-p", "no:cacheprovider",
               *loaded, "-q", "test_ctrl_c.py"]  # fmt: skip
    path = os.pathsep.join([str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")])
    with children_get_default_sigint():
        done = subprocess.run(command, cwd=tmp_path, env={**os.environ, "PYTHONPATH": path},
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "KeyboardInterrupt" in done.stdout, done.stdout + done.stderr  # pytest handled it
    return done.returncode


@pytest.mark.skipif(
    sys.version_info >= (3, 13),
    reason="CPython 3.11 and 3.12 behave so (their run_eval_code_obj); 3.14 marks only a Ctrl-C "
    "that reaches the top (gh-128130)",
)
def test_a_ctrl_c_handled_after_exec_d_code_ends_a_bare_pytest_by_sigint(tmp_path: Path) -> None:
    """The cause: pytest handled the KeyboardInterrupt and returned 2, yet the process died by
    SIGINT, because the interrupt left code compiled from a string (Python/pythonrun.c)."""
    assert _exit_status_of_pytest(tmp_path) == -signal.SIGINT


def test_the_suite_exits_interrupted_after_a_ctrl_c_in_exec_d_code(tmp_path: Path) -> None:
    status = _exit_status_of_pytest(tmp_path, "tp2qual.hooks.interrupts")
    assert status == pytest.ExitCode.INTERRUPTED
