"""The local-process launcher: a server process in its own process group."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.launch import ResolvedLaunch, resolve_launch
from tp2qual.redact import Redactor
from tp2qual.serving.interrupts import interrupts_deferred
from tp2qual.serving.launchers.base import (
    Exited,
    LauncherBase,
    StopReport,
    wait_group_gone,
    wait_port_free,
)


class ProcessLauncher(LauncherBase):
    """A local server process in its own process group (engines fork workers that outlive
    their parent; killing the group is the only reliable way to free GPU and port)."""

    kind = "process"

    def __init__(
        self,
        candidate: Candidate,
        log_path: Path,
        redactor: Redactor,
        port: int = 0,
        *,
        launch: ResolvedLaunch | None = None,
    ):
        launch = launch or resolve_launch(candidate, port=port)
        super().__init__(candidate, launch, log_path, redactor)
        self._proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return list(self.launch.argv)

    def plan(self) -> str:
        env = " ".join(
            f"{k}={shlex.quote(v)}" for k, v in self._redactor.mapping(self.launch.env).items()
        )
        command = shlex.join(self._redactor.argv(self.argv()))
        return f"{env} {command}".strip()

    def start(self) -> None:
        self.refuse_busy_port()
        env = {**os.environ, **self.launch.env}
        with interrupts_deferred():  # once forked, the pid must be ours to stop
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
        timeout_s = timeout_s or self.stop_timeout_s
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

    @property
    def pid(self) -> int:
        """The server process (leader of its group); 0 before the start."""
        return self._proc.pid if self._proc is not None else 0

    def identity(self) -> dict[str, Any]:
        return {
            "launcher": self.kind,
            "pid": self._proc.pid if self._proc else None,
            "argv": self._redactor.argv(self.argv()),
            "env": self._redactor.mapping(dict(self.launch.env)),
            "model_pin": dict(self.launch.model_pin),
            "base_url": self.base_url,
        }
