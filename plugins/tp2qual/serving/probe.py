"""Run the stand-alone collective probe where the candidate's engine runs, with the engine's
backend: the engine's own Python for a process candidate, the candidate's own image (same GPUs,
IPC and NCCL environment) for a Docker candidate; ``nccl`` on GPUs, ``gloo`` for a CPU
candidate (``[gpus] count = 0``: vLLM's CPU engine runs its TP ranks over gloo). The probe file
is stdlib-only, so it is mounted into the image as it is."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tp2qual.candidate import Candidate
from tp2qual.candidate_file import fill
from tp2qual.launch import resolve_launch
from tp2qual.serving import nccl_probe

PROBE_FILE = Path(nccl_probe.__file__)
IN_IMAGE = "/tmp/tp2qual_nccl_probe.py"


@dataclass(frozen=True)
class ProbeRun:
    argv: list[str]
    returncode: int
    output: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode in (124, 137)


def backend_of(candidate: Candidate) -> str:
    """The engine's collective backend: ``[gates.nccl] backend`` when stated, else gloo when the
    candidate has no GPU and NCCL when it has."""
    stated = candidate.gate("nccl").get("backend")
    return str(stated) if stated else "gloo" if int(candidate.gpus.get("count", 0)) == 0 else "nccl"


def probe_argv(
    candidate: Candidate, timeout_s: float, *, run_id: str = "probe", device_ids: Sequence[str] = ()
) -> list[str]:
    """The probe's command: the suite's Python for a process candidate; for a Docker candidate
    ``docker run`` with the server's own run arguments (``docker_run.probe_kwargs``)."""
    backend = backend_of(candidate)
    args = ["--nprocs", str(candidate.tp), "--timeout", str(int(timeout_s)), "--backend", backend]
    if own := candidate.gate("nccl").get("probe_command"):  # the operator's own probe
        values = {"python": str(candidate.python()), "probe": str(PROBE_FILE),
                  "nprocs": str(candidate.tp), "timeout": str(int(timeout_s)),
                  "backend": backend}  # fmt: skip
        return [fill(part, values) for part in own]
    if candidate.launcher_kind != "docker":
        # The engine's Python: its torch is the one whose backend is being vouched for.
        return [str(candidate.python()), str(PROBE_FILE), *args]
    from tp2qual.serving.launchers.docker.run_args import (
        probe_kwargs,
        render_docker_run,
        run_kwargs,
    )

    server = run_kwargs(resolve_launch(candidate, run_id=run_id, device_ids=device_ids))
    return shlex.split(render_docker_run(probe_kwargs(server, PROBE_FILE, IN_IMAGE, args)))


def run_probe(
    candidate: Candidate, timeout_s: float, *, run_id: str = "probe", device_ids: Sequence[str] = ()
) -> ProbeRun:
    """Run it bounded in time (the probe kills its ranks at ``timeout_s``; we allow a grace)."""
    argv = probe_argv(candidate, timeout_s, run_id=run_id, device_ids=device_ids)
    env = {**os.environ, **candidate.env(), "NCCL_DEBUG": "INFO"}
    began = time.monotonic()
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=timeout_s + 30, check=False
        )
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code = 124
        output = (exc.stdout or "") + (exc.stderr or "") if isinstance(exc.stdout, str) else ""
    return ProbeRun(argv, code, output, round(time.monotonic() - began, 3))
