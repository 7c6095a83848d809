"""The hand-over's rules: which containers the user named, what state each is in, whether the
return is possible, and whether it came back. Pure: inspect dicts and records in, words out.

The user's workstation runs a live serve on both GPUs; a campaign may take the GPUs over only
from serves the user names, and must give them back exactly as found (their own campaign records
``final-restore.json``, schema ``anvil-serving.final-state/v1``: each serve's container state and
health). The Docker reads and writes are ``serving/handover.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.gpu_holders import COMPOSE_PROJECT, gpu_claim
from tp2qual.checks.verdict import Verdict

SCHEMA = "tp2qual.handover/v1"
NAME, LABEL, PROJECT = "name", "label", "project"
# Bounds when the user names none: a stop lets a serve close its requests (Docker's own default
# is 10 s; vLLM drains in a few), and a 1M-context TP2 serve loads in minutes (the campaign's
# readiness_timeout_s is 1800).
STOP_TIMEOUT_S = 120.0
HEALTHY_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Selector:
    """One way the user names serves: a container name, a label ``k=v`` or a compose project."""

    kind: str
    value: str

    def __str__(self) -> str:
        return self.value if self.kind == NAME else f"{self.kind}={self.value}"


def parse_selector(text: str, where: str) -> Selector:
    """``NAME``, ``label=KEY=VALUE`` or ``project=NAME``; ValueError names ``where``."""
    kind, sep, value = text.partition("=")
    if not sep:
        kind, value = NAME, text
    if kind not in (NAME, LABEL, PROJECT) or not value.strip():
        raise ValueError(
            f"{where}: {text!r} names no serve: give a container name, label=KEY=VALUE or"
            " project=COMPOSE_PROJECT"
        )
    if kind == LABEL and "=" not in value:
        raise ValueError(f"{where}: {text!r}: a label is named as label=KEY=VALUE")
    return Selector(kind, value.strip())


def matches(selector: Selector, attrs: Mapping[str, Any]) -> bool:
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    if selector.kind == NAME:
        return str(attrs.get("Name") or "").lstrip("/") == selector.value
    if selector.kind == PROJECT:
        return labels.get(COMPOSE_PROJECT) == selector.value
    key, _, value = selector.value.partition("=")
    return labels.get(key) == value


def state_of(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """What the record keeps of one container: what ``docker start`` must bring back."""
    state = attrs.get("State") or {}
    config = attrs.get("Config") or {}
    host = attrs.get("HostConfig") or {}
    health = state.get("Health") or {}
    return {
        "name": str(attrs.get("Name") or "").lstrip("/"),
        "id": attrs.get("Id"),
        "status": state.get("Status"),
        "health": health.get("Status"),  # None: no Docker healthcheck
        "has_healthcheck": bool((config.get("Healthcheck") or {}).get("Test"))
        and (config.get("Healthcheck") or {}).get("Test") != ["NONE"],
        "image": config.get("Image"),
        "image_id": attrs.get("Image"),
        "restart_policy": (host.get("RestartPolicy") or {}).get("Name") or "no",
        "gpu_requests": gpu_claim(host),
        "compose_project": (config.get("Labels") or {}).get(COMPOSE_PROJECT),
        "started_at": state.get("StartedAt"),
    }


def unnamed_problems(selectors: Iterable[Selector], found: Mapping[str, list[str]]) -> list[str]:
    """Each selector must name at least one container: a typo never silently hands over nothing."""
    return [
        f"hand-over {s}: no container on this Docker engine matches it"
        for s in selectors
        if not found.get(str(s))
    ]


def return_problems(
    before: Iterable[Mapping[str, Any]], images_present: Mapping[str, bool], urls: Mapping[str, str]
) -> list[str]:
    """Why the return would not be possible, checked before anything stops: an image no longer
    present locally cannot be started again ("a rollback that cannot pull is a false safety
    net", the user's ticket of 2026-08-06), and a running serve with no way to prove it healthy
    could come back broken unseen."""
    problems = []
    for state in before:
        name = state["name"]
        if not images_present.get(str(state.get("image_id")), False):
            problems.append(
                f"{name}: its image {state.get('image')} ({state.get('image_id')}) is no longer"
                " present locally, so it could not be started again: nothing was stopped"
            )
        if state["status"] == "running" and not state["has_healthcheck"] and name not in urls:
            problems.append(
                f"{name}: no Docker healthcheck and no health URL named, so its return could not"
                f" be proven: name one (--hand-over-url {name}=http://HOST:PORT/v1/models or"
                " [handover] health_urls); nothing was stopped"
            )
    return problems


def to_stop(before: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The containers to stop: those running (a stopped one is recorded, and left as it is)."""
    return [s for s in before if s.get("status") in ("running", "restarting", "paused")]


def reached(before: Mapping[str, Any], after: Mapping[str, Any] | None) -> str:
    """Empty when ``after`` is the state ``before`` recorded; else what differs."""
    if after is None:
        return "not found after the run (removed?)"
    differs = []
    if after.get("status") != before.get("status"):
        differs.append(f"status {before.get('status')} before, {after.get('status')} now")
    if before.get("health") == "healthy" and after.get("health") != "healthy":
        differs.append(f"health healthy before, {after.get('health')} now")
    if after.get("image_id") != before.get("image_id"):
        differs.append(f"image {before.get('image_id')} before, {after.get('image_id')} now")
    if after.get("url_answered") is False:
        differs.append(f"its health URL did not answer: {after.get('url_error')}")
    return "; ".join(differs)


def restore_commands(state: Mapping[str, Any], url: str | None) -> list[str]:
    """The exact commands that bring one container back by hand, and show it healthy."""
    name = state["name"]
    commands = [f"docker start {name}"]
    if state.get("has_healthcheck"):
        commands.append(f"docker inspect --format '{{{{.State.Health.Status}}}}' {name}")
    elif url:
        commands.append(f"curl -fsS {url}")
    return commands


def judge_restored(record: Mapping[str, Any]) -> Verdict:
    """Each container handed over is back in the state recorded before; the reason names the
    container, both states and the commands to restore it by hand."""
    before = list(record.get("before") or [])
    after_list = record.get("after")
    if after_list is None:
        return Verdict.failed(
            "the serves handed over were never given back: "
            + ", ".join(s["name"] for s in to_stop(before)),
            not_restored=[s["name"] for s in to_stop(before)],
        )
    after = {s.get("id"): s for s in after_list if s}  # None: gone from the engine
    urls = record.get("health_urls") or {}
    failures, commands = [], []
    for state in before:
        why = reached(state, after.get(state.get("id")))
        if why:
            fix = restore_commands(state, urls.get(state["name"]))
            failures.append(f"{state['name']}: {why} -> restore it by hand: {' && '.join(fix)}")
            commands += fix
    measures = {"not_restored": [f.partition(":")[0] for f in failures], "commands": commands}
    if failures:
        return Verdict.failed("not restored: " + "; ".join(failures), **measures)
    return Verdict.passed(**measures)
