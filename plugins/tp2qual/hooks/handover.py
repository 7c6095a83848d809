"""Hand-over plugin: the serves the user names step aside before the first candidate and come
back after the last, proven healthy.

Named with ``--hand-over NAME|label=KEY=VALUE|project=PROJECT`` (repeatable) or in a selected
candidate's ``[handover]`` table (the campaign's shared file); nothing is stopped unless named.
The return runs at session finish however the loop ended: the last candidate done, a gate FAIL
or a dead server (the loop goes on to the end), Ctrl-C (pytest still finishes the session),
after the candidates' servers are gone.
A return that does not reach the recorded state is said on the terminal, in every finding
(``identity.handover``) and in the report, with the commands to restore it by hand.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tp2qual.checks import handover as rules
from tp2qual.checks.handover import Selector, parse_selector
from tp2qual.hooks.candidates import run_key
from tp2qual.hooks.gating import candidate_of
from tp2qual.serving.handover import (
    RECORD,
    HandOverPlan,
    HandOverRefused,
    give_back,
    gpus_free,
    hand_over,
)

_Wrapper = Generator[None, object, object]
record_key = pytest.StashKey[Path]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tp2qual")
    group.addoption(
        "--hand-over",
        action="append",
        default=[],
        metavar="NAME|label=K=V|project=P",
        help="a serve that must be offline while the candidates run: stopped (never removed)"
        " before the first, started again and waited for until healthy after the last",
    )
    group.addoption(
        "--hand-over-url",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="how a handed-over container without a Docker healthcheck proves it is back: a URL"
        " that answers a GET with 2xx (e.g. http://127.0.0.1:8000/v1/models)",
    )


def plan_of(config: pytest.Config, candidates: list[Any]) -> HandOverPlan | None:
    """The command line's and the selected candidates' ``[handover]`` tables, together; None
    when nothing is named. ValueError names the option or file and what is wrong."""
    selectors: list[Selector] = [
        parse_selector(t, "--hand-over") for t in config.getoption("hand_over")
    ]
    urls = dict(_url(t) for t in config.getoption("hand_over_url"))
    stop_s, healthy_s = rules.STOP_TIMEOUT_S, rules.HEALTHY_TIMEOUT_S
    for candidate in candidates:
        table: Mapping[str, Any] = candidate.spec.get("handover") or {}
        where = f"{candidate.path} [handover]"
        selectors += [parse_selector(n, where) for n in table.get("containers", [])]
        selectors += [parse_selector(f"label={v}", where) for v in table.get("labels", [])]
        selectors += [
            parse_selector(f"project={v}", where) for v in table.get("compose_projects", [])
        ]
        urls = {**table.get("health_urls", {}), **urls}  # the command line wins
        stop_s = max(stop_s, float(table.get("stop_timeout_s", 0)))
        healthy_s = max(healthy_s, float(table.get("healthy_timeout_s", 0)))
    unique = tuple(dict.fromkeys(selectors))
    return HandOverPlan(unique, urls, stop_s, healthy_s) if unique else None


def _url(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name or not url.startswith(("http://", "https://")):
        raise ValueError(f"--hand-over-url: {text!r}: expected NAME=http://HOST:PORT/PATH")
    return name, url


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Before the first candidate: record, check, stop. The return is at session finish."""
    config = session.config
    if config.getoption("plan", False) or session.config.option.collectonly:
        return
    chosen = {c.name: c for i in session.items if (c := candidate_of(i)) is not None}
    try:
        plan = plan_of(config, list(chosen.values()))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if plan is None or not chosen:
        return
    say = config.get_terminal_writer().line
    path = config.stash[run_key].run_dir / RECORD
    config.stash[record_key] = path  # from here on, session finish gives back what the record holds
    record = _hand_over(config, plan, path)
    say(f"tp2qual: handed over {_names(record)} (record: {path})")


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> _Wrapper:
    """The return, however the loop ended (last candidate, a FAIL, a dead server, Ctrl-C, a
    refusal midway): after the candidates' servers are torn down (inside this wrapper), so the
    live serve never starts beside a candidate on the GPUs, and before the run is closed (the
    evidence plugin's wrapper is outside this one), so the final manifest and report hold it."""
    try:
        return (yield)
    finally:
        path = session.config.stash.get(record_key, None)
        if path is not None and path.exists():
            _give_back(session, path, session.config.get_terminal_writer().line)


def _hand_over(config: pytest.Config, plan: HandOverPlan, path: Any) -> dict[str, Any]:
    from tp2qual.serving.launchers.docker.engine import docker_client, unavailable

    if config.getoption("hosts", None):
        raise pytest.UsageError(
            "--hand-over names serves on this machine's engine; not with --hosts"
        )
    if why := unavailable():
        raise pytest.UsageError(f"hand-over of {', '.join(map(str, plan.selectors))}: {why}")
    path.parent.mkdir(parents=True, exist_ok=True)
    import docker.errors

    try:
        with docker_client() as client:
            return hand_over(client, plan, path, gpus_free)
    except HandOverRefused as exc:  # what was stopped before it is given back at session finish
        raise pytest.UsageError(str(exc)) from None
    except docker.errors.DockerException as exc:  # the engine's own refusal, in its words
        raise pytest.UsageError(f"hand-over: the Docker engine refused: {exc}") from None


def _names(record: Mapping[str, Any]) -> str:
    stops = record.get("stops") or []
    stopped = ", ".join(f"{s['name']} (stopped in {s['seconds']} s)" for s in stops)
    left = [s["name"] for s in record["before"] if not rules.to_stop([s])]
    return stopped + (f"; already stopped, left as found: {', '.join(left)}" if left else "")


def _give_back(session: pytest.Session, path: Path, say: Any) -> None:
    from tp2qual.serving.launchers.docker.engine import docker_client

    try:
        with docker_client() as client:
            record = give_back(client, path, gpus_free, say)
    except (Exception, KeyboardInterrupt) as exc:  # the engine gone, a second Ctrl-C: say how
        say(
            f"tp2qual: HAND-OVER NOT GIVEN BACK ({type(exc).__name__}: {exc}): the serves are"
            f" still stopped; give them back with: python -m tp2qual restore {path.parent}",
            red=True,
            bold=True,
        )
        return
    if record["restored"]:
        say(f"tp2qual: hand-over given back: every serve as found, down {record['down_s']} s")
    else:
        say(f"tp2qual: HAND-OVER NOT RESTORED: {record['problems']}", red=True, bold=True)
    _note_in_findings(session, record)


def _note_in_findings(session: pytest.Session, record: Mapping[str, Any]) -> None:
    state = session.config.stash.get(run_key, None)
    for candidate_record in state.records.values() if state is not None else []:
        candidate_record.identity["handover"] = {
            "record": f"../{RECORD}",
            "restored": record["restored"],
            "down_s": record.get("down_s"),
            "problems": record["problems"],
            "commands": record["commands"],
        }
        candidate_record.save()
