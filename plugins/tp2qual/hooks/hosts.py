"""Hosts plugin: ``--hosts FILE`` qualifies candidates on several Docker hosts in one run.

The engines are pytest-xdist and Docker's own remote endpoints; nothing here schedules or
transports anything itself:

- one xdist worker per host (``-n`` is set to the number of hosts);
- the placement (``perf/schedule.place``, rule ``lanes-with-baseline``: a baseline and its lanes
  on one host, a gate-07 reference with the candidates judged against it, longest first) is
  computed from the collection, the same on every worker and on
  the controller; xdist's own scope scheduler (``LoadScopeScheduling``) is handed one scope per
  host, so all of one host's candidates go, in gate order, to one worker, which points Docker at
  that host (``hosts.bind``) before its first test. (Not ``--dist loadgroup``: on pytest 9.2 its
  group names no longer reach the scheduler, pytest-dev/pytest-xdist#1386.)
- the controller pings every host once before any worker starts, sweeps leftovers by label on
  each, and at the end sweeps this run's containers on every host (a dead worker or Ctrl-C leaves
  none behind) and closes the run: one manifest, one verification, one report.

A host that cannot be reached, or a candidate no host can run, leaves a finding whose gates are
NOT_RUN with the reason: INCOMPLETE, never FAIL.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tp2qual.artifacts.finding import Finding, read_finding
from tp2qual.artifacts.layout import FINDING, atomic_write
from tp2qual.candidate import Candidate
from tp2qual.evidence.run import RunState
from tp2qual.hooks.candidates import run_key, why_not_runnable
from tp2qual.hooks.evidence import finding_properties, seal_run, write_summary
from tp2qual.hooks.gating import BROUGHT_OUTPUT, candidate_of
from tp2qual.hooks.gpus import snapshot_reader_key
from tp2qual.hosts import Host, HostsError, bind, bound, load_hosts
from tp2qual.placement import (
    Fleet,
    candidate_in,
    in_collection,
    placement_for,
    why_not_run,
)

RUN_ID_INPUT, DOWN_INPUT = "tp2qual_run_id", "tp2qual_hosts_down"
fleet_key = pytest.StashKey[Fleet]()
brought_shown_key = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tp2qual")
    group.addoption(
        "--hosts",
        default=None,
        metavar="FILE",
        help="spread candidates over the Docker hosts of a TOML hosts file, one xdist worker each",
    )


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _hosts(config: pytest.Config) -> list[Host]:
    path = Path(config.getoption("hosts")).expanduser()
    try:
        return load_hosts(path)
    except HostsError as exc:
        raise pytest.UsageError(f"hosts file rejected, nothing was started:\n{exc}") from None


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """One xdist worker per host, tests grouped by host: set before xdist builds its session."""
    if not config.getoption("hosts") or _is_worker(config):
        return
    hosts = _hosts(config)
    if config.getoption("collectonly") or config.getoption("plan", False):
        return  # nothing starts: placement is shown in this process
    if not config.pluginmanager.hasplugin("xdist"):
        raise pytest.UsageError("--hosts needs pytest-xdist (pip install pytest-xdist)")
    wanted = config.getoption("numprocesses", None)
    if wanted not in (None, len(hosts)):
        raise pytest.UsageError(
            f"--hosts names {len(hosts)} host(s) and each is driven by one xdist worker: "
            f"leave -n out or give -n {len(hosts)} (not -n {wanted})"
        )
    config.option.numprocesses = len(hosts)
    config.option.dist = "loadscope"  # the scheduler is ours below; any mode but "no" will do
    config.option.tx = ["popen"] * len(hosts)


@pytest.hookimpl(trylast=True)  # after the candidates plugin made the run state
def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("hosts"):
        return
    state = config.stash[run_key]
    state.shared = True
    fleet = Fleet(_hosts(config))
    if _is_worker(config):
        inputs: dict[str, Any] = config.workerinput  # type: ignore[attr-defined]
        state.run_id = inputs[RUN_ID_INPUT]
        fleet.down = dict(inputs[DOWN_INPUT])
    else:
        fleet.down = _ping(fleet.hosts)
        _say_down(config, fleet.down)
        if not (config.getoption("collectonly") or config.getoption("plan", False)):
            _sweep_leftovers(config, fleet, state.run_id, state.run_dir / "leftovers")
    config.stash[fleet_key] = fleet
    config.stash[snapshot_reader_key] = lambda candidate: _host_snapshot(config, candidate)


def _ping(hosts: list[Host]) -> dict[str, str]:
    from tp2qual.serving.launchers.docker.engine import unavailable

    down = {}
    for host in hosts:
        with bound(host):
            if why := unavailable():
                down[host.name] = why
    return down


def _say_down(config: pytest.Config, down: dict[str, str]) -> None:
    for name, why in down.items():  # once, by the controller
        config.get_terminal_writer().line(
            f"tp2qual: host {name} cannot be reached ({why}): its candidates are INCOMPLETE"
        )


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown when xdist is not installed
def pytest_configure_node(node: Any) -> None:
    """xdist (controller): every worker writes the same run and knows which hosts are down."""
    config = node.config
    if fleet_key not in config.stash:
        return
    node.workerinput[RUN_ID_INPUT] = config.stash[run_key].run_id
    node.workerinput[DOWN_INPUT] = config.stash[fleet_key].down


# ---------------------------------------------------------------- placement (every worker)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Placed from the final selection (after ``-k``), as the controller sees it too."""
    config = session.config
    fleet = config.stash.get(fleet_key, None)
    if fleet is None:
        return
    state = config.stash[run_key]
    selected = {c.name for item in session.items if (c := candidate_of(item)) is not None}
    chosen = [c for c in state.candidates if c.name in selected]
    fleet.placement = placement_for(chosen, fleet, state.results_root, state.run_id)
    state.not_run.update(
        why_not_run(
            chosen, fleet, pull=bool(config.getoption("pull", False)), here=why_not_runnable
        )
    )
    if config.getoption("plan", False):  # --plan shows where each launch would go
        writer = config.get_terminal_writer()
        for candidate in chosen:
            where = fleet.placement.get(candidate.name, "nowhere")
            why = state.not_run.get(candidate.name)
            writer.line(
                f"# {candidate.name} -> host {where}" + (f" (not run: {why})" if why else "")
            )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's own scope scheduler, its scopes being hosts: one worker takes one host's tests."""
    fleet = config.stash.get(fleet_key, None)
    if fleet is None:
        return None
    from xdist.scheduler import LoadScopeScheduling

    state, spread = config.stash[run_key], fleet

    class HostScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            if not spread.placement:  # the controller collects nothing: place from the ids
                chosen = [c for c in state.candidates if in_collection(c, self.collection)]
                spread.placement = placement_for(chosen, spread, state.results_root, state.run_id)
            found = candidate_in(nodeid, state.candidates)
            return spread.placement.get(found.name, "-") if found else nodeid

    return HostScheduling(config, log)


# ---------------------------------------------------------------- binding (a worker)


@pytest.hookimpl(tryfirst=True)  # before the gating plugin and any fixture
def pytest_runtest_setup(item: pytest.Item) -> None:
    fleet = item.config.stash.get(fleet_key, None)
    candidate = candidate_of(item)
    if fleet is None or candidate is None or candidate.name in item.config.stash[run_key].not_run:
        return
    host = fleet.host(fleet.placement[candidate.name])
    if fleet.bound != host:
        bind(host)  # for the rest of this worker's session: it owns this host
        fleet.bound = host
    record = item.config.stash[run_key].record(candidate)
    if "docker_host" not in record.identity:
        record.identity["docker_host"] = host.shown() | {"worker": _worker_id()}
        record.evidence.write_json("identity/docker_host.json", record.identity["docker_host"])
        record.save()


def _worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def _host_snapshot(config: pytest.Config, candidate: Candidate) -> dict[str, Any]:
    """NVML on the candidate's host, through a probe container of its own image (a process
    candidate runs on this machine: NVML here)."""
    from tp2qual import gpu
    from tp2qual.serving.launchers.docker.host_gpus import container_snapshot

    if candidate.launcher_kind != "docker":
        return gpu.snapshot()
    fleet = config.stash[fleet_key]
    host = fleet.host(fleet.placement[candidate.name])
    snapshot = container_snapshot(
        candidate.launch["docker"]["image"], gpus=host.gpus, run_id=config.stash[run_key].run_id
    )
    return snapshot | {"read_on": host.shown()}


# ---------------------------------------------------------------- the controller's end


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None]:
    """The controller, once every worker is done: JUnit's suite properties from the workers'
    findings (before JUnit writes), then every host swept and the run sealed (after the rest)."""
    config = session.config
    fleet = config.stash.get(fleet_key, None)
    if fleet is None or _is_worker(config):
        return (yield)
    state = config.stash[run_key]
    if not state.records:  # the workers ran it (else: --collect-only, --plan, in this process)
        _junit_properties(config, state.run_dir)
    try:
        return (yield)
    finally:
        _close(fleet, state, exitstatus)


def _junit_properties(config: pytest.Config, run_dir: Path) -> None:
    """xdist workers have no JUnit writer (``record_testsuite_property`` is a no-op there)."""
    from _pytest.junitxml import xml_key  # the writer pytest's own fixture records into

    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    for finding, root in _findings(run_dir):
        for name, value in finding_properties(finding, root):
            xml.add_global_property(name, value)


def _close(fleet: Fleet, state: RunState, exitstatus: int | pytest.ExitCode) -> None:
    _sweep_run(fleet, state.run_id)
    if fleet.placement and state.run_dir.is_dir():  # where each candidate was sent, and why
        placed = {"rule": "lanes-with-baseline", "placement": fleet.placement, "down": fleet.down}
        atomic_write(state.run_dir / "placement.json", json.dumps(placed, indent=2) + "\n")
    if state.records:
        return  # ran in this process (--collect-only, --plan): the evidence plugin closed it
    if any(state.run_dir.glob(f"*/{FINDING}")):
        interrupted = exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
        seal_run(state.run_dir, state.run_id, interrupted=interrupted)
        state.mark_latest()


def _sweep_leftovers(config: pytest.Config, fleet: Fleet, run_id: str, folder: Path) -> None:
    """Before any worker starts: what crashed runs (or a killed worker) left on each host."""
    from tp2qual.serving.launchers.docker.engine import docker_client
    from tp2qual.serving.launchers.docker.sweep import sweep

    for host in fleet.hosts:
        if host.name in fleet.down:
            continue
        try:
            with bound(host), docker_client() as client:
                removed = sweep(
                    client, reason="leftover", keep_run=run_id, save_to=folder / host.name
                )
        except Exception as exc:  # it answered the ping a moment ago: say so, go on
            config.get_terminal_writer().line(
                f"tp2qual: could not sweep host {host.name} ({type(exc).__name__}: {exc})"
            )
            continue
        for what in removed:
            config.get_terminal_writer().line(
                f"tp2qual: removed from host {host.name}, left by an earlier run: {what}"
            )


def _sweep_run(fleet: Fleet, run_id: str) -> None:
    """Every container of this run, on every host it may be on, goes (Ctrl-C, a dead worker)."""
    from tp2qual.serving.launchers.docker.engine import docker_client
    from tp2qual.serving.launchers.docker.sweep import sweep

    for host in fleet.hosts:
        if host.name in fleet.down:
            continue
        with bound(host):
            try:
                with docker_client() as client:
                    sweep(client, reason="run end", only_run=run_id)
            except Exception:  # a host lost during the run: its leftovers go at the next start
                continue


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist (controller): what a worker brought into the run (``gating.bring_references``),
    said once at the end, since a worker's terminal is not shown."""
    said = getattr(node, "workeroutput", {}).get(BROUGHT_OUTPUT) or []
    shown = node.config.stash.setdefault(brought_shown_key, [])
    shown.extend(line for line in said if line not in shown)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The controller's one line per candidate, read from the findings the workers wrote."""
    config = terminalreporter.config
    fleet = config.stash.get(fleet_key, None)
    state = config.stash.get(run_key, None)
    if fleet is None or state is None or state.records or _is_worker(config):
        return
    for line in config.stash.get(brought_shown_key, []):
        terminalreporter.write_line(line)
    if findings := _findings(state.run_dir):
        write_summary(terminalreporter, "qualification on hosts", state.run_dir, findings)


def _findings(run_dir: Path) -> list[tuple[Finding, Path]]:
    paths = sorted(run_dir.glob(f"*/{FINDING}"))
    return [(f, p.parent) for p in paths if (f := read_finding(p, run_dir)) is not None]
