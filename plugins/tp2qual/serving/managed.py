"""One object owns a server's whole life: pins checked, started, ready, identified, stopped, and
the teardown kept as evidence. The pytest fixture and the benchmarks both use it, so there is
one life cycle to read and to trust.

    with ManagedServer(candidate, evidence, launcher) as server:
        server.api("gate.jsonl").chat(...)

``__enter__`` proves the model pin (before anything starts: a wrong file is one clear error),
starts the launcher, writes ``launch.json`` once (argv, environment, pid, the exact plan — also
when the start itself failed), waits for readiness (alive + listed + one real token), asks the
engine what it is, and returns the ready ``Server``. ``__exit__`` always stops the launcher and
writes ``teardown.json``; a failed start is stopped the same way before the error propagates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tp2qual.artifacts.layout import Evidence
from tp2qual.candidate import Candidate
from tp2qual.launch import ResolvedLaunch, resolve_launch
from tp2qual.redact import Redactor
from tp2qual.serving.identity import engine_identity, model_identity
from tp2qual.serving.interrupts import interrupts_deferred
from tp2qual.serving.launchers.base import Launcher, StopReport
from tp2qual.serving.readiness import Readiness, wait_ready
from tp2qual.serving.server import Server

Progress = Callable[[float, str], None]
READINESS = "readiness.json"


def build_launcher(
    candidate: Candidate,
    log_path: Path,
    redactor: Redactor,
    *,
    run_id: str,
    pull: bool = False,
    device_ids: Sequence[str] = (),
    wsl2: bool | None = None,
    launch: ResolvedLaunch | None = None,
) -> Launcher:
    """The candidate's launcher; constructing it starts nothing (``--plan`` relies on that).
    ``launch``: the run's resolved launch (else resolved here from ``run_id``, ``device_ids``
    and ``wsl2``, whether the serving host runs WSL2, when known from its GPU snapshot)."""
    launch = launch or resolve_launch(candidate, run_id=run_id, device_ids=device_ids, wsl2=wsl2)
    if launch.container is not None:
        from tp2qual.serving.launchers.docker.launcher import DockerLauncher

        return DockerLauncher(
            candidate, log_path, redactor, run_id=run_id, pull=pull, launch=launch
        )
    from tp2qual.serving.launchers.process import ProcessLauncher

    return ProcessLauncher(candidate, log_path, redactor, launch=launch)


class ManagedServer:
    def __init__(
        self,
        candidate: Candidate,
        evidence: Evidence,
        launcher: Launcher,
        *,
        model: dict[str, Any] | None = None,
        progress: Progress | None = None,
    ):
        self.candidate = candidate
        self.evidence = evidence
        self.launcher = launcher
        self.progress = progress
        self.identity: dict[str, Any] = {"model": model} if model else {}
        self.readiness: Readiness | None = None
        self.stopped: StopReport | None = None
        self._server: Server | None = None

    def __enter__(self) -> Server:
        try:
            return self._start()
        except BaseException:
            self._teardown()
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._teardown()

    def _start(self) -> Server:
        if "model" not in self.identity:  # raises PinMismatch before anything starts
            self.identity["model"] = model_identity(self.candidate)
            self.evidence.write_json("identity/model.json", self.identity["model"])
        plan = self.launcher.plan()
        try:
            self.launcher.start()
        finally:
            self.identity["launch"] = self.launcher.identity()
            self.evidence.write_json("launch.json", self.identity["launch"] | {"plan": plan})
        self.readiness = Readiness()
        try:
            wait_ready(
                self.launcher,
                served_name=self.candidate.served_name,
                timeout_s=self.candidate.readiness_timeout_s,
                state=self.readiness,
                **({"progress": self.progress} if self.progress else {}),
            )
        finally:  # a failed start is recorded too: verify judges it again (checks.readiness)
            self.evidence.write_json(READINESS, self.readiness.as_dict())
        self.identity["engine"] = engine_identity(
            self.candidate, self.launcher.base_url, self.identity["launch"]
        )
        self.evidence.write_json("identity/engine.json", self.identity["engine"])
        self._server = Server(self.candidate, self.launcher, self.evidence)
        return self._server

    def _teardown(self) -> None:
        with interrupts_deferred():  # a second Ctrl-C must not leave the server half-stopped
            if self._server is not None:
                self._server.close()
            if self.stopped is None:
                self.stopped = self.launcher.stop()
                self.evidence.write_json("teardown.json", vars(self.stopped))
