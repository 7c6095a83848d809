"""Container state and session hygiene: Docker state to ``Exited``, redacted inspect, sweeping
leftovers of crashed runs by label, and listing containers that hold GPUs."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tp2qual.launch import RUN_LABEL, SESSION, SESSION_LABEL
from tp2qual.redact import MASK, is_secret_name
from tp2qual.serving.launchers.base import Exited

log = logging.getLogger(__name__)


def exited_from_state(state: Mapping[str, Any]) -> Exited | None:
    """Docker's container State -> Exited, or None while it is running (or about to)."""
    status = state.get("Status", "")
    if status in ("running", "created", "restarting", "paused"):
        return None
    code = state.get("ExitCode")
    details = [f"container {status}"]
    if isinstance(code, int) and code > 128:
        details.append(f"signal {code - 128} (128+n)")
    if state.get("Error"):
        details.append(str(state["Error"]))
    return Exited(code, oom_killed=bool(state.get("OOMKilled")), detail=", ".join(details))


def redact_inspect(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``docker inspect`` JSON with secret-named environment values masked."""
    out = json.loads(json.dumps(attrs, default=str))
    config = out.get("Config") or {}
    env = config.get("Env") or []
    config["Env"] = [
        f"{k}={MASK}" if is_secret_name(k) else f"{k}={v}"
        for k, _, v in (e.partition("=") for e in env)
    ]
    return out


# ---------------------------------------------------------------------------------------------
# Session hygiene


def sweep(
    client: Any,
    *,
    reason: str,
    keep_run: str | None = None,
    only_session: str | None = None,
    only_run: str | None = None,
    save_to: Path | None = None,
) -> list[str]:
    """Remove containers labelled ``tp2qual.run`` and return what was removed.

    At session start pass ``keep_run=<this run>``: leftovers of earlier runs go, except those
    whose session process is still alive on this host (another pytest is using them: the
    preflight busy check reports it). At session end pass ``only_session=SESSION``, or
    ``only_run=<this run>`` for everything of the run whichever process started it (hosts).
    With ``save_to``, each leftover's inspect JSON and last log lines are written there first.
    """
    removed = []
    for container in client.containers.list(all=True, filters={"label": RUN_LABEL}):
        labels = container.labels
        if keep_run is not None and labels.get(RUN_LABEL) == keep_run:
            continue
        if only_session is not None and labels.get(SESSION_LABEL) != only_session:
            continue
        if only_run is not None and labels.get(RUN_LABEL) != only_run:
            continue
        if (
            only_session is None
            and only_run is None
            and _session_alive(labels.get(SESSION_LABEL, ""))
        ):
            continue
        if save_to is not None:
            _save_leftover(container, save_to)
        container.remove(force=True, v=True)
        what = (
            f"{container.name} ({container.short_id}, run {labels.get(RUN_LABEL)}, "
            f"{container.status})"
        )
        log.info("removed %s: %s", what, reason)
        removed.append(what)
    return removed


def _session_alive(session: str) -> bool:
    host, _, rest = session.partition(":")
    pid = rest.partition(":")[0]
    if session == SESSION:
        return False
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _save_leftover(container: Any, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{container.name}.inspect.json").write_text(
        json.dumps(redact_inspect(container.attrs), indent=2, sort_keys=True) + "\n"
    )
    (folder / f"{container.name}.log").write_bytes(container.logs(tail=500))


def gpu_holders(client: Any, *, include_created: bool = False) -> list[dict[str, Any]]:
    """Containers that take GPUs (device requests, the nvidia runtime or /dev/nvidia*), judged by
    ``checks.gpu_holders.holder_of``: the running ones, and with ``include_created`` also those
    created and not started (what a CPU-only machine can show of a GPU serve)."""
    from tp2qual.checks.gpu_holders import holder_of

    filters = {"status": ["running", "created"]} if include_created else {}
    holders = []
    for container in client.containers.list(all=include_created, filters=filters):
        holder = holder_of(container.attrs)
        if holder is not None:
            holders.append({**holder, "ours": RUN_LABEL in container.labels})
    return holders


def gpu_holders_here() -> tuple[list[dict[str, Any]], str]:
    """The running GPU-holding containers of the engine ``DOCKER_HOST`` names, and how they
    were read; no engine is no holder, said so (never raises: gate 00 judges NVML without it)."""
    from tp2qual.serving.launchers.docker.engine import docker_client, engine_url, unavailable

    why = unavailable()
    if why is not None:
        return [], f"not read: no Docker engine ({why})"
    try:
        with docker_client() as client:
            return gpu_holders(client), f"read from the Docker engine at {engine_url()}"
    except Exception as exc:  # docker-py's errors are many; gate 00 still judges NVML's figures
        return [], f"not read: {type(exc).__name__}: {exc}"
