"""The hand-over on the Docker engine: record the named serves, stop them within a bound (never
remove), and start them again in recorded order, each waited for until healthy within a bound.

The record (``handover.json`` in the run folder) is written before anything stops and again after
each step, so ``python -m tp2qual restore RUN`` can give the serves back from it when the suite
itself was killed. The rules (who is named, what "restored" means) are ``checks/handover.py``'s.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tp2qual.checks import handover as rules
from tp2qual.checks.handover import Selector

RECORD = "handover.json"
POLL_S = 1.0
URL_TIMEOUT_S = 10.0


class HandOverRefused(Exception):
    """The hand-over cannot be done safely; nothing was stopped. One message, names what."""


@dataclass(frozen=True)
class HandOverPlan:
    """What the user named, and the bounds the stop and the return are held to."""

    selectors: tuple[Selector, ...]
    health_urls: Mapping[str, str] = field(default_factory=dict)
    stop_timeout_s: float = rules.STOP_TIMEOUT_S
    healthy_timeout_s: float = rules.HEALTHY_TIMEOUT_S


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def write_record(path: Path, record: Mapping[str, Any]) -> None:
    """Atomically: a kill mid-write never leaves a record ``restore`` cannot read."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_record(path: Path) -> dict[str, Any]:
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise HandOverRefused(
            f"{path}: no hand-over record here (nothing was handed over)"
        ) from exc
    except ValueError as exc:
        raise HandOverRefused(f"{path}: unreadable hand-over record: {exc}") from exc
    if body.get("schema") != rules.SCHEMA:
        raise HandOverRefused(f"{path}: schema {body.get('schema')!r}, expected {rules.SCHEMA}")
    return dict(body)


def gpus_free() -> Any:
    """Each GPU's free memory (MiB) as NVML reads it now, or why it could not."""
    from tp2qual import gpu

    snap = gpu.snapshot()
    if not snap.get("nvml_available"):
        return f"not read: {snap.get('error') or 'NVML unavailable'}"
    return [
        {"index": g.get("index"), "free_mib": round(_free_bytes(g) / 2**20)}
        for g in snap.get("gpus") or []
    ]


def _free_bytes(gpu: Mapping[str, Any]) -> int:
    return int((gpu.get("memory_total_bytes") or 0) - (gpu.get("memory_used_bytes") or 0))


def find_named(client: Any, selectors: tuple[Selector, ...]) -> list[Any]:
    """The containers the selectors name, in the order named, each once; refused when a
    selector names none."""
    every = client.containers.list(all=True)
    found: dict[str, list[str]] = {}
    chosen: dict[str, Any] = {}
    for selector in selectors:
        hits = [c for c in every if rules.matches(selector, c.attrs)]
        found[str(selector)] = [c.name for c in hits]
        for container in sorted(hits, key=lambda c: c.name):
            chosen.setdefault(container.id, container)
    if problems := rules.unnamed_problems(selectors, found):
        raise HandOverRefused("; ".join(problems))
    return list(chosen.values())


def _image_present(client: Any, image_id: str) -> bool:
    import docker.errors

    try:
        client.images.get(image_id)
    except docker.errors.ImageNotFound:
        return False
    return True


def hand_over(
    client: Any, plan: HandOverPlan, path: Path, gpus_free: Callable[[], Any]
) -> dict[str, Any]:
    """Record, check the return is possible, then stop the running named serves. Raises
    HandOverRefused (nothing stopped) when the return could not be made."""
    named = find_named(client, plan.selectors)
    before = [rules.state_of(c.attrs) for c in named]
    present = {str(s["image_id"]): _image_present(client, str(s["image_id"])) for s in before}
    if problems := rules.return_problems(before, present, plan.health_urls):
        raise HandOverRefused("the hand-over is refused: " + "; ".join(problems))
    record: dict[str, Any] = {
        "schema": rules.SCHEMA,
        "selectors": [str(s) for s in plan.selectors],
        "health_urls": dict(plan.health_urls),
        "stop_timeout_s": plan.stop_timeout_s,
        "healthy_timeout_s": plan.healthy_timeout_s,
        "recorded_at": _now(),
        "gpus_before": gpus_free(),
        "before": before,
        "stops": [],
        "after": None,
    }
    write_record(path, record)  # before anything stops: restore can always start from it
    by_id = {c.id: c for c in named}
    for state in rules.to_stop(before):
        record["stops"].append(_stop(by_id[state["id"]], plan.stop_timeout_s))
        write_record(path, record)
    record["stopped_at"] = _now()
    record["gpus_stopped"] = gpus_free()
    write_record(path, record)
    return record


def _stop(container: Any, bound_s: float) -> dict[str, Any]:
    """``docker stop`` within the bound (SIGTERM, then SIGKILL at the bound); never removed."""
    began = time.monotonic()
    container.stop(timeout=int(bound_s))
    container.reload()
    status = container.attrs.get("State", {}).get("Status")
    if status not in ("exited", "created"):
        raise HandOverRefused(
            f"{container.name}: still {status} after docker stop with a {bound_s:g} s bound"
        )
    return {"name": container.name, "seconds": round(time.monotonic() - began, 2), "at": _now()}


def give_back(
    client: Any, path: Path, gpus_free: Callable[[], Any], say: Callable[[str], None]
) -> dict[str, Any]:
    """Start the recorded serves again in recorded order, each waited for until healthy within
    the bound, and record the after-state beside the before-state with the verdict."""
    record = read_record(path)
    urls = record.get("health_urls") or {}
    bound = float(record.get("healthy_timeout_s") or rules.HEALTHY_TIMEOUT_S)
    stopped = {s["name"] for s in record.get("stops") or []}
    after = []
    for state in record["before"]:
        if state["name"] in stopped or rules.to_stop([state]):
            say(f"starting {state['name']} again (healthy within {bound:g} s)")
        after.append(_bring_back(client, state, urls.get(state["name"]), bound))
    record["after"] = after
    record["restored_at"] = _now()
    record["gpus_after"] = gpus_free()
    record["down_s"] = _down_s(record)
    verdict = rules.judge_restored(record)
    record["restored"] = verdict.ok
    record["problems"] = verdict.reason
    record["commands"] = verdict.measures.get("commands", [])
    write_record(path, record)
    return record


def _bring_back(client: Any, state: Mapping[str, Any], url: str | None, bound: float) -> Any:
    import docker.errors

    try:
        container = client.containers.get(state["id"])
    except docker.errors.NotFound:
        return None
    if rules.to_stop([state]) and container.status != "running":
        try:
            container.start()
        except docker.errors.APIError as exc:
            return {**rules.state_of(container.attrs), "start_error": str(exc)}
    began = time.monotonic()
    checked = _wait_healthy(container, state, url, began + bound)
    container.reload()
    return {**rules.state_of(container.attrs), **checked,
            "healthy_after_s": round(time.monotonic() - began, 2)}  # fmt: skip


def _wait_healthy(
    container: Any, state: Mapping[str, Any], url: str | None, deadline: float
) -> dict[str, Any]:
    """Docker's healthcheck where the container has one, else a real request to its URL."""
    if not rules.to_stop([state]):
        return {}
    while True:
        container.reload()
        status = container.attrs.get("State") or {}
        if status.get("Status") != "running":
            return {}  # exited again: the judge names its status
        if state.get("has_healthcheck"):
            if (status.get("Health") or {}).get("Status") == "healthy":
                return {}
        elif url and _url_error(url) is None:
            return {"url_answered": True}
        if time.monotonic() >= deadline:
            if state.get("has_healthcheck"):
                return {}
            return {"url_answered": False, "url_error": _url_error(url or "")}
        time.sleep(POLL_S)


def _url_error(url: str) -> str | None:
    """None when the URL answers a GET with 2xx; else why not."""
    try:
        with urllib.request.urlopen(url, timeout=URL_TIMEOUT_S) as response:
            response.read()
            return None if 200 <= response.status < 300 else f"HTTP {response.status}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _down_s(record: Mapping[str, Any]) -> float | None:
    """From the first stop's start to the last serve back: how long the serves were down."""
    stops = record.get("stops") or []
    if not stops:
        return None
    first = datetime.fromisoformat(stops[0]["at"]).timestamp() - float(stops[0]["seconds"])
    return round(datetime.fromisoformat(record["restored_at"]).timestamp() - first, 2)


def restore_run(run_dir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """``python -m tp2qual restore RUN``: give back from the record a run left (the suite was
    killed), then hash the run folder again so verify still holds (the record changed)."""
    from tp2qual.artifacts.layout import MANIFEST, read_json_object, write_manifest
    from tp2qual.serving.launchers.docker.engine import docker_client, unavailable

    path = run_dir / RECORD
    record = read_record(path)
    if record.get("restored"):
        say(f"{path}: already restored at {record.get('restored_at')}; nothing to do")
        return record
    if why := unavailable():
        raise HandOverRefused(f"cannot restore from {path}: {why}")
    with docker_client() as client:
        record = give_back(client, path, gpus_free, say)
    meta = {k: v for k, v in read_json_object(run_dir / MANIFEST).items() if k != "files"}
    write_manifest(run_dir, **meta)
    return record
