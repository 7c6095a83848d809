"""ProcessLauncher and wait_ready on real processes (no engine, no inner pytest run).

Proved: a process that exits during start-up is reported by ``wait_ready`` as ``StartupExited``
within a second or two — by liveness, not by the (long) readiness timeout — with the exit code
and its own output in the message; ``stop()`` is idempotent, kills the whole process group (a
grandchild that ignores SIGTERM and outlives the leader included) and leaves the port free; a
leader that ignores SIGTERM gets SIGKILL after ``stop_timeout_s``; a server that dies while
answering a request is reported as ``ServerDied`` (not as a bare transport error), every time.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from tp2qual.artifacts.layout import Evidence
from tp2qual.candidate import Candidate
from tp2qual.exceptions import ServerDied, StartupExited
from tp2qual.redact import Redactor
from tp2qual.serving.launchers.base import port_is_free
from tp2qual.serving.launchers.process import ProcessLauncher
from tp2qual.serving.readiness import wait_ready
from tp2qual.serving.server import Server

PROXY = Path(__file__).with_name("faultproxy.py")


def launcher_for(tmp_path: Path, command: list[str], **launch: object) -> ProcessLauncher:
    spec = {
        "name": "proc-test",
        "model": {"repo": "example/none", "revision": "0" * 40, "served_name": "none"},
        "engine": {"kind": "vllm"},
        "launch": {"kind": "process", "command": command, **launch},
        "serve": {"tensor_parallel_size": 1, "max_model_len": 2048},
    }
    candidate = Candidate(path=tmp_path / "proc-test.toml", spec=spec)
    return ProcessLauncher(candidate, tmp_path / "server.log", Redactor())


def alive(pid: int) -> bool:
    """Running and not a zombie (an orphan's zombie waits for PID 1, but is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.mark.parametrize("attempt", range(5))  # the exit/tail race, tried a few times
def test_exit_during_startup_raises_at_once_with_code_and_output(
    tmp_path: Path, attempt: int
) -> None:
    launcher = launcher_for(tmp_path, ["sh", "-c", "echo boom; exit 3"])
    began = time.monotonic()
    launcher.start()
    with pytest.raises(StartupExited) as caught:
        wait_ready(launcher, served_name="none", timeout_s=120)
    took = time.monotonic() - began
    message = str(caught.value)
    assert took < 5, f"took {took:.2f}s"
    assert "exit code 3" in message, message
    assert "boom" in message, message  # the log tail, not "(no output)"
    first = launcher.stop()
    assert first.how == "already exited" and first.port_free
    assert launcher.stop() is first  # idempotent: the second call changes nothing
    assert port_is_free(launcher.port)


def test_stop_kills_the_group_and_frees_the_port(tmp_path: Path) -> None:
    """Engines fork workers; here 20 grandchildren that ignore SIGTERM and outlive the leader
    (as reparented schedulers do). ``stop()`` returns only once every one of them is gone."""
    pids = tmp_path / "grandchildren.pid"
    script = (
        f"for i in $(seq 20); do (trap '' TERM; exec sleep 1000) & echo $! >> {pids}; done; "
        "exec {python} -m http.server --bind 127.0.0.1 {port}"
    )
    launcher = launcher_for(tmp_path, ["sh", "-c", script], stop_timeout_s=10)
    assert launcher.stop().how == "not started"
    launcher.start()
    wait_for(lambda: not port_is_free(launcher.port) and pids.exists())
    wait_for(lambda: len(pids.read_text().split()) == 20)
    grandchildren = [int(pid) for pid in pids.read_text().split()]
    leader = launcher.identity()["pid"]
    assert alive(leader) and all(alive(pid) for pid in grandchildren)
    report = launcher.stop()
    left = [pid for pid in grandchildren if alive(pid)]  # looked at the moment stop() returned
    assert report.how == "SIGTERM", report  # the leader went on SIGTERM ...
    assert not left, f"{len(left)} of 20 grandchildren still running after stop() returned"
    assert not alive(leader)
    assert report.port_free and port_is_free(launcher.port)
    with socket.socket() as sock:  # free means bindable again, not only refusing
        sock.bind(("127.0.0.1", launcher.port))
    again = time.monotonic()
    assert launcher.stop() is report and time.monotonic() - again < 0.1


def test_sigterm_ignored_gets_sigkill_after_stop_timeout(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ignoring SIGTERM', flush=True); time.sleep(1000)"
    )
    launcher = launcher_for(tmp_path, [sys.executable, "-c", code], stop_timeout_s=1)
    launcher.start()
    wait_for(lambda: launcher.log.last_line() == "ignoring SIGTERM")
    leader = launcher.identity()["pid"]
    report = launcher.stop()
    assert report.how == "SIGKILL after SIGTERM timeout", report
    assert 1.0 <= report.seconds < 5, report
    assert report.extra["exit_code"] == -9
    assert not alive(leader)
    assert launcher.stop() is report
    assert os.path.exists(tmp_path / "server.log")


@pytest.mark.parametrize("attempt", range(10))  # the close-before-reap race, tried ten times
def test_death_during_a_request_is_server_died(tmp_path: Path, attempt: int) -> None:
    """The proxy dies (code 7) on the request; a stub engine stands in for llama.cpp."""
    engine = ["{python}", "-m", "http.server", "--bind", "127.0.0.1", "{{upstream_port}}"]
    command = ["{python}", str(PROXY), "--fault", "exit_midrun", "--listen-port", "{port}"]
    launcher = launcher_for(tmp_path, [*command, "--", *engine])
    launcher.start()
    try:
        wait_for(lambda: not port_is_free(launcher.port))
        server = Server(launcher.candidate, launcher, Evidence(tmp_path / "ev", Redactor()))
        body = {"model": "none", "messages": [], "max_tokens": 5}
        with pytest.raises(ServerDied, match=r"server died mid-run \(exit code 7\)"):
            server.api("x.jsonl").chat("dies", body, timeout=30)
        server.close()
    finally:
        launcher.stop()
    assert port_is_free(launcher.port)
