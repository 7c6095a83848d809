"""Placing qualification jobs on several GPU hosts, and simulating the campaign that results.

A job is one candidate's qualification (one serve, all its gates) and takes ``seconds`` on any
host that may run it. A *lane* is an optional extra run of a baseline's serve (``after`` names
the baseline): it may only start once its baseline has passed, so a lane placed on another host
than its baseline idles there until the baseline ends. A lane whose baseline is not among the
jobs is taken to have passed already (a recorded PASS finding) and waits for nothing.

Contract:

- ``place(jobs, hosts, rule)`` returns a :class:`Placement`: ``by_host`` maps every host name to
  the ordered job names it runs (a host with nothing to run maps to ``[]``); ``unplaced`` maps
  each job that no host may run to the reason. Every job is in exactly one of the two. The
  result depends only on the jobs and the set of host names, never on the order either is given
  in, except that ``"in-order"`` follows the order of ``jobs``: ties are broken by name (jobs by
  job name, hosts by host name), and hosts are taken in name order.
- Rules: ``"in-order"`` deals jobs out round-robin in the given order (the naive baseline);
  ``"longest-first"`` is LPT: jobs by seconds descending, each to the eligible host with the
  least load so far, lanes treated as independent jobs; ``"lanes-with-baseline"`` (default) is
  LPT over units, a unit being the jobs linked by ``after`` (a lane's baseline) or ``joins`` (a
  job's gate-07 reference, which must run where the job can see it: the same host, first), their
  seconds summed, placed together on a host eligible for all of them: each job after the jobs it
  links to, ties by name (a baseline, then its lanes by name; a reference, then the jobs joining
  it). Only this rule honours ``joins``; the other two place such jobs independently.
- Under the first two rules a lane never runs before a non-lane job of its host (each host's list
  is its non-lanes in placement order, then its lanes in placement order), so no host ever waits
  for a job queued behind a waiting one: the placement cannot deadlock.
- A job is unplaced when no host is eligible (``hosts`` given and none of them listed), when its
  baseline is unplaced, or, under ``"lanes-with-baseline"``, when the job it joins is unplaced or
  no host eligible for the unit's jobs placed before it may also run it.
- ``simulate(jobs, placement)`` runs each host's list in order, one job at a time, from t = 0; a
  job starts when its host is free and, for a lane, when its baseline has ended. It returns a
  :class:`Simulation`: wall seconds (last end), per-host busy seconds, per-host utilisation
  (busy / wall; 0 when wall is 0), idle seconds spent waiting for baselines (per host and in
  total) and each job's start and end.
- Pure: no pytest, no I/O. Malformed input (duplicate names, a lane after a lane or after
  itself, a job joining itself, negative seconds, an unknown rule, an unknown or unplaced job in
  a placement, a placement that deadlocks) raises ``ValueError``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

RULES = ("in-order", "longest-first", "lanes-with-baseline")
DEFAULT_RULE = "lanes-with-baseline"


@dataclass(frozen=True)
class Job:
    """One qualification run: ``seconds`` on one host; ``after`` names the baseline a lane waits
    for; ``hosts`` the host names that may run it (None: any); ``joins`` the job it must share a
    host with and run after (its gate-07 reference), without waiting for it to pass."""

    name: str
    seconds: float
    after: str | None = None
    hosts: frozenset[str] | None = None
    joins: str | None = None

    def may_run_on(self, host: str) -> bool:
        return self.hosts is None or host in self.hosts


Unit = tuple[list[Job], list[str]]  # a baseline, then its lanes; the hosts eligible for all


@dataclass(frozen=True)
class Host:
    """A GPU host that runs one qualification at a time."""

    name: str


@dataclass(frozen=True)
class Placement:
    """Which host runs which jobs, in order, and the jobs no host may run (name -> reason)."""

    rule: str
    by_host: dict[str, list[str]]
    unplaced: dict[str, str] = field(default_factory=dict)

    def host_of(self, job: str) -> str | None:
        return next((host for host, names in self.by_host.items() if job in names), None)


@dataclass(frozen=True)
class Run:
    """One job's place in a simulation; ``waited`` is idle time before it, waiting for its
    baseline."""

    job: str
    host: str
    start: float
    end: float
    waited: float


@dataclass(frozen=True)
class Simulation:
    """A simulated campaign. Times in seconds from the start (t = 0)."""

    wall_seconds: float
    busy_seconds: dict[str, float]
    utilisation: dict[str, float]
    waiting_seconds: dict[str, float]
    runs: dict[str, Run]

    @property
    def total_waiting_seconds(self) -> float:
        return sum(self.waiting_seconds.values())


def _check_jobs(jobs: Sequence[Job]) -> dict[str, Job]:
    by_name: dict[str, Job] = {}
    for job in jobs:
        if job.name in by_name:
            raise ValueError(f"job {job.name!r} given twice")
        if job.seconds < 0:
            raise ValueError(f"job {job.name!r}: negative seconds {job.seconds}")
        if job.after == job.name:
            raise ValueError(f"job {job.name!r} is a lane after itself")
        if job.joins == job.name:
            raise ValueError(f"job {job.name!r} joins itself")
        by_name[job.name] = job
    for job in jobs:
        baseline = by_name.get(job.after) if job.after else None
        if baseline is not None and baseline.after is not None:
            raise ValueError(f"lane {job.name!r} is after {baseline.name!r}, itself a lane")
    return by_name


def _check_hosts(hosts: Sequence[str]) -> list[str]:
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"host names given twice: {sorted(hosts)}")
    return sorted(hosts)


def _eligible(job: Job, hosts: Sequence[str]) -> list[str]:
    return [host for host in hosts if job.may_run_on(host)]


def _no_host_reason(job: Job) -> str:
    listed = ", ".join(sorted(job.hosts or ())) or "none"
    return f"no host may run it (its hosts: {listed})"


def _least_loaded(candidates: Sequence[str], load: Mapping[str, float]) -> str:
    return min(candidates, key=lambda host: (load[host], host))


def _lanes_last(by_host: dict[str, list[str]], by_name: Mapping[str, Job]) -> None:
    """Each host's non-lanes, then its lanes, each in placement order (no deadlock)."""
    for host, names in by_host.items():
        first = [n for n in names if not _waits(by_name[n], by_name)]
        by_host[host] = first + [n for n in names if _waits(by_name[n], by_name)]


def _waits(job: Job, by_name: Mapping[str, Job]) -> bool:
    return job.after is not None and job.after in by_name


def _orphans(
    by_host: dict[str, list[str]], unplaced: dict[str, str], by_name: Mapping[str, Job]
) -> None:
    """Lanes whose baseline is unplaced can never start: take them out, with the reason."""
    for names in by_host.values():
        for name in list(names):
            after = by_name[name].after
            if after is not None and after in unplaced:
                names.remove(name)
                unplaced[name] = f"its baseline {after!r} is not placed"


def _place_single(jobs: Sequence[Job], hosts: list[str], rule: str) -> Placement:
    by_name = {job.name: job for job in jobs}
    by_host: dict[str, list[str]] = {host: [] for host in hosts}
    unplaced: dict[str, str] = {}
    load = dict.fromkeys(hosts, 0.0)
    order = jobs if rule == "in-order" else sorted(jobs, key=lambda j: (-j.seconds, j.name))
    turn = itertools.cycle(range(len(hosts))) if hosts else iter(())
    for job in order:
        eligible = _eligible(job, hosts)
        if not eligible:
            unplaced[job.name] = _no_host_reason(job)
            continue
        if rule == "in-order":
            host = next(hosts[i] for i in turn if hosts[i] in eligible)
        else:
            host = _least_loaded(eligible, load)
        by_host[host].append(job.name)
        load[host] += job.seconds
    _orphans(by_host, unplaced, by_name)
    _lanes_last(by_host, by_name)
    return Placement(rule, by_host, unplaced)


def _links(job: Job, by_name: Mapping[str, Job]) -> list[str]:
    """The jobs ``job`` shares a host with and runs after: its baseline, the job it joins."""
    named = (n for n in (job.after, job.joins) if n is not None)
    return [n for n in dict.fromkeys(named) if n in by_name and n != job.name]


def _linked_order(jobs: Sequence[Job]) -> list[Job]:
    """Every job after the jobs it links to, ties by name (a loop keeps name order)."""
    by_name = {job.name: job for job in jobs}
    order: list[str] = []

    def visit(name: str, path: frozenset[str]) -> None:
        if name in order or name in path:
            return
        for link in sorted(_links(by_name[name], by_name)):
            visit(link, path | {name})
        if name not in order:
            order.append(name)

    for name in sorted(by_name):
        visit(name, frozenset())
    return [by_name[name] for name in order]


def _components(jobs: Sequence[Job]) -> list[list[Job]]:
    """The jobs linked by ``after`` or ``joins``, each component in linked order."""
    by_name = {job.name: job for job in jobs}
    root = {name: name for name in by_name}

    def find(name: str) -> str:
        while root[name] != name:
            name = root[name]
        return name

    for job in jobs:
        for link in _links(job, by_name):
            root[find(job.name)] = find(link)
    found: dict[str, list[Job]] = {}
    for job in _linked_order(jobs):
        found.setdefault(find(job.name), []).append(job)
    return list(found.values())


def _units(jobs: Sequence[Job], hosts: list[str]) -> tuple[list[Unit], dict[str, str]]:
    """(members, eligible hosts) per unit, each member after what it links to; and the jobs
    that fit no unit, with the reason."""
    by_name = {job.name: job for job in jobs}
    units: list[Unit] = []
    unplaced: dict[str, str] = {}
    for component in _components(jobs):
        members: list[Job] = []
        eligible: list[str] | None = None
        for job in component:
            why = _why_apart(job, by_name, unplaced, eligible, hosts)
            if why:
                unplaced[job.name] = why
                continue
            members.append(job)
            own = _eligible(job, hosts)
            eligible = own if eligible is None else [h for h in eligible if h in own]
        if members:
            units.append((members, eligible or []))
    return units, unplaced


def _why_apart(
    job: Job,
    by_name: Mapping[str, Job],
    unplaced: Mapping[str, str],
    eligible: list[str] | None,
    hosts: list[str],
) -> str | None:
    """Why ``job`` cannot join its unit's host, or None."""
    kind = {job.after: "baseline", job.joins: "reference"}
    for link in _links(job, by_name):
        if link in unplaced:
            return f"its {kind[link]} {link!r} is not placed"
    own = _eligible(job, hosts)
    if not own:
        return _no_host_reason(job)
    if eligible is not None and not [h for h in eligible if h in own]:
        link = next(iter(_links(job, by_name)), "")
        return (
            f"no host may run it together with its {kind.get(link, 'unit')} {link!r}"
            f" (eligible hosts so far: {', '.join(eligible) or 'none'})"
        )
    return None


def _place_units(jobs: Sequence[Job], hosts: list[str]) -> Placement:
    units, unplaced = _units(jobs, hosts)
    by_host: dict[str, list[str]] = {host: [] for host in hosts}
    load = dict.fromkeys(hosts, 0.0)
    units.sort(key=lambda unit: (-sum(j.seconds for j in unit[0]), unit[0][0].name))
    for members, eligible in units:
        host = _least_loaded(eligible, load)
        by_host[host].extend(job.name for job in members)
        load[host] += sum(job.seconds for job in members)
    return Placement("lanes-with-baseline", by_host, unplaced)


def place(jobs: Sequence[Job], hosts: Sequence[str], rule: str = DEFAULT_RULE) -> Placement:
    """Place ``jobs`` on ``hosts`` (names) under ``rule``; see the module docstring."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; one of {', '.join(RULES)}")
    _check_jobs(jobs)
    names = _check_hosts(hosts)
    if rule == "lanes-with-baseline":
        return _place_units(jobs, names)
    return _place_single(jobs, names, rule)


def _check_placement(by_name: Mapping[str, Job], by_host: Mapping[str, Sequence[str]]) -> None:
    seen: set[str] = set()
    for host, names in by_host.items():
        for name in names:
            if name not in by_name:
                raise ValueError(f"host {host!r} runs {name!r}, which is not a job")
            if name in seen:
                raise ValueError(f"job {name!r} placed twice")
            seen.add(name)
    for name in seen:
        after = by_name[name].after
        if after is not None and after in by_name and after not in seen:
            raise ValueError(f"lane {name!r} is placed but its baseline {after!r} is not")


def simulate(jobs: Sequence[Job], placement: Placement | Mapping[str, Sequence[str]]) -> Simulation:
    """Run each host's list in order, one job at a time; a lane starts no earlier than its
    baseline's end. Raises ``ValueError`` when the placement deadlocks."""
    by_name = _check_jobs(jobs)
    by_host = placement.by_host if isinstance(placement, Placement) else placement
    _check_placement(by_name, by_host)
    ends: dict[str, float] = {}
    runs: dict[str, Run] = {}
    free = dict.fromkeys(by_host, 0.0)
    queues = {host: list(names) for host, names in by_host.items()}
    # Advance any host whose next job can be timed; the result does not depend on which first.
    progress = True
    while progress:
        progress = False
        for host in sorted(queues):
            while queues[host]:
                job = by_name[queues[host][0]]
                blocker = job.after if _waits(job, by_name) else None
                if blocker is not None and blocker not in ends:
                    break
                start = max(free[host], ends[blocker] if blocker is not None else 0.0)
                end = start + job.seconds
                runs[job.name] = Run(job.name, host, start, end, start - free[host])
                ends[job.name], free[host] = end, end
                queues[host].pop(0)
                progress = True
    stuck = [names[0] for names in queues.values() if names]
    if stuck:
        raise ValueError(f"placement deadlocks: {', '.join(sorted(stuck))} wait forever")
    wall = max(ends.values(), default=0.0)
    busy = {host: sum(by_name[n].seconds for n in names) for host, names in by_host.items()}
    waiting = {host: sum(runs[n].waited for n in names) for host, names in by_host.items()}
    use = {host: (busy[host] / wall if wall > 0 else 0.0) for host in by_host}
    return Simulation(wall, busy, use, waiting, runs)
