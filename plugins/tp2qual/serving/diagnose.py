"""Why a candidate's server or NCCL probe failed: the diagnosis engine (``checks.diagnosis``) run
on the log the failure left, with the settings that were in force for that candidate — its
launch environment, its container's IPC and /dev/shm settings, and the host facts (WSL2) from
its identity — so every remedy fits what was already set."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.checks.diagnosis import FAILURE, INCOMPLETE, Diagnosis, diagnose
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
        "command": _command(candidate),
    }


def _command(candidate: Candidate) -> list[str]:
    """The engine's command with the placeholders a remedy may quote filled as the launch fills
    them (``--max-model-len {max_model_len}``); ports and paths stay as written."""
    known = {"{max_model_len}": str(candidate.max_model_len), "{tp}": str(candidate.tp)}
    out = []
    for part in candidate.command:
        for key, value in known.items():
            part = part.replace(key, value)
        out.append(part)
    return out


def diagnose_log(
    path: Path, candidate: Candidate, identity: dict[str, Any], *, server_failed: bool = False
) -> Diagnosis | None:
    """The diagnosis of ``path`` when it names something; None for a missing or silent log.
    ``server_failed``: the server did not start or did not stay up (exited, timed out, died),
    so it failed whatever the log says: a failure no rule names is "cause not recognised",
    never "ok". Otherwise (a gate failed on a serving server) the log's own errors are no
    verdict on the start, and only what a rule names is kept."""
    if not path.is_file():
        return None
    # The sink flushes every line, so the file's age is how long the log has been silent.
    quiet_s = time.time() - path.stat().st_mtime
    text = path.read_text(errors="replace")
    found = diagnose(
        text, quiet_s=quiet_s, failed=server_failed, **settings_in_force(candidate, identity)
    )
    if not server_failed:
        found = _named_only(found)
    return found if found.failures or found.verdict != "ok" else None


def _named_only(found: Diagnosis) -> Diagnosis:
    kept = tuple(f for f in found.findings if f.rule != "unrecognised_failure")
    if len(kept) == len(found.findings):
        return found
    severities = {f.severity for f in kept}
    verdict = next((v for s, v in _VERDICTS if s in severities), "ok")
    return replace(found, verdict=verdict, findings=kept)


_VERDICTS = ((FAILURE, "failed"), (INCOMPLETE, "incomplete"))
