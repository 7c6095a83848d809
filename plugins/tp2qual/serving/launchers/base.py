"""Launchers: one small protocol, followed by the local-process and the Docker launcher alike.

Constructors only store settings; ``start()`` launches; ``stop()`` is safe to call twice and
always leaves nothing running. ``LauncherBase`` holds what every launcher shares: the candidate,
its loopback port and URL, the log sink, the redactor, and the "port already in use" refusal.
Readiness lives in ``serving/readiness.py`` and works on any launcher.
"""

from __future__ import annotations

import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tp2qual.candidate import Candidate
from tp2qual.exceptions import PortInUse
from tp2qual.launch import ResolvedLaunch
from tp2qual.launch import free_port as free_port  # tunnels and self-tests pick ports with it
from tp2qual.redact import Redactor
from tp2qual.serving.logsink import LogSink


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
    launch: ResolvedLaunch
    base_url: str
    log: LogSink

    def start(self) -> None: ...
    def poll(self) -> Exited | None: ...
    def stop(self) -> StopReport: ...
    def identity(self) -> dict[str, Any]: ...
    def plan(self) -> str: ...


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


class LauncherBase:
    """Settings every launcher has; constructing one starts nothing (``--plan`` relies on it).
    ``launch``: the candidate's resolved launch (tp2qual.launch), the only argv it starts."""

    kind = "base"

    def __init__(
        self, candidate: Candidate, launch: ResolvedLaunch, log_path: Path, redactor: Redactor
    ):
        self.candidate = candidate
        self.launch = launch
        self.port = launch.port
        self.base_url = launch.base_url
        self.log = LogSink(log_path, redactor)
        self._redactor = redactor
        self._stopped: StopReport | None = None

    @property
    def stop_timeout_s(self) -> float:
        return float(self.candidate.launch.get("stop_timeout_s", 15))

    def refuse_busy_port(self) -> None:
        """Only loopback is ever a target, and a port someone else holds is not ours to use.
        Refused before anything starts, as the host's state, never the candidate's FAIL."""
        if not port_is_free(self.port):
            how = "launch.port" if self.candidate.launch.get("port") else "chosen free, taken since"
            raise PortInUse(
                f"port {self.port} on 127.0.0.1 ({how}) is already in use by another process: "
                "nothing was started; free it, or leave launch.port unset",
                candidate=self.candidate.name,
            )
