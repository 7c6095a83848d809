"""A lane's changes against its baseline: ``[lane.changes]`` applied on the launch it includes.

A lane (``[lane] after = "<baseline>"`` in a file that includes ``<baseline>.toml``) states only
what it changes, as a pytest fixture override redefines only what it changes: arguments added,
a flag's value replaced, flags removed, environment variables set or unset. The rest is the
baseline's, so a change to the baseline's flags reaches its lanes. A change that names a flag the
baseline lacks (replace, remove), adds one it already has, or unsets a variable it never set is
refused, naming the file and the field.

A flag is an argument that starts with ``--``; its values are the arguments after it up to the
next flag (``--flag=value`` carries its one value inline). Pure: no pytest, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tp2qual.redact import MASK, is_secret_name

# What a lane that includes its baseline may not restate: it says what changes instead.
_RESTATED = ("command", "append", "env")


@dataclass(frozen=True)
class Change:
    """One applied change: ``kind`` is added, replaced, removed, env set or env unset; the
    baseline's values before and the lane's after (empty where there is none)."""

    kind: str
    name: str
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Overlay:
    """The lane's launch with its changes applied, the changes, and what was refused."""

    launch: dict[str, Any]
    changes: tuple[Change, ...]
    problems: tuple[str, ...]


def _is_flag(arg: str) -> bool:
    return arg.startswith("--") and len(arg) > 2


def _spans(argv: Sequence[str], name: str) -> list[tuple[int, int]]:
    """Where ``name`` occurs: (start, end) of the flag and its values, end exclusive."""
    found = []
    for i, arg in enumerate(argv):
        if arg == name:
            end = i + 1
            while end < len(argv) and not _is_flag(argv[end]):
                end += 1
            found.append((i, end))
        elif arg.startswith(name + "="):
            found.append((i, i + 1))
    return found


def _values(argv: Sequence[str], span: tuple[int, int]) -> tuple[str, ...]:
    first = argv[span[0]]
    return (first.partition("=")[2],) if "=" in first else tuple(argv[span[0] + 1 : span[1]])


def _remove(argv: list[str], names: Sequence[str], problems: list[str]) -> list[Change]:
    changes = []
    for name in names:
        spans = _spans(argv, name)
        if not spans:
            problems.append(f"lane.changes.remove: {name} is not in the baseline's command")
        for span in reversed(spans):
            changes.append(Change("removed", name, before=_values(argv, span)))
            del argv[span[0] : span[1]]
    return changes


def _replace(argv: list[str], values: Mapping[str, str], problems: list[str]) -> list[Change]:
    changes = []
    for name, value in values.items():
        field = f"lane.changes.replace.{name}"
        spans = _spans(argv, name)
        if len(spans) != 1:
            problems.append(
                f"{field}: {name} is not in the baseline's command"
                if not spans
                else f"{field}: {name} occurs {len(spans)} times in the baseline's command"
            )
            continue
        start, end = spans[0]
        before = _values(argv, spans[0])
        if not before:
            problems.append(f"{field}: {name} takes no value in the baseline's command")
            continue
        argv[start:end] = [f"{name}={value}"] if "=" in argv[start] else [name, value]
        changes.append(Change("replaced", name, before=before, after=(value,)))
    return changes


def _add(argv: list[str], args: Sequence[str], problems: list[str]) -> list[Change]:
    for arg in (a for a in args if _is_flag(a)):
        name = arg.partition("=")[0]
        if _spans(argv, name):
            problems.append(
                f"lane.changes.add: {name} is already in the baseline's command (replace its "
                "value instead)"
            )
    changes = []
    seen_flag = False
    for arg in args:
        if _is_flag(arg):
            seen_flag, name = True, arg.partition("=")[0]
            span = next(s for s in _spans(args, name) if args[s[0]] == arg)
            changes.append(Change("added", name, after=_values(args, span)))
        elif not seen_flag:  # arguments before any flag: added as they stand
            changes.append(Change("added", arg))
    argv.extend(args)
    return changes


def _env(env: dict[str, str], changes: Mapping[str, Any], problems: list[str]) -> list[Change]:
    done = []
    for key in changes.get("env_unset", []):
        if key not in env:
            problems.append(f"lane.changes.env_unset: {key} is not in the baseline's launch.env")
            continue
        done.append(Change("env unset", key, before=(env.pop(key),)))
    for key, value in changes.get("env", {}).items():
        before = (env[key],) if key in env else ()
        env[key] = value
        done.append(Change("env set", key, before=before, after=(value,)))
    return done


def apply_changes(launch: Mapping[str, Any], changes: Mapping[str, Any]) -> Overlay:
    """The baseline's ``launch`` with ``changes`` (a schema-valid ``[lane.changes]``) applied:
    removals, then replacements, then additions at the end; ``launch.append`` is folded into
    the command."""
    argv = [*launch.get("command", []), *launch.get("append", [])]
    env = dict(launch.get("env", {}))
    problems: list[str] = []
    done = [
        *_remove(argv, changes.get("remove", []), problems),
        *_replace(argv, changes.get("replace", {}), problems),
        *_add(argv, changes.get("add", []), problems),
        *_env(env, changes, problems),
    ]
    merged = {k: v for k, v in launch.items() if k != "append"} | {"command": argv}
    if env or "env" in launch:
        merged["env"] = env
    return Overlay(merged, tuple(done), tuple(problems))


def lane_overlay(
    own: Mapping[str, Any], base: Mapping[str, Any], spec: Mapping[str, Any]
) -> Overlay | None:
    """For a schema-valid ``spec`` merged from the file's ``own`` tables over what it includes
    (``base``): the lane's launch with its changes applied, or None when it is no lane of an
    included baseline. Problems name the field."""
    lane = spec.get("lane", {})
    after = lane.get("after")
    includes = [Path(rel).stem for rel in own.get("include", [])]
    stated = own.get("lane", {}).get("changes")
    if not after or after not in includes:
        if stated is None:
            return None
        where = f'include "{after}.toml"' if after else "name it in lane.after and include it"
        problem = f"lane.changes: changes apply to the baseline the file includes: {where}"
        return Overlay(dict(spec["launch"]), (), (problem,))
    problems = [
        f"launch.{key}: a lane states only what it changes against its baseline {after!r}: "
        "put it in [lane.changes] (add, replace, remove, env, env_unset)"
        for key in _RESTATED
        if key in own.get("launch", {})
    ]
    if "changes" in base.get("lane", {}):
        problems.append(
            f"include: {after}.toml is itself a lane with [lane.changes]; include a baseline"
        )
    if problems:
        return Overlay(dict(spec["launch"]), (), tuple(problems))
    return apply_changes(spec["launch"], stated or {})


_SHOWN_CHARS = 160  # a longer value (a chat template) is cut: the launch below shows it whole


def _shown(change: Change, values: tuple[str, ...], fill: Callable[[str], str]) -> str:
    if change.kind.startswith("env") and is_secret_name(change.name):
        return MASK if values else ""
    text = " ".join(fill(v) for v in values)
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}… ({len(text)} chars)"


def plan_lines(
    spec: Mapping[str, Any], changes: Sequence[Change], fill: Callable[[str], str] = str
) -> list[str]:
    """For ``--plan``: what a lane with ``[lane.changes]`` changes against its baseline, one
    line a change, values through ``fill`` (the candidate's placeholders), secret-looking
    variables masked; nothing for any other candidate."""
    lane = spec.get("lane", {})
    if "changes" not in lane or not lane.get("after"):
        return []
    if not changes:
        return [f"its launch is {lane['after']}'s, unchanged"]
    lines = [f"against its baseline {lane['after']}:"]
    for change in changes:
        before, after = _shown(change, change.before, fill), _shown(change, change.after, fill)
        if change.kind == "replaced":
            text = f"{change.name} {before} -> {after}"
        elif change.kind == "env set":
            was = f" (baseline: {before})" if change.before else " (baseline: unset)"
            text = f"{change.name}={after}{was}"
        else:
            text = " ".join(p for p in (change.name, before or after) if p)
        lines.append(f"  {change.kind:<9} {text}")
    return lines
