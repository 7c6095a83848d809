"""Why a candidate's server or NCCL probe failed: the diagnosis engine (``checks.diagnosis``) run
on the log the failure left, with the settings that were in force for that candidate — its
launch environment, its container's IPC and /dev/shm settings, and the host facts (WSL2) from
its identity — so every remedy fits what was already set."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.checks.diagnosis import Diagnosis, diagnose
from tp2qual.checks.nccl_gate import host_settings, serving_host

__all__ = ["diagnose_log", "serving_host", "settings_in_force"]


def settings_in_force(candidate: Candidate, identity: dict[str, Any]) -> dict[str, Any]:
    """``diagnose`` keyword arguments: env, container (None for a local process), host, tp, and
    the engine's command line (its flags: a remedy never asks for one already given).
    (``serving_host``: the facts of the machine that served, ``checks.nccl_gate``.)"""
    container = None
    if candidate.launcher_kind == "docker":
        docker = candidate.launch.get("docker", {})
        # The launcher gives the host's IPC namespace for either setting (launchers/docker).
        shared = bool(docker.get("ipc_host") or docker.get("shm_size"))
        container = {"ipc_host": shared, "shm_size": docker.get("shm_size"), "gpus": "all"}
    return {
        "tp": candidate.tp,
        "env": candidate.env(),
        "container": container,
        "host": host_settings(identity),
        "command": candidate.command,
    }


def diagnose_log(
    path: Path, candidate: Candidate, identity: dict[str, Any], *, exited: bool = False
) -> Diagnosis | None:
    """The diagnosis of ``path`` when it names something; None for a missing or silent log.
    ``exited``: the server process exited before it was ready, so the start failed whatever the
    log says (a failure no rule names is then "cause not recognised", never "ok")."""
    if not path.is_file():
        return None
    # The sink flushes every line, so the file's age is how long the log has been silent.
    quiet_s = time.time() - path.stat().st_mtime
    text = path.read_text(errors="replace")
    found = diagnose(text, quiet_s=quiet_s, failed=exited, **settings_in_force(candidate, identity))
    return found if found.failures or found.verdict != "ok" else None
