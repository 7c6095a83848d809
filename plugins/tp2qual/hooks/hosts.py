"""Hosts plugin: ``--hosts FILE`` qualifies candidates on several Docker hosts in one run.

The engines are pytest-xdist and Docker's own remote endpoints; nothing here schedules or
transports anything itself:

- one xdist worker per host (``-n`` is set to the number of hosts);
- the placement (``perf/schedule.place``, rule ``lanes-with-baseline``: a baseline and its lanes
  on one host, longest first) is computed from the collection, the same on every worker and on
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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tp2qual.candidate import Candidate
from tp2qual.evidence.finding import Finding
from tp2qual.evidence.layout import FINDING, REPORT, atomic_write
from tp2qual.hooks.candidates import run_key, why_not_runnable
from tp2qual.hooks.evidence import seal_run
from tp2qual.hooks.gating import candidate_of
from tp2qual.hooks.gpus import snapshot_reader_key
from tp2qual.hosts import Host, HostsError, bind, bound, load_hosts
from tp2qual.perf.schedule import Job, place

RUN_ID_INPUT, DOWN_INPUT = "tp2qual_run_id", "tp2qual_hosts_down"
DEFAULT_SECONDS = 1800.0  # a candidate never run before: the campaign's typical half hour
RUN_FOLDER = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]+$")  # qualification runs, not benchmarks' folders


@dataclass
class Fleet:
    """The hosts of this run, which are down, and where each selected candidate runs."""

    hosts: list[Host]
    down: dict[str, str] = field(default_factory=dict)  # host name -> why it cannot be reached
    placement: dict[str, str] = field(default_factory=dict)  # candidate -> host name
    bound: Host | None = None  # the host this worker drives

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)


fleet_key = pytest.StashKey[Fleet]()


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
        _sweep_leftovers(fleet, state.run_id, state.run_dir / "leftovers")
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
    state.not_run.update(why_not_run(chosen, fleet, pull=bool(config.getoption("pull", False))))


def placement_for(
    candidates: list[Candidate], fleet: Fleet, results: Path, run_id: str
) -> dict[str, str]:
    """candidate -> host. Deterministic, from what every process sees alike (the collection,
    the hosts file, earlier runs' findings), so workers and controller agree without talking."""
    names = {c.name for c in candidates}
    jobs = [
        Job(
            c.name,
            seconds_of(results, c.name, run_id),
            after=after if (after := c.spec.get("lane", {}).get("after")) in names else None,
            hosts=frozenset(h.name for h in fleet.hosts if h.why_not(c) is None),
        )
        for c in candidates
    ]
    plan = place(jobs, [h.name for h in fleet.hosts])
    return {job: host for host, jobs_ in plan.by_host.items() for job in jobs_}


def why_not_run(candidates: list[Candidate], fleet: Fleet, *, pull: bool) -> dict[str, str]:
    """candidate -> why it runs nowhere in this run (no host fits, host down, image missing)."""
    why_not = {}
    for candidate in candidates:
        host = fleet.placement.get(candidate.name)
        if host is None:
            why_not[candidate.name] = _nowhere(fleet, candidate)
        elif host in fleet.down:
            why_not[candidate.name] = f"host {host} cannot be reached ({fleet.down[host]})"
        elif why := _unrunnable(fleet.host(host), candidate, pull=pull):
            why_not[candidate.name] = f"on host {host}: {why}"
    return why_not


def _unrunnable(host: Host, candidate: Candidate, *, pull: bool) -> str | None:
    if candidate.launcher_kind == "docker":
        return _image_unresolved(host, candidate, pull=pull)
    return why_not_runnable(candidate)  # a process on this machine: this machine's checks


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
                chosen = [c for c in state.candidates if _in_collection(c, self.collection)]
                spread.placement = placement_for(chosen, spread, state.results_root, state.run_id)
            found = candidate_in(nodeid, state.candidates)
            return spread.placement.get(found.name, "-") if found else nodeid

    return HostScheduling(config, log)


def candidate_in(nodeid: str, candidates: list[Candidate]) -> Candidate | None:
    """The candidate a gate test's id names (``test_x[<candidate>]`` or ``[<candidate>-<param>]``;
    the longest name wins, so a lane named after its baseline is told apart)."""
    params = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
    fits = [c for c in candidates if params == c.name or params.startswith(c.name + "-")]
    return max(fits, key=lambda c: len(c.name), default=None)


def _in_collection(candidate: Candidate, collection: list[str] | None) -> bool:
    return any(candidate_in(n, [candidate]) for n in collection or ())


def _image_unresolved(host: Host, candidate: Candidate, *, pull: bool) -> str | None:
    """Bad input found before anything starts: an unresolved pin, an image the host lacks or
    holds under another id (``--pull`` may fetch a missing one; its pin still holds)."""
    from tp2qual.serving.launchers.docker.engine import docker_client
    from tp2qual.serving.launchers.docker.pins import image_matches, pin_unresolved, resolve_pin

    if why := pin_unresolved(candidate):
        return why
    name, pin = candidate.launch["docker"]["image"], resolve_pin(candidate).value or ""
    with bound(host), docker_client() as client:
        try:
            attrs = client.images.get(name).attrs
        except Exception as exc:  # NotFound, or the engine refusing: the same answer here
            return None if pull else f"image {name} is not on the host ({type(exc).__name__})"
    if not image_matches(attrs, pin):
        return f"image {name} on the host is {attrs.get('Id')}, not the pin {pin}"
    return None


def _nowhere(fleet: Fleet, candidate: Candidate) -> str:
    reasons = "; ".join(
        f"{h.name}: {h.why_not(candidate) or 'its baseline runs elsewhere'}" for h in fleet.hosts
    )
    return f"no host can run it ({reasons})"


def seconds_of(results: Path, name: str, run_id: str) -> float:
    """How long the candidate took in its newest earlier finding (gate seconds, start-up
    included), or the default: placement balances hosts by what was measured, not by guesses."""
    runs = (p for p in results.glob("*") if RUN_FOLDER.match(p.name) and not p.is_symlink())
    for run in sorted(runs, key=lambda p: p.name, reverse=True):  # newest first
        path = run / name / FINDING
        if run.name == run_id or not path.is_file():
            continue
        try:
            finding = Finding.read(path)
        except (OSError, ValueError):
            continue
        seconds = sum(g.seconds for g in finding.gates.values())
        if seconds > 0:
            return seconds
    return DEFAULT_SECONDS


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


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    fleet = config.stash.get(fleet_key, None)
    if fleet is None or _is_worker(config):
        return
    state = config.stash[run_key]
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


def _sweep_leftovers(fleet: Fleet, run_id: str, folder: Path) -> None:
    """Before any worker starts: what crashed runs (or a killed worker) left on each host."""
    from tp2qual.serving.launchers.docker.engine import docker_client
    from tp2qual.serving.launchers.docker.sweep import sweep

    for host in fleet.hosts:
        if host.name not in fleet.down:
            with bound(host), docker_client() as client:
                removed = sweep(
                    client, reason="leftover", keep_run=run_id, save_to=folder / host.name
                )
            for what in removed:
                print(f"tp2qual: removed from host {host.name}, left by an earlier run: {what}")


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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The controller's one line per candidate, read from the findings the workers wrote."""
    config = terminalreporter.config
    fleet = config.stash.get(fleet_key, None)
    state = config.stash.get(run_key, None)
    if fleet is None or state is None or state.records or _is_worker(config):
        return
    findings = sorted(state.run_dir.glob(f"*/{FINDING}"))
    if not findings:
        return
    terminalreporter.section("qualification on hosts")
    for path in findings:
        finding = Finding.read(path)
        host = (finding.identity.get("docker_host") or {}).get("name") or "-"
        why = _why(finding)
        terminalreporter.line(f"{finding.verdict:<10} {finding.candidate}  on {host}  {why}")
    terminalreporter.line(
        f"report: {os.path.relpath(state.run_dir / REPORT)}  "
        f"(check it: python -m tp2qual verify {os.path.relpath(state.run_dir)})"
    )


def _why(finding: Finding) -> str:
    for gate, result in finding.gates.items():
        if result.outcome in ("failed", "error") or (result.outcome == "not_run" and result.reason):
            return f"{result.outcome} {gate}: {result.reason[:140]}"
    return ""
