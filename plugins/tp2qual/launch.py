"""Launchers: one small protocol, followed by the local-process and the Docker launcher alike.

Constructors only store settings; ``start()`` launches; ``stop()`` is safe to call twice and
always leaves nothing running. Readiness lives in ``readiness.py`` and works on any launcher.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .candidate import Candidate
from .logsink import LogSink
from .redact import Redactor


@dataclass(frozen=True)
class Exited:
    """Why a server is no longer running."""

    code: int | None
    oom_killed: bool = False
    detail: str = ""

    def describe(self) -> str:
        parts = [f"exit code {self.code}"]
        if self.code is not None and self.code < 0:
            parts.append(f"signal {signal.Signals(-self.code).name}")
        if self.oom_killed:
            parts.append("OOM-killed")
        if self.detail:
            parts.append(self.detail)
        return ", ".join(parts)


@dataclass
class StopReport:
    how: str = "not started"
    seconds: float = 0.0
    port_free: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


class Launcher(Protocol):
    kind: str
    candidate: Candidate
    base_url: str
    log: LogSink

    def start(self) -> None: ...
    def poll(self) -> Exited | None: ...
    def stop(self) -> StopReport: ...
    def identity(self) -> dict[str, Any]: ...
    def plan(self) -> str: ...


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) != 0


def wait_port_free(port: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not port_is_free(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, read from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(pgrp) == pgid and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def wait_group_gone(pgid: int, timeout_s: float = 5.0) -> list[int]:
    """Wait until no live process is left in the group; return those still left."""
    deadline = time.monotonic() + timeout_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


class ProcessLauncher:
    """A local server process in its own process group (engines fork workers that outlive
    their parent; killing the group is the only reliable way to free GPU and port)."""

    kind = "process"

    def __init__(self, candidate: Candidate, log_path: Path, redactor: Redactor, port: int = 0):
        self.candidate = candidate
        self.port = port or candidate.launch.get("port", 0) or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = LogSink(log_path, redactor)
        self._redactor = redactor
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped: StopReport | None = None

    def argv(self) -> list[str]:
        return self.candidate.argv(port=self.port)

    def plan(self) -> str:
        env = " ".join(
            f"{k}={shlex.quote(v)}" for k, v in self._redactor.mapping(self.candidate.env()).items()
        )
        command = shlex.join(self._redactor.argv(self.argv()))
        return f"{env} {command}".strip()

    def start(self) -> None:
        if not port_is_free(self.port):
            from .exceptions import ServerError

            raise ServerError(
                f"port {self.port} on 127.0.0.1 is already in use", candidate=self.candidate.name
            )
        env = {**os.environ, **self.candidate.env()}
        self._proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        stdout = self._proc.stdout
        assert isinstance(stdout, io.BufferedReader)
        # read1: whatever is there now, so a line reaches the log as soon as it is written.
        self.log.pump(iter(lambda: stdout.read1(65536), b""))

    def poll(self) -> Exited | None:
        if self._proc is None:
            return None
        code = self._proc.poll()
        return None if code is None else Exited(code)

    def stop(self, timeout_s: float | None = None) -> StopReport:
        if self._stopped is not None or self._proc is None:
            return self._stopped or StopReport()
        timeout_s = timeout_s or float(self.candidate.launch.get("stop_timeout_s", 15))
        began = time.monotonic()
        how = "already exited" if self._proc.poll() is not None else "SIGTERM"
        self._signal_group(signal.SIGTERM)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            how = "SIGKILL after SIGTERM timeout"
        # Children may outlive the leader (schedulers reparent to PID 1): kill the group anyway.
        self._signal_group(signal.SIGKILL)
        self._proc.wait()
        left = wait_group_gone(self._proc.pid)  # SIGKILL is asynchronous: see them gone
        self.log.join()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stopped = StopReport(
            how=how,
            seconds=round(time.monotonic() - began, 3),
            port_free=wait_port_free(self.port),
            extra={"exit_code": self._proc.returncode, "group_left": left},
        )
        return self._stopped

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def identity(self) -> dict[str, Any]:
        return {
            "launcher": self.kind,
            "pid": self._proc.pid if self._proc else None,
            "argv": self._redactor.argv(self.argv()),
            "env": self._redactor.mapping(self.candidate.env()),
            "base_url": self.base_url,
        }
