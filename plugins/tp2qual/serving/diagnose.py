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


def settings_in_force(candidate: Candidate, identity: dict[str, Any]) -> dict[str, Any]:
    """``diagnose`` keyword arguments: env, container (None for a local process), host, tp."""
    container = None
    if candidate.launcher_kind == "docker":
        docker = candidate.launch.get("docker", {})
        # The launcher gives the host's IPC namespace for either setting (launchers/docker).
        shared = bool(docker.get("ipc_host") or docker.get("shm_size"))
        container = {"ipc_host": shared, "shm_size": docker.get("shm_size"), "gpus": "all"}
    host = serving_host(identity)
    return {
        "tp": candidate.tp,
        "env": candidate.env(),
        "container": container,
        "host": {"wsl2": bool(host.get("wsl2"))} if "wsl2" in host else None,
    }


def serving_host(identity: dict[str, Any]) -> dict[str, Any]:
    """Facts of the machine that ran the server: the GPU snapshot's host (read there by a probe
    container when the run spreads over Docker hosts), else the machine running pytest."""
    read_there = (identity.get("topology") or {}).get("host") or {}
    return read_there if read_there.get("wsl2") is not None else identity.get("host") or {}


def diagnose_log(path: Path, candidate: Candidate, identity: dict[str, Any]) -> Diagnosis | None:
    """The diagnosis of ``path`` when it names something; None for a missing or silent log."""
    if not path.is_file():
        return None
    # The sink flushes every line, so the file's age is how long the log has been silent.
    quiet_s = time.time() - path.stat().st_mtime
    text = path.read_text(errors="replace")
    found = diagnose(text, quiet_s=quiet_s, **settings_in_force(candidate, identity))
    return found if found.failures or found.verdict != "ok" else None
