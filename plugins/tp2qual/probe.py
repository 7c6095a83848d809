"""Run the stand-alone NCCL probe where the candidate's engine runs: the local environment for
a process candidate, the candidate's own image (same GPUs, IPC and NCCL environment) for a
Docker candidate. The probe file is stdlib-only, so it is mounted into the image as it is."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import nccl_probe
from .candidate import Candidate

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


def probe_argv(candidate: Candidate, timeout_s: float) -> list[str]:
    args = ["--nprocs", str(candidate.tp), "--timeout", str(int(timeout_s))]
    if candidate.launcher_kind != "docker":
        return [sys.executable, str(PROBE_FILE), *args]
    docker = candidate.launch["docker"]
    env = [f"--env={k}={v}" for k, v in sorted(candidate.env().items())]
    shm = ["--ipc=host"] if docker.get("ipc_host", True) else [f"--shm-size={docker['shm_size']}"]
    return [
        "docker",
        "run",
        "--rm",
        "--network=host",
        "--gpus=all",
        *shm,
        *env,
        f"--volume={PROBE_FILE}:{IN_IMAGE}:ro",
        "--entrypoint=python3",
        "--label=tp2qual.probe=1",
        docker["image"],
        IN_IMAGE,
        *args,
    ]


def run_probe(candidate: Candidate, timeout_s: float) -> ProbeRun:
    """Run it bounded in time (the probe kills its ranks at ``timeout_s``; we allow a grace)."""
    argv = probe_argv(candidate, timeout_s)
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
